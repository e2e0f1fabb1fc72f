"""The rung phase's branches where nothing searched is feasible, driven by real studies (real
local Ray, SQLite Optuna, SQLite MLflow; nothing mocked):

- the baseline is feasible at the screen and nothing searched is: no rung compares
  configurations, and the baseline alone goes on to the target, where the study decides (the
  yardstick at the length the user trains);
- nothing at all is feasible, not even the defaults (a screen too short to learn anything
  yet): the configurations closest to feasible go on, and are judged at longer lengths."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

# The defaults shed ~80% of their initial loss in 30 steps; an AdamW eps of 0.5-1 (a step ~lr x
# g / eps) sheds 35-45%: only the baseline meets `loss_drop >= 0.65` at the screen.
ONLY_THE_BASELINE = """\
name: branches
workload: {name: mlp, size: tiny}
probe: {steps: 30, batch: 32, device: cpu, telemetry_every: 10, threads: 1}
budget: {trials: 4, trial_timeout_s: 120, target_steps: 120}
constraints:
  - {metric: loss_drop, op: ">=", value: 0.65}
rungs: {eta: 2, min_promote: 2, grow: always}
sampler: {name: random, seed: 0}
verify: {top_k: 1, seeds: 2}
knobs:
  adam_eps: {low: 0.5, high: 1.0, log: true}
"""

# No probe sheds 99.9% of its initial loss: nothing is feasible at any length.
NOTHING_FEASIBLE = """\
name: nothing
workload: {name: mlp, size: tiny}
probe: {steps: 30, batch: 32, device: cpu, telemetry_every: 10, threads: 1}
budget: {trials: 4, trial_timeout_s: 120, target_steps: 120}
constraints:
  - {metric: loss_drop, op: ">=", value: 0.999}
rungs: {eta: 2, min_promote: 2, grow: always}
sampler: {name: random, seed: 0}
verify: {top_k: 1, seeds: 2}
knobs:
  clip_norm: {low: 0.1, high: 5.0, log: true}
  warmup_steps: {low: 0, high: 10}
"""


def cli(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A read-only command in-process (`assets.cli.in_process`)."""
    from assets.cli import in_process

    return in_process(args, cwd)


def study(tmp_path: Path, text: str) -> Any:
    """`autotune study` on the space `text` (real Ray, SQLite stores); it must exit 0."""
    space = h.write(tmp_path, text)
    uri = h.sqlite_uri(tmp_path)
    run = h.autotune(
        ["study", "--space", str(space), "--tracking-uri", uri],
        tmp_path,
        token=h.new_token(),
        timeout=400,
    )
    assert run.returncode == 0, h.explain(run)
    return run


def test_with_only_the_baseline_feasible_it_alone_goes_to_the_target(tmp_path: Path) -> None:
    run = study(tmp_path, ONLY_THE_BASELINE)
    assert "no feasible configuration to promote" in run.stdout, h.explain(run)
    assert "closest to feasible" not in run.stdout, h.explain(run)
    assert "rung 1:" not in run.stdout, "a rung compared configurations with nothing feasible"
    assert "rung 2: 120 steps for the baseline alone (trial 0)" in run.stdout, h.explain(run)
    assert "the baseline alone at 120 (nothing searched was feasible)" in run.stdout

    show = cli(["show", "branches", "--json"], tmp_path)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert summary["decided"]["steps"] == 120, summary["decided"]
    assert summary["decided"]["reason"].startswith("no feasible configuration to promote")
    assert [(r["steps"], r["numbers"]) for r in summary["rungs"][1:]] == [(120, [0])]
    study_dir = tmp_path / "autotune-studies" / "branches"
    records = sorted(p.name for p in (study_dir / "trials").glob("*-r*.json"))
    assert records == ["0000-r2.json"], records
    top = json.loads((study_dir / "trials" / "0000-r2.json").read_text())
    assert top["summary"]["steps_run"] == 120
    assert top["summary"]["resumed_from_step"] == 30, top["summary"]["continuation"]


def test_with_nothing_feasible_the_closest_go_on_and_no_pick_is_made(tmp_path: Path) -> None:
    run = study(tmp_path, NOTHING_FEASIBLE)
    # rungs 30 -> 60 -> 120; at each, ceil(4 / 2) = 2 searched configurations go on with the
    # baseline, the two with the largest loss_drop (the least violation of the constraint)
    assert "nothing is feasible at 30 steps, not even the defaults: the 2 closest" in run.stdout
    assert "nothing is feasible at 60 steps, not even the defaults" in run.stdout, run.stdout
    assert "for the baseline alone" not in run.stdout, h.explain(run)
    show = cli(["show", "nothing", "--json"], tmp_path)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert [r["steps"] for r in summary["rungs"][1:]] == [60, 120], summary["rungs"]
    assert all(len(r["numbers"]) == 3 and 0 in r["numbers"] for r in summary["rungs"][1:])
    # the closest at the screen are the searched trials with the largest loss_drop there
    study_dir = tmp_path / "autotune-studies" / "nothing"
    screen = {}
    for path in (study_dir / "trials").glob("000[0-9].json"):
        rec = json.loads(path.read_text())
        if not rec.get("baseline"):
            screen[rec["number"]] = rec["summary"]["metrics"]["loss_drop"]
    best2 = sorted(screen, key=lambda n: -screen[n])[:2]
    assert sorted(summary["rungs"][1]["numbers"]) == sorted([0, *best2]), (screen, summary)
    # Infeasible at the target too (no run sheds 99.9% of its loss): no pick, and it says so.
    assert (summary["pick"] or {}).get("number") is None, summary["pick"]
