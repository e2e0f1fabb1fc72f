"""An environment knob conditioning drops (NCCL/RCCL under gloo: it cannot act here) is never
set: not in any trial (unset, as in the baseline), not in a recipe's `source.searched`, and
`show` says it was not searched. A DDP review on the CPU found every non-baseline trial run and
exported with its first choice, a GPU setting nothing had measured."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from assets import studies as h
from typer.testing import CliRunner

from autotune import space as sp
from autotune import study as st
from autotune.cli import app
from autotune.study import export as ex

ENV = [
    "probe.world_size=2",
    "env.NCCL_BUFFSIZE={choices: [1048576, 4194304]}",
    "env.NCCL_PROTO={choices: [LL128, Simple]}",
    "env.NCCL_DEBUG=WARN",  # a fixed one is set in every trial
]
SEARCHED = {"clip_norm": 1.0, "warmup_steps": 3}


def _space(*sets: str) -> sp.Space:
    return sp.loads(h.mlp_space("nb", trials=3), source="nb", overrides=[*ENV, *sets])


def test_a_trial_leaves_a_dropped_env_knob_unset_as_the_baseline_does() -> None:
    space = _space()
    cond = sp.condition(space, platform="cpu")
    assert {"NCCL_BUFFSIZE", "NCCL_PROTO"} <= set(cond.dropped)
    _, base_env = st.trial_setup(space, {}, baseline=True)
    _, env = st.trial_setup(space, SEARCHED, baseline=False)
    assert env == base_env == {"NCCL_DEBUG": "WARN"}


def test_a_kept_env_knob_runs_at_the_value_the_trial_was_given() -> None:
    space = _space("probe.device=cuda")  # NCCL on GPUs: the knobs act and are searched
    assert "NCCL_PROTO" in sp.condition(space, platform="cuda", arch="sm_90").searched
    params = {**SEARCHED, "NCCL_BUFFSIZE": 4194304, "NCCL_PROTO": "Simple"}
    _, env = st.trial_setup(space, params, baseline=False)
    assert env == {"NCCL_DEBUG": "WARN", "NCCL_BUFFSIZE": "4194304", "NCCL_PROTO": "Simple"}


def test_a_recipe_and_show_do_not_call_a_dropped_knob_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = h.recorded_study(tmp_path, "nb", trials=3, finished=3, overrides=ENV)
    r = ex.recipe_from_study(str(folder), "trial 1")
    assert set(r.source["searched"]) == {"clip_norm", "warmup_steps"}
    assert yaml.safe_load(ex.write(r, "yaml", None))["source"]["searched"] == sorted(SEARCHED)
    monkeypatch.chdir(tmp_path)
    shown = CliRunner().invoke(app, ["show", "nb"])
    assert shown.exit_code == 0, shown.output
    assert "not searched: NCCL_PROTO (NCCL/RCCL variables act only on GPU" in shown.output
