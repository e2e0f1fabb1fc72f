"""`autotune migrate` tries the recipe's Pareto neighbours (`source.neighbours`, recorded by
export) only when the recipe does not hold here (issue 28): each over the recipe's seeds at its
length, judged as the recipe is against the same baseline runs. One that holds is the verdict
(`transfers with these changes: use trial N (...)`, no re-tune even with `--space`); when none
does, the verdict is the recipe's (`does not transfer`), the neighbours listed; a recipe that
holds never runs them.

Real probes of the built-in `mlp` workload (30 steps, micro-batch 16) through the CLI. The
recipe is broken on purpose as the re-tune tests break it (a warm-up far longer than the run:
its learning rate never rises, its loss stays near the start while the baseline's falls: it
loses to the baseline on the final loss over 3 seeds)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h
from assets.recipes import make_recipe

from autotune import Recipe
from autotune.migrate.neighbours import neighbours_status
from autotune.migrate.report import markdown

STEPS = 30
SAMPLES = STEPS * 16  # one probe: 30 steps of the recipe's micro-batch of 16


def recipe(warmup: int, neighbours: list[dict[str, Any]] | None, lr: float = 0.01) -> Recipe:
    """The hand-made recipe (clip_norm and warmup_steps searched), at `warmup` steps of warm-up,
    with `neighbours` (None: none recorded, as an older export)."""
    r = make_recipe(warmup_steps=warmup, clip_norm=1.0, lr=lr)
    source = {**r.source, "study": "src-study", "defaults": False}
    if lr != 0.01:  # broken by its eps too: at a high lr a warm-up that never ends is no worse
        r = replace(r, knobs={**r.knobs, "adam_eps": 1.0})  # than the defaults' spikes
        source["searched"] = [*source["searched"], "adam_eps"]
    if neighbours is not None:
        source["neighbours"] = neighbours
    return replace(r, env={}, probe={"steps": STEPS, "seed": 0, "device": "cpu"}, source=source)


def neighbour(
    trial: int, warmup: int, clip: float, front: str | None = None, lr: float = 0.01, **more: Any
) -> dict[str, Any]:
    knobs = {**make_recipe().knobs, "warmup_steps": warmup, "clip_norm": clip, "lr": lr, **more}
    out = {"trial": trial, "knobs": knobs, "env": {}, "values": {"loss_cv": 0.1}}
    return {**out, "front": front} if front else out  # none: an export before fronts


def migrate(r: Recipe, tmp_path: Path, *extra: str, seeds: int = 3) -> tuple[Any, dict[str, Any]]:
    path = r.save(tmp_path / "recipe.yaml")
    args = ["migrate", str(path), "--seeds", str(seeds), "--no-audit", "--threads", "1"]
    out = tmp_path / "report"
    mig = h.autotune([*args, *extra, "-o", str(out), "--json"], tmp_path, timeout=600)
    assert mig.returncode in (0, 1), h.explain(mig)
    return mig, json.loads(mig.stdout)


@pytest.mark.integration
def test_a_neighbour_that_beats_the_defaults_where_the_recipe_does_not_hold_is_the_verdict(
    tmp_path: Path,
) -> None:
    # At mlp's unstable learning rate (0.3) PyTorch's defaults train badly, so a neighbour can
    # beat them: 5 is broken like the recipe (its eps of 1 stalls AdamW), 6 is the defaults' own
    # knobs (it ties them: it does not hold, it would replace the recipe with nothing better
    # than the defaults), 7 (clip 0.25, warm-up 10) beats them and holds, on fresh seeds too
    # (the third judged: `neighbour_confirm`); 9 is not needed. The recipe promises its final
    # loss alone: 7's loss_cv is higher than the defaults' (its lower loss moves more), which
    # six seeds show (`mixed`: 9 would be tried) and three did not.
    nbs = [
        neighbour(5, 2000, 0.5, lr=0.3, adam_eps=1.0),
        neighbour(6, 0, 0.0, lr=0.3),
        neighbour(7, 10, 0.25, "without throughput", lr=0.3),
        neighbour(9, 3, 2.0, "every objective", lr=0.3),
    ]
    final = {"final_loss": {"direction": "minimize", "value": 0.5, "verified": None}}
    mig, result = migrate(replace(recipe(3000, nbs, lr=0.3), achieved=final), tmp_path)
    assert mig.returncode == 0, h.explain(mig)
    holds = result["holds"]
    assert holds["problems"] and "loses to the baseline" in holds["problems"][0]
    nb = holds["neighbours"]
    assert nb["status"] == "tried" and nb["held"] == 7 and nb["recorded"] == 4
    first, tie, second, third = nb["tried"]
    assert first["trial"] == 5 and first["holds"] is False and first["verdict"] == "worse"
    assert any("loses to the baseline" in p for p in first["problems"])
    assert tie["trial"] == 6 and tie["holds"] is False, tie
    assert tie["verdict"] == "no detectable difference", tie
    assert tie["problems"] == [
        "it does not beat PyTorch's defaults here (no detectable difference): a neighbour "
        "replaces the recipe only when it does"
    ]
    assert second["trial"] == 7 and second["holds"] is True and second["problems"] == []
    assert second["verdict"] == "better", second
    assert second["confirmation"]["among"] == 3 and second["confirmation"]["seeds"] == [3, 4, 5]
    assert second["result"]["seeds"] == [0, 1, 2, 3, 4, 5], second
    changes = ["adam_eps: 1 -> 1e-08", "clip_norm: 1 -> 0.25", "warmup_steps: 3000 -> 10"]
    assert second["changes"] == changes
    fronts = ["every objective", "every objective", "without throughput", "every objective"]
    assert [e["front"] for e in nb["tried"]] == fronts
    assert holds["seeds"] == [0, 1, 2]
    assert third["trial"] == 9 and third["status"] == "not run"
    assert result["verdict"] == f"transfers with these changes: use trial 7 ({', '.join(changes)})"
    why = result["why"]
    assert "does not hold here: it loses to the baseline" in why
    assert "Pareto neighbour trial 7" in why and "holds: paired against the same baseline" in why
    assert "`autotune export src-study --pick 'trial 7'`" in why
    # No re-tune: something holds.
    assert result["retune"] is None and result["compute"]["retune_samples"] is None
    assert not (tmp_path / "report" / "recipe-retuned.yaml").exists()
    # The recipe and the baseline (3 seeds each), then 3 neighbours (3 each), the third's
    # confirmation (3 of its own and 3 of the defaults): the samples count.
    assert result["compute"]["probes"] == 21
    assert result["compute"]["samples"] == 21 * SAMPLES
    assert first["samples"] == 3 * SAMPLES and second["samples"] == 9 * SAMPLES
    text = Path(result["report"]).read_text()
    section = text[text.index("## Pareto neighbours") : text.index("## What differs")]
    assert "Trial 7 holds." in section
    every = "| every objective |"
    row = f"| 5 {every} clip_norm: 1 -> 0.5, warmup_steps: 3000 -> 2000 | worse | no: it loses"
    assert row in section
    assert "| no detectable difference | no: it does not beat PyTorch's defaults" in section
    assert f"| 7 | without throughput | {', '.join(changes)} | " in section
    assert "| yes (it read better on seeds [0, 1, 2], where 3 neighbours were judged;" in section
    nine = "adam_eps: 1 -> 1e-08, clip_norm: 1 -> 2, warmup_steps: 3000 -> 3"
    assert f"| 9 {every} {nine} | not run |" in section


@pytest.mark.integration
def test_when_no_neighbour_holds_the_recipe_does_not_transfer_and_they_are_listed(
    tmp_path: Path,
) -> None:
    mig, result = migrate(recipe(3000, [neighbour(5, 2000, 0.5)]), tmp_path)
    assert mig.returncode == 1, h.explain(mig)
    assert result["verdict"] == "does not transfer: re-tune clip_norm, warmup_steps"
    nb = result["holds"]["neighbours"]
    assert nb["status"] == "tried" and nb["held"] is None
    (only,) = nb["tried"]
    assert only["trial"] == 5 and only["holds"] is False
    assert "Its Pareto neighbours do not hold here either: trial 5: it loses" in result["why"]
    assert result["retune"]["knobs"] == ["clip_norm", "warmup_steps"]  # the plan, as before
    assert result["compute"]["probes"] == 9 and result["compute"]["samples"] == 9 * SAMPLES
    text = Path(result["report"]).read_text()
    assert "None holds here either." in text
    row = "| 5 | every objective | clip_norm: 1 -> 0.5, warmup_steps: 3000 -> 2000 | worse | no: "
    assert row in text


@pytest.mark.integration
def test_a_recipe_that_holds_never_runs_its_neighbours(tmp_path: Path) -> None:
    mig, result = migrate(recipe(2, [neighbour(5, 2000, 0.5)]), tmp_path, seeds=2)
    assert mig.returncode == 0 and result["verdict"] == "transfers", h.explain(mig)
    nb = result["holds"]["neighbours"]
    assert nb["status"] == "not needed" and nb["tried"] == [] and nb["probes"] == 0
    # the recipe and the baseline over 2 seeds: nothing else ran
    assert result["compute"]["probes"] == 4 and result["compute"]["samples"] == 4 * SAMPLES
    assert "The recipe records 1 Pareto neighbour(s); not needed: the recipe holds here." in (
        Path(result["report"]).read_text()
    )


def test_why_the_neighbours_were_not_run() -> None:
    """Without a probe: the status of each case, and the report's words for it."""
    broken = {"problems": ["it loses to the baseline over the same seeds on final_loss"]}
    old = neighbours_status(recipe(3000, None), broken)
    assert old["status"] == "not recorded" and old["recorded"] is None
    assert neighbours_status(recipe(3000, []), broken)["status"] == "none"
    assert neighbours_status(recipe(3000, [neighbour(5, 2, 1.0)]), broken)["status"] == "to try"
    gone = neighbours_status(recipe(3000, [neighbour(5, 2, 1.0)]), {**broken, "nothing_runs": "x"})
    assert gone["status"] == "not run"
    assert neighbours_status(recipe(2, None), {"problems": []})["status"] == "not needed"

    def section(nb: dict[str, Any]) -> str:
        text = markdown(_result(nb))
        return text[text.index("## Pareto neighbours") : text.index("## What differs")]

    assert "records no Pareto neighbours (exported before autotune recorded them)." in section(old)
    assert "records none (its study had no other candidate on the front)." in section(
        neighbours_status(recipe(3000, []), broken)
    )
    assert "nothing runs here, the baseline included" in section(gone)


def _result(nb: dict[str, Any]) -> dict[str, Any]:
    """The least of `run.migrate`'s result the report reads."""
    rec = {"metrics": {}, "diverged_share": 0.0, "runs": []}
    return {
        "recipe": "t",
        "verdict": "does not transfer",
        "why": "",
        "recorded_hash": "abc",
        "here_hash": "def",
        "here_summary": "cpu",
        "holds": {
            "recipe_result": rec,
            "baseline_result": rec,
            "vs_baseline": {"verdict": "worse"},
            "seeds": [0],
            "steps": STEPS,
            "threads": 1,
            "problems": ["x"],
            "neighbours": nb,
        },
        "differences": {"not_recorded": ["fingerprint"], "rows": [], "counts": {}},
        "ops": {"status": "skipped"},
        "knob_classes": {"hardware-bound": [], "portable": []},
        "compute": {"samples": 0, "probes": 0, "probe_wall_s": 0.0, "audit_wall_s": 0.0},
    }


def test_a_neighbour_at_the_micro_batch_that_ran_out_of_memory_is_not_run() -> None:
    # From benchmarks/migrate_retune.py: the recipe ran out of memory at micro-batch 64, its
    # neighbour at the same micro-batch fitted on 2 lucky seeds (the limit is on the edge), was
    # said to hold, and ran out of memory on 5 of 5 fresh seeds. The layout that failed is not
    # tried again: nothing runs, and nothing holds.
    from autotune.migrate.neighbours import try_neighbours

    r = recipe(3000, [neighbour(7, 2, 1.0)])
    mb = int(r.probe_config(steps=STEPS).micro_batch)
    out = try_neighbours(
        r, {}, STEPS, [0], timeout_s=60, threads=1, say=lambda _t: None, oom_micro_batch=mb
    )
    assert out["held"] is None and out["probes"] == 0 and out["samples"] == 0
    (entry,) = out["tried"]
    assert entry["status"].startswith(f"not run: its micro-batch of {mb} is as large"), entry
    assert "not run" in "\n".join(markdown_section(out))


def markdown_section(nb: dict[str, Any]) -> list[str]:
    from autotune.migrate.report import _neighbours_section

    return _neighbours_section(nb)


@pytest.mark.integration
def test_when_the_baseline_ran_out_of_memory_each_neighbour_meets_the_defaults_at_its_layout() -> (
    None
):
    """The recipe's baseline ran out of memory here (its micro-batch does not fit): a neighbour
    paired against those runs would be "not compared" and "hold" for having run. It is paired
    instead against PyTorch's defaults at its own micro-batch, run beside it over the same seeds,
    once per layout: the broken neighbour loses to them, the next one at the same layout holds
    and reuses their runs."""
    from autotune.migrate.neighbours import try_neighbours

    def at_accum(n: dict[str, Any], accum: int) -> dict[str, Any]:
        return {**n, "knobs": {**n["knobs"], "accum_steps": accum}}

    # At mlp's unstable lr the defaults train badly: 5 is broken like the recipe (eps 1), 7
    # (clip 0.25, warm-up 10) beats the defaults at its layout.
    broken, good = neighbour(5, 2000, 0.5, lr=0.3, adam_eps=1.0), neighbour(7, 10, 0.25, lr=0.3)
    r = recipe(3000, [at_accum(broken, 2), at_accum(good, 2)], lr=0.3)
    # its final loss alone promised: over six seeds the good one's loss_cv is higher (`mixed`)
    r = replace(r, achieved={"final_loss": {"direction": "minimize", "value": 0.5}})
    seeds = [0, 1, 2]  # 2 paired seeds cannot tell the broken one apart (t(0.975, 1) = 12.7)
    out = try_neighbours(
        r, {}, STEPS, seeds, timeout_s=120, threads=1, say=lambda _t: None, base_oom=True
    )
    first, second = out["tried"]
    assert first["baseline_accum"] == second["baseline_accum"] == 2
    assert first["verdict"] == "worse" and first["holds"] is False, first
    assert any("loses to the baseline" in p for p in first["problems"])
    assert second["holds"] is True and second["verdict"] == "better", second
    assert out["held"] == 7
    # the second judged: run again on fresh seeds beside the defaults at its layout
    assert second["confirmation"]["seeds"] == [3, 4, 5], second
    # the defaults at accum 2 ran once, beside the first neighbour: 3 + 3 probes, then 3, then
    # the confirmation's 3 + 3
    assert (first["probes"], second["probes"]) == (6, 9)
    assert out["samples"] == 15 * SAMPLES  # each probe: 30 steps of a batch of 16
    assert "paired against PyTorch's defaults at its own micro-batch" in "\n".join(
        markdown_section(out)
    )
    from autotune.migrate.run import neighbour_verdict

    holds = {"neighbours": out, "problems": ["it ran out of memory"], "seeds": seeds}
    verdict, why, _ = neighbour_verdict(r, holds)
    assert verdict.startswith("transfers with these changes: use trial 7"), verdict
    assert (
        "against PyTorch's defaults at its own micro-batch, run beside it (the recipe's "
        "baseline ran out of memory here; accum_steps 2)"
    ) in why, why
