"""When nothing trains here, the baseline included, migrate says so instead of blaming the
recipe's knobs; verify's paired verdict and promise say that nothing was compared.

From a black-box review: under a memory limit where even the workload's data did not fit,
`autotune migrate` said "does not transfer: re-tune accum_steps" (exit 1) and its report a paired
"no detectable difference over 0 paired seeds", and verify "diverged: measured 0% -> as
promised", with every seed of both sides failed."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from assets.big_setup import BIG_SETUP
from assets.recipes import make_recipe

from autotune import Recipe
from autotune.migrate import holds
from autotune.migrate.run import verdict_of
from autotune.recipe import paired
from autotune.recipe.promise import _divergence_promise
from autotune.recipe.seeds import summarize_seeds

METRICS = [("final_loss", "minimize"), ("noise_per_drop", "minimize")]


def failed(seed: int, outcome: str = "failed") -> dict[str, Any]:
    return {"seed": seed, "outcome": outcome, "error": "RuntimeError: no", "summary": None}


def test_no_seed_run_whole_on_both_sides_is_not_compared() -> None:
    mine = summarize_seeds([failed(1), failed(2, "oom")])
    base = summarize_seeds([failed(1), failed(2)])
    v = paired.compare(mine, base, METRICS)
    assert v["verdict"] == "not compared"
    assert v["compared_seeds"] == []
    assert "no seed ran its whole length on both sides" in v["why"]
    assert "failed on 1 of 2 seeds, oom on 1 of 2 seeds" in v["why"], v["why"]
    assert "the baseline failed on 2 of 2 seeds" in v["why"]


def test_diverging_more_still_decides_with_nothing_run_whole() -> None:
    diverged = {"seed": 1, "outcome": "diverged", "summary": {"steps_run": 3, "steps_planned": 9}}
    v = paired.compare(summarize_seeds([diverged]), summarize_seeds([failed(1)]), METRICS)
    assert v["verdict"] == "worse", "it diverged where the baseline did not"


def promised_recipe(workload: str = "mlp", **knobs: Any) -> Recipe:
    verified = {"mean": 1.0, "low": 0.9, "high": 1.1, "n": 3, "diverged_share": 0.0}
    return replace(
        make_recipe(**knobs),
        workload={"name": workload, "size": "tiny"},
        env={},
        achieved={"final_loss": {"direction": "minimize", "value": 1.0, "verified": verified}},
    )


def test_divergence_is_not_judged_when_every_seed_failed() -> None:
    row = _divergence_promise(promised_recipe(), summarize_seeds([failed(1), failed(2)]))
    assert row is not None
    assert row["verdict"] == "not judged: every seed failed (2 of 2)"
    assert row["measured"]["mean"] is None


def test_divergence_is_a_share_of_the_seeds_that_ran() -> None:
    diverged = {"seed": 2, "outcome": "diverged", "summary": {"steps_run": 3, "steps_planned": 9}}
    row = _divergence_promise(promised_recipe(), summarize_seeds([failed(1), diverged]))
    assert row is not None
    assert row["measured"]["mean"] == 1.0, "1 of the 1 seed that ran diverged"
    assert row["verdict"] == "DIVERGED on every seed"


@pytest.mark.integration
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA as Linux counts it")
def test_migrate_says_nothing_runs_when_the_baseline_fails_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real probe processes under a real memory limit that the workload's model does not fit."""
    (tmp_path / "big.py").write_text(BIG_SETUP)
    r = promised_recipe(f"{tmp_path / 'big.py'}:make", clip_norm=0.5)
    monkeypatch.setenv("AUTOTUNE_PROBE_MEMORY_MB", "600")
    out = holds.rerun(r, seeds=2, steps=20, threads=1, timeout_s=120.0, say=lambda _t: None)
    assert [x["outcome"] for x in out["recipe_result"]["runs"]] == ["oom", "oom"]
    assert out["vs_baseline"]["verdict"] == "not compared"
    assert "trained a step on any seed" in out["nothing_runs"]
    assert "DefaultCPUAllocator" in out["nothing_runs"]
    # out of memory before the first step at micro-batch 16 and 8 alike (the model does not
    # fit): accumulations 4 and 8 are not tried, each would cost 4 probes to fail the same way
    layout = out["layout"]
    assert [t["accum_steps"] for t in layout["tried"]] == [2] and layout["held"] is None, layout
    assert layout["before_first_step"] is True
    assert layout["why"].startswith("at accum_steps 2 (micro-batch 8) it runs out of memory "), (
        layout["why"]
    )
    assert "the micro-batch is not what does not fit" in layout["why"]
    assert out["oom"]["before_first_step"] is True
    verdict, why, plan = verdict_of(r, "r.yaml", out, [], ["clip_norm"])
    assert verdict == "cannot tell here: nothing runs, the baseline included"
    assert plan is None, "no re-tune can help"
    assert "Fix the machine" in why
