"""The recipe at a layout that fits (`autotune/migrate/layout.py`), without a probe: which
accumulations are tried, and what the report and the verdict say of them (the end-to-end case
under a real memory limit: `test_migrate_oom.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.migrate.layout import _why, fitting_accums, layout_failed
from autotune.migrate.report import _layout_section


def test_the_same_batch_in_more_steps_smallest_first_and_only_smaller_micro_batches() -> None:
    assert fitting_accums(64, 1, 64) == [2, 4, 8, 16, 32, 64]
    assert fitting_accums(64, 2, 32) == [4, 8, 16, 32, 64]
    assert fitting_accums(48, 1, 48) == [2, 3, 4, 6, 8, 12, 16, 24, 48]  # divisors only
    # a micro-batch no smaller than the one that ran out of memory is not a candidate
    assert fitting_accums(64, 1, 16) == [8, 16, 32, 64]
    assert fitting_accums(7, 1, 7) == [7]  # a prime batch: one sample at a time
    assert fitting_accums(1, 1, 1) == []  # nothing smaller than one sample


def entry(accum: int, *, oom: bool, problems: list[str]) -> dict[str, Any]:
    return {
        "accum_steps": accum,
        "micro_batch": 64 // accum,
        "against": f"PyTorch's defaults at accum_steps {accum}, beside it",
        "holds": not oom and not problems,
        "verdict": "not compared" if oom else "worse" if problems else "better",
        "problems": problems,
        "out_of_memory": oom,
    }


def test_what_the_report_and_the_verdict_say_of_each_outcome() -> None:
    oom = "it ran out of memory here on 2 of 2 seeds"
    out2, out4 = entry(2, oom=True, problems=[oom]), entry(4, oom=True, problems=[oom])
    ran_out = {"from_accum": 1, "batch": 64, "held": None, "tried": [out2, out4]}
    ran_out["why"] = _why(ran_out, [2, 4])
    assert ran_out["why"] == "at accum_steps 2, 4 it runs out of memory too"
    lost2 = entry(2, oom=False, problems=["it loses on final_loss"])
    lost = {"from_accum": 1, "batch": 64, "held": None, "tried": [lost2]}
    lost["why"] = _why(lost, [2, 4])
    assert lost["why"] == "at accum_steps 2 it fits but does not hold: it loses on final_loss"
    assert layout_failed({"layout": lost}) == (
        " The same batch in more accumulation steps does not help: " + lost["why"] + "."
    )
    fits4 = entry(4, oom=False, problems=[])
    held = {"from_accum": 1, "batch": 64, "held": 4, "tried": [out2, fits4]}
    held["why"] = _why(held, [2, 4])
    assert held["why"] == "it holds at accum_steps 4" and layout_failed({"layout": held}) == ""
    none = {"from_accum": 1, "batch": 1, "held": None, "tried": []}
    assert _why(none, []) == "its batch of 1 has no smaller micro-batch to try"
    text = "\n".join(_layout_section(held))
    assert "## The same batch in more steps" in text and "it holds at accum_steps 4" in text
    assert "| 2 | 32 | PyTorch's defaults at accum_steps 2, beside it | not compared | no: " in text
    assert "| 4 | 16 | PyTorch's defaults at accum_steps 4, beside it | better | yes |" in text
    assert _layout_section(None) == []


def test_a_layout_that_fits_and_does_not_hold_implicates_knobs_in_the_re_tune_plan() -> None:
    from autotune.migrate.knob_classes import retune_plan

    oom = "it ran out of memory here on 2 of 2 seeds"
    fitted = entry(2, oom=False, problems=["it diverged on 2 of 2 seeds (the baseline: 0)"])
    fitted["vs_baseline"] = {"worse_on": ["final_loss"]}
    holds = {
        "problems": [oom],
        "oom": {"micro_batch": 64},
        "vs_baseline": {"verdict": "not compared"},
        "layout": {"tried": [fitted], "held": None},
    }
    searched = ["accum_steps", "clip_norm", "warmup_steps", "adam_eps"]
    plan = retune_plan(searched, {}, holds)
    assert plan["why"]["clip_norm"] == "implicated: it diverged here"
    assert set(plan["knobs"]) == set(searched)  # worse on final_loss: every portable knob
    # the recipe's own out-of-memory alone implicates the layout only
    alone = retune_plan(searched, {}, {**holds, "layout": {"tried": [], "held": None}})
    assert alone["knobs"] == ["accum_steps"]


def test_the_verdict_names_the_change_and_how_it_was_judged(tmp_path: Path) -> None:
    from assets.recipes import make_recipe

    from autotune import Recipe
    from autotune.migrate.layout import layout_verdict, write_recipe

    fits = entry(2, oom=False, problems=[])
    fits["vs_baseline"] = {"verdict": "better", "why": "better than the baseline: loss_cv"}
    fits["result"] = {"diverged_share": 0.0, "failed": 0}
    layout = {"from_accum": 1, "batch": 16, "held": 2, "tried": [fits]}
    holds = {"problems": ["it ran out of memory here on 2 of 2 seeds"], "seeds": [0, 1],
             "layout": layout}  # fmt: skip
    tuned = make_recipe(clip_norm=0.5)
    verdict, why, plan = layout_verdict(tuned, holds)
    assert verdict == "transfers with these changes: accum_steps 1 -> 2" and plan is None
    assert "paired against PyTorch's defaults at accum_steps 2, beside it over seeds [0, 1] " in why
    assert "the verdict is better (better than the baseline: loss_cv)" in why
    _, why_defaults, _ = layout_verdict(make_recipe(), holds)
    assert "the recipe is PyTorch's defaults, its own baseline" in why_defaults
    assert "paired against" not in why_defaults
    # the recipe at that layout: the same knobs but the accumulation, saved beside the report
    path = write_recipe(tuned, layout, tmp_path, "here123")
    new = Recipe.load(path)
    assert new.knobs == {**tuned.knobs, "accum_steps": 2} and new.micro_batch == 8
    assert new.effective_batch == tuned.effective_batch
    came = new.source["migrated_from"]
    assert came["changed"] == {"accum_steps": [1, 2]} and came["here"] == "here123"
    assert came["recipe"] == tuned.name and new.name == f"{tuned.name}-accum2"
