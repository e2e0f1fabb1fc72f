"""Which trials with the same loss series the summary warns of: not those that differ only in
knobs that cannot change the arithmetic (DDP's, a knob the clipping policy leaves unread, a
clipping knob when no step was clipped), and the script advice only for a `workload.script`
study. A real SQLite Optuna study with made-up records (no Ray, no probe process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assets import studies as h

from autotune import space as sp
from autotune import study as st
from autotune.study import identical as ident

SAME = [2.0, 1.5, 1.2, 1.1]
BASE = {"lr": 0.1, "clip_policy": "norm", "clip_norm": 0.0, "bucket_cap_mb": 25.0}


def told(
    tmp_path: Path, knobs: list[dict[str, Any]], clip_fractions: list[float] | None = None
) -> Any:
    """A study whose trial i completed with the loss series `SAME`, knobs `knobs[i]` (over
    `BASE`) and clip_fraction `clip_fractions[i]` (none when not given), told through the
    study's own code (`records.tell`)."""
    import optuna

    study_dir = h.recorded_study(tmp_path, "i", trials=len(knobs), finished=0)
    study = optuna.load_study(study_name="i", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = sp.loads(h.mlp_space("i", trials=len(knobs)), source="i")
    for i, k in enumerate(knobs):
        frozen = study._storage.get_trial(study.ask()._trial_id)
        m = {"loss_cv": 0.1, "throughput": 100.0, "loss_drop": 0.5}
        if clip_fractions is not None:
            m["clip_fraction"] = clip_fractions[i]
        summary = {"metrics": m, "knobs": {**BASE, **k}, "series": {"loss": list(SAME)}}
        result = {"outcome": "complete", "summary": summary}
        st.tell(study, frozen, st.complete_outcome(space, frozen, result))
    return study


def test_trials_apart_only_in_ddp_knobs_are_not_warned_of(tmp_path: Path) -> None:
    study = told(tmp_path, [{}, {"bucket_cap_mb": 3.0, "static_graph": True}, {}])
    assert ident.identical_losses(study, False) == []


def test_a_clipping_policy_that_never_clipped_is_not_warned_of(tmp_path: Path) -> None:
    # zclip and a norm threshold never reached (clip_fraction 0) train as no clipping does
    zclip = {"clip_policy": "zclip", "zclip_z": 3.0}
    knobs = [{}, zclip, {"clip_norm": 50.0}]
    assert ident.identical_losses(told(tmp_path, knobs, [0.0, 0.0, 0.0]), False) == []


def test_a_clipping_policy_that_clipped_is_warned_of_by_name(tmp_path: Path) -> None:
    zclip = {"clip_policy": "zclip", "zclip_z": 3.0}
    groups = ident.identical_losses(told(tmp_path, [{}, zclip], [0.0, 0.2]), False)
    assert groups == [{"trials": [0, 1], "knobs": ["clip_policy", "zclip_z"], "script": False}]


def test_a_knob_its_policy_leaves_unread_is_not_warned_of(tmp_path: Path) -> None:
    # clip_norm under agc: a record of an older study held the space's midpoint there
    agc = {"clip_policy": "agc", "agc_lambda": 0.02}
    study = told(tmp_path, [agc, {**agc, "clip_norm": 0.7071067811865476}], [0.5, 0.5])
    assert ident.identical_losses(study, False) == []


def test_only_a_script_study_is_told_its_script_may_not_apply_the_knobs(tmp_path: Path) -> None:
    study = told(tmp_path, [{}, {"lr": 0.3}])
    script_space = "name: i\nworkload: {script: train.py}\nknobs: {lr: {low: 0.01, high: 1}}\n"
    space = sp.loads(script_space, source="i")  # as the summary is given it
    groups = ident.identical_losses(study, space.workload.script is not None)
    assert groups == [{"trials": [0, 1], "knobs": ["lr"], "script": True}]
    assert ident.warning_line(groups) == (
        "warning: trials 0 and 1 (lr) ran with different knobs and produced identical loss "
        "series: the script may not apply the recipe's knobs (build the optimizer, scheduler "
        "and clipping from `trial.recipe`, e.g. `trial.recipe.optimizer(...)`)"
    )
