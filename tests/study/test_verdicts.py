"""The verdicts against the baseline: a baseline run labelled diverged that ran its whole length
is still the yardstick; the screen's relative bound is taken against the baseline over seeds;
the pick is compared with the baseline paired over the same seeds, and a pick that shows no
detectable difference gives way to the defaults; `autotune verify` refuses a recipe that
diverged everywhere or loses to the baseline. Pure functions, and a real SQLite Optuna study
with made-up records (no Ray, no probe process)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

from autotune import space as sp
from autotune import study as st
from autotune.recipe import Recipe
from autotune.recipe import paired as pd
from autotune.recipe.seeds import paired, ran_whole, summarize_seeds
from autotune.study import pick as pk
from autotune.study import rung_phase as rp
from autotune.study import verification as ve
from autotune.study import yardstick as yd
from autotune.study.attrs import SCREEN_YARDSTICK
from autotune.study.objectives import reference, vacuous

N = 6
RELATIVE = (
    "constraints:\n"
    "  - {metric: loss_drop, op: '>=', value: 0.05}\n"
    "  - {metric: final_loss, op: '<=', value: 1.05, relative_to: baseline}\n"
)


def space_of(trials: int = N, verify_top_k: int = 1) -> sp.Space:
    text = h.mlp_space("v", trials=trials, verify_top_k=verify_top_k, verify_seeds=3) + RELATIVE
    return sp.loads(text, source="v")


def metrics(cv: float, final: float, tp: float = 100.0) -> dict[str, float]:
    return {"loss_cv": cv, "throughput": tp, "loss_drop": 0.5, "final_loss": final}


def run(seed: int, final: float, outcome: str = "complete", whole: bool = True, cv: float = 0.1):
    steps = 30 if whole else 12
    return {
        "seed": seed,
        "outcome": outcome,
        "cause": "loss_explosion" if outcome == "diverged" else None,
        "summary": {"metrics": metrics(cv, final), "steps_run": steps, "steps_planned": 30},
    }


def result(
    finals: list[float],
    outcomes: list[str] | None = None,
    cv: float = 0.1,
    cvs: list[float] | None = None,
):
    """Seeds 1, 2, ... with these final losses and loss_cv `cv` (or `cvs`, by seed)."""
    outcomes = outcomes or ["complete"] * len(finals)
    cvs = cvs or [cv] * len(finals)
    runs = [
        run(s, f, o, whole=o == "complete", cv=c)
        for s, (f, o, c) in enumerate(zip(finals, outcomes, cvs, strict=True), 1)
    ]
    return summarize_seeds(runs, ["loss_cv", "throughput", "final_loss", "loss_drop"])


# ---------------------------------------------------------------------------------------------
# The paired comparison
# ---------------------------------------------------------------------------------------------


def test_paired_differences_their_mean_and_interval() -> None:
    d = paired([2.0, 2.1, 2.3, None], [1.9, 2.1, 2.0, 5.0])
    assert d["differences"] == pytest.approx([0.1, 0.0, 0.3]) and d["n"] == 3
    assert d["mean"] == pytest.approx(0.4 / 3)
    # mean +- t(0.975, 2) * s / sqrt(3), s the sample sd of the differences
    s = (sum((x - 0.4 / 3) ** 2 for x in (0.1, 0.0, 0.3)) / 2) ** 0.5
    assert d["high"] - d["mean"] == pytest.approx(4.303 * s / 3**0.5)
    one = paired([1.0, float("nan")], [0.5, 1.0])
    assert one["n"] == 1 and one["low"] is None and one["high"] is None


def test_a_difference_inside_the_seed_noise_is_no_detectable_difference() -> None:
    mets = pd.compared_metrics([{"metric": "loss_cv", "direction": "minimize"}])
    assert mets == [("final_loss", "minimize"), ("loss_cv", "minimize")]
    noisy = pd.compare(result([2.0, 2.4, 1.8]), result([2.1, 2.2, 1.9]), mets)
    assert noisy["verdict"] == "no detectable difference", noisy
    assert (
        noisy["metrics"]["final_loss"]["difference"]["low"]
        < 0
        < noisy["metrics"]["final_loss"]["difference"]["high"]
    )
    assert noisy["diverged"] == {
        "n": 3,
        "pick": 0.0,
        "baseline": 0.0,
        "pick_seeds": 0,
        "baseline_seeds": 0,
        "pick_only": 0,
        "baseline_only": 0,
        "p": 1.0,
        "level": 0.95,
        "beyond_chance": False,
        "every_seed": None,
        "decides": False,
    }
    # the same seeds, consistently lower: better; consistently higher: worse
    better = pd.compare(result([1.50, 1.61, 1.42]), result([2.0, 2.1, 1.9]), mets)
    assert better["verdict"] == "better" and better["better_on"] == ["final_loss"]
    worse = pd.compare(result([2.0, 2.1, 1.9]), result([1.50, 1.61, 1.42]), mets)
    assert worse["verdict"] == "worse" and worse["worse_on"] == ["final_loss"]
    # lower final loss but a worse stability objective: a trade-off, said so
    mixed = pd.compare(result([1.50, 1.61, 1.42], cv=0.3), result([2.0, 2.1, 1.9], cv=0.1), mets)
    assert mixed["verdict"] == "mixed", mixed
    assert (mixed["better_on"], mixed["worse_on"]) == (["final_loss"], ["loss_cv"])
    assert mixed["why"] == "better on final_loss, worse on loss_cv"


def test_diverging_on_more_seeds_than_the_baseline_is_never_better() -> None:
    # beyond chance (6 of 8 seeds against none: the sign test's p = 0.031), however much better
    # its final loss on the seeds it completed
    mets = pd.compared_metrics([{"metric": "loss_cv", "direction": "minimize"}])
    mine = result([1.0, 1.1, *[9.0] * 6], ["complete", "complete", *["diverged"] * 6])
    base = result([2.0, 2.1, 1.9, 2.0, 2.2, 1.8, 2.05, 1.95])
    v = pd.compare(mine, base, mets)
    assert v["verdict"] == "worse" and v["why"].startswith(
        "diverged on 6 of 8 seeds, the baseline on 0 (beyond chance: p = 0.031)"
    )
    # the other way round: the baseline diverged where the pick did not
    v = pd.compare(base, mine, mets)
    assert v["verdict"] in ("better", "mixed") and v["diverged"]["baseline_seeds"] == 6


def test_nothing_to_compare_is_said_so() -> None:
    mets = [("final_loss", "minimize")]
    assert pd.compare(result([1.0]), None, mets)["verdict"] == "not compared"
    same = pd.compare(None, None, mets, same=True)
    assert same["verdict"] == "not compared" and "it is the baseline" in same["why"]
    assert "NOT COMPARED" in pd.format_line(same)


# ---------------------------------------------------------------------------------------------
# The baseline as the reference: labelled diverged but run whole
# ---------------------------------------------------------------------------------------------


def test_a_baseline_labelled_diverged_that_ran_its_whole_length_is_the_reference() -> None:
    space = space_of()
    m = metrics(0.1, 2.0)
    assert ran_whole({"steps_run": 30, "steps_planned": 30})
    assert not ran_whole({"steps_run": 12, "steps_planned": 30}) and not ran_whole({})
    assert reference("diverged", m, whole=True) == m
    assert reference("diverged", m, whole=False) is None
    assert reference("failed", m, whole=True) is None
    assert vacuous(space, reference("diverged", m, whole=True)) == []
    assert vacuous(space, None) == ["final_loss <= 1.05 x baseline"]


def recorded(tmp_path: Path, space: sp.Space, finals: list[float]) -> tuple[Any, Path]:
    import optuna

    study_dir = h.recorded_study(
        tmp_path,
        "v",
        trials=len(finals),
        finished=len(finals),
        metrics=[metrics(0.5 - 0.05 * i, f) for i, f in enumerate(finals)],
    )
    study = optuna.load_study(study_name="v", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    return study, study_dir


def test_at_a_rung_a_spiked_baseline_that_ran_on_judges_the_others(tmp_path: Path) -> None:
    space = sp.loads(
        h.mlp_space("v", trials=N) + RELATIVE, source="v", overrides=["budget.target_steps=90"]
    )
    study, study_dir = recorded(tmp_path, space, [2.0] * N)
    trials = {t.number: t for t in study.get_trials()}
    spiked = run(0, 2.0, "diverged")
    spiked["summary"]["steps_run"] = spiked["summary"]["steps_planned"] = 90
    records = [
        rp.record_rung(space, study, study_dir, trials[0], 1, 90, spiked),
        rp.record_rung(space, study, study_dir, trials[2], 1, 90, run(0, 2.4)),
        rp.record_rung(space, study, study_dir, trials[3], 1, 90, run(0, 2.05)),
    ]
    rp.judge_rung(space, study, study_dir, records)
    rows = pk.rung_rows(study, 90)
    assert rows[0]["steps_run"] == 90 and rows[0]["outcome"] == "diverged"
    # 2.4 > 1.05 x 2.0: judged against the baseline that ran on, not waved through
    assert (rows[2]["feasible"], rows[3]["feasible"]) == (False, True)
    # stopped early, it is no reference: the constraint is vacuous (2.4 passes, said so)
    stopped = run(0, 2.0, "diverged", whole=False)
    again = rp.record_rung(space, study, study_dir, trials[0], 1, 90, stopped)
    rp.judge_rung(space, study, study_dir, [again, *records[1:]])
    assert pk.rung_rows(study, 90)[2]["feasible"]


# ---------------------------------------------------------------------------------------------
# The screen: the baseline's interval over seeds, not one lucky seed
# ---------------------------------------------------------------------------------------------


def test_the_screen_bound_is_the_kind_end_of_the_baselines_interval(tmp_path: Path) -> None:
    space = space_of()
    # the screen seed was lucky for the defaults: 1.8; its other seeds 2.2, 2.3, 2.1
    runs = [run(0, 1.8), run(1, 2.2), run(2, 2.3), run(3, 2.1, "diverged", whole=False)]
    yard = yd.reference_over_seeds(space, runs)
    assert yard["usable"] == 3 and yard["metrics"]["final_loss"]["n"] == 3
    assert yard["reference"]["final_loss"] == pytest.approx(yard["metrics"]["final_loss"]["high"])
    study, study_dir = recorded(tmp_path, space, [1.8, 2.1, 2.0, 2.2, 2.3, 1.85])
    screen = {r.number: r.feasible for r in rp.screen_results(study, space)}
    # against the one screen run (1.8 x 1.05 = 1.89) all but the baseline and trial 5 are out
    assert [n for n, ok in screen.items() if ok] == [0, 5]
    study.set_user_attr(SCREEN_YARDSTICK, yard)
    screen = {r.number: r.feasible for r in rp.screen_results(study, space)}
    bound = 1.05 * yard["reference"]["final_loss"]
    assert bound > 2.3
    assert all(screen.values()), screen
    text = st.format_summary(st.summarize(study, space, study_dir))
    assert "relative constraints at the screen: against the baseline's screen over seeds" in text
    assert yd.wanted(space) and not yd.wanted(space_of(verify_top_k=0))
    # no whole run of the baseline: no reference, vacuous (not the stopped run's value)
    none = yd.reference_over_seeds(space, [run(0, 1.0, "diverged", whole=False)])
    study.set_user_attr(SCREEN_YARDSTICK, none)
    assert st.records.screen_reference(study)["final_loss"] is None


# ---------------------------------------------------------------------------------------------
# The pick against the baseline, in a study
# ---------------------------------------------------------------------------------------------


def verified(res: dict[str, Any], steps: int = 30) -> dict[str, Any]:
    out = {**res, "steps": steps, "all_feasible": res["diverged_share"] == 0}
    for row in out["runs"]:
        row["feasible"] = row["outcome"] == "complete"
    return out


def test_the_baseline_is_verified_beside_the_candidates(tmp_path: Path) -> None:
    space = space_of()
    study, _ = recorded(tmp_path, space, [2.0] * N)
    todo = ve.to_verify(study, space)
    assert [c.number for c in todo if c.baseline] == [0]
    assert len([c for c in todo if not c.baseline]) == 1  # top_k 1, the baseline beside it
    study.set_user_attr("autotune.verified.0", verified(result([2.0, 2.1, 1.9])))
    assert not any(c.baseline for c in ve.to_verify(study, space))


def test_no_detectable_difference_picks_and_exports_the_defaults(tmp_path: Path) -> None:
    from autotune.study import export as ex

    space = space_of()
    study, study_dir = recorded(tmp_path, space, [2.0] * N)
    best = N - 1  # the lowest loss_cv: the balanced pick
    base = result([2.0, 2.4, 1.8], cvs=[0.3, 0.25, 0.33])
    study.set_user_attr("autotune.verified.0", verified(base))
    mine = result([2.1, 2.2, 1.9], cvs=[0.27, 0.28, 0.31])  # lower on average, within the noise
    study.set_user_attr(f"autotune.verified.{best}", verified(mine))
    summary = st.summarize(study, space, study_dir)
    pick, vs = summary["pick"], summary["vs_baseline"]
    assert (pick["number"], pick["first_choice"], pick["defaults_preferred"]) == (0, best, True)
    assert pick["verdict"] == vs["verdict"] == "no detectable difference"
    assert vs["pick"]["number"] == best and vs["baseline"]["number"] == 0
    assert vs["pick"]["final_loss"]["low"] is not None and vs["baseline"]["diverged_share"] == 0
    assert vs["seeds"] == [1, 2, 3] and vs["metrics"]["final_loss"]["difference"]["n"] == 3
    rows = {v["number"]: v for v in summary["verified"]}
    assert rows[best]["why_not_picked"].startswith("no detectable difference against the defaults")
    text = st.format_summary(summary)
    assert f"pick: the defaults (trial 0): trial {best} showed no detectable difference" in text
    assert (
        f"trial {best} vs baseline (paired over seeds [1, 2, 3]): NO DETECTABLE DIFFERENCE" in text
    )
    recipe = ex.recipe_from_study(str(study_dir))
    assert recipe.source["trial"] == 0 and recipe.source["defaults"] is True
    assert recipe.source["baseline"] is True
    assert recipe.source["vs_baseline"]["verdict"] == "no detectable difference"
    assert "exporting PyTorch's defaults" in (ex.verdict_note(recipe) or "")
    assert "unfinished" not in recipe.source, recipe.source.get("unfinished")
    # the same study, had it been stopped before its planned trials ran: export says so
    stopped = Recipe.from_dict(
        {**recipe.to_dict(), "source": {**recipe.source, "unfinished": {
            "trials_finished": 3, "trials_planned": 8}}}
    )  # fmt: skip
    note = ex.verdict_note(stopped) or ""
    assert note.startswith(f"study {recipe.source['study']} was stopped before it finished: ")
    assert "3 of 8 trials ran" in note and "exporting PyTorch's defaults" in note
    # an explicit trial N is still exported, with a warning
    mine = ex.recipe_from_study(str(study_dir), f"trial {best}")
    assert mine.source["trial"] == best and mine.source["defaults"] is False
    assert mine.source["baseline"] is False
    assert "no detectable difference against the defaults" in (ex.verdict_note(mine) or "")


def test_a_pick_better_than_the_baseline_is_kept_and_a_diverging_one_is_not(
    tmp_path: Path,
) -> None:
    space = space_of()
    study, study_dir = recorded(tmp_path, space, [2.0] * N)
    best = N - 1
    study.set_user_attr("autotune.verified.0", verified(result([2.0, 2.1, 1.9])))
    lower = result([1.50, 1.61, 1.42], cvs=[0.05, 0.06, 0.055])
    study.set_user_attr(f"autotune.verified.{best}", verified(lower))
    summary = st.summarize(study, space, study_dir)
    assert summary["pick"]["number"] == best and summary["pick"]["verdict"] == "better"
    assert summary["pick"]["defaults_preferred"] is False
    assert summary["vs_baseline"]["better_on"] == ["final_loss", "loss_cv"]
    # the pick diverges on one seed, the baseline on none: the baseline, which held, is the
    # pick; the candidate says why it is not
    gone = result([1.50, 1.61, 9.0], ["complete", "complete", "diverged"], cv=0.05)
    study.set_user_attr(f"autotune.verified.{best}", verified(gone))
    summary = st.summarize(study, space, study_dir)
    assert summary["pick"]["number"] == 0
    row = next(v for v in summary["verified"] if v["number"] == best)
    assert row["causes"] == {"loss_explosion": 1} and row["held"] is False
    assert "diverged on seed 3 (loss_explosion)" in row["why_not_picked"]
    assert row["diverged_share"] == pytest.approx(1 / 3)
    # the baseline diverges too: no named pick, and the advice says how far its trial diverged
    base_gone = result([2.0, 9.0, 1.9], ["complete", "diverged", "complete"])
    study.set_user_attr("autotune.verified.0", verified(base_gone))
    summary = st.summarize(study, space, study_dir)
    assert summary["pick"]["number"] is None
    named = summary["pick"]["best"]
    assert summary["pick"]["best_diverged_share"] == pytest.approx(1 / 3)
    text = st.format_summary(summary)
    assert (
        f"--pick 'trial {named}' (the best of those verified; it diverged on 33% of its seeds)"
        in text
    )


# ---------------------------------------------------------------------------------------------
# autotune verify: not "as promised" when it diverged everywhere or loses to the baseline
# ---------------------------------------------------------------------------------------------


def report(rec: dict[str, Any], base: dict[str, Any] | None, promise=None) -> dict[str, Any]:
    mets = pd.compared_metrics([{"metric": "loss_cv", "direction": "minimize"}])
    return {
        "recipe_result": rec,
        "baseline_result": base,
        "promise": promise or [],
        "vs_baseline": pd.compare(rec, base, mets, same=base is None),
    }


def test_verify_refuses_a_recipe_that_diverged_everywhere_or_loses() -> None:
    gone = result([9.0, 9.0, 9.0], ["diverged"] * 3)
    base = result([2.0, 2.1, 1.9])
    problems = pd.verify_problems(report(gone, gone))
    assert problems == ["it diverged on every seed (3 of 3)"]
    assert pd.verify_problems(report(gone, base))[1].startswith(
        "it diverged on more seeds than the baseline (3 vs 0 of 3)"
    )
    lost = pd.verify_problems(report(result([2.4, 2.5, 2.35]), base))
    assert lost == ["it loses to the baseline over the same seeds on final_loss"]
    assert pd.verify_problems(report(result([1.5, 1.6, 1.4]), base)) == []
    # a recipe that IS the defaults: nothing to compare, and no problem made of it
    assert pd.verify_problems(report(base, None)) == []
    # a worse throughput is the machine's: printed, not a reason
    slow = {"metric": "throughput", "verdict": "WORSE than promised"}
    assert pd.verify_problems(report(base, None, [slow])) == []
    cv = {"metric": "loss_cv", "verdict": "WORSE than promised"}
    assert pd.verify_problems(report(base, None, [cv])) == ["loss_cv: WORSE than promised"]


def test_a_recipe_that_diverged_on_every_seed_is_not_as_promised() -> None:
    from autotune.recipe import Recipe
    from autotune.recipe import verify as vf

    recipe = Recipe.from_dict(
        {
            "autotune_recipe": 1,
            "name": "r",
            "workload": {"name": "mlp", "size": "tiny"},
            "precision": "fp32",
            "micro_batch": 32,
            "knobs": {"lr": 0.01, "batch": 32, "clip_norm": 1.0},
            "probe": {"steps": 30, "seed": 0},
            "achieved": {
                "loss_cv": {
                    "direction": "minimize",
                    "value": 0.1,
                    "verified": {"mean": None, "diverged_share": 1.0},
                }
            },
            "source": {"searched": ["clip_norm"]},
        }
    )
    rows = vf.compare_promise(recipe, {"metrics": {}, "diverged_share": 1.0}, True)
    div = next(r for r in rows if r["metric"] == "diverged")
    assert div["verdict"] == "DIVERGED on every seed"
    assert not vf.is_baseline(recipe)
    assert vf.is_baseline(Recipe.from_dict({**recipe.to_dict(), "source": {"defaults": True}}))


def test_the_direction_of_a_metric_decides_better_or_worse() -> None:
    up = {"mean": 5.0, "low": 1.0, "high": 9.0, "n": 3}
    down = {"mean": -5.0, "low": -9.0, "high": -1.0, "n": 3}
    across = {"mean": 1.0, "low": -1.0, "high": 3.0, "n": 3}
    assert pd.metric_verdict(up, "maximize") == "better"
    assert pd.metric_verdict(up, "minimize") == "worse"
    assert pd.metric_verdict(down, "minimize") == "better"
    assert pd.metric_verdict(down, "maximize") == "worse"
    assert pd.metric_verdict(across, "minimize") == "no detectable difference"
    assert pd.metric_verdict({"mean": 5.0, "low": None, "high": None}, "minimize") == (
        "no detectable difference"
    )
    assert set(pd.PREFER_DEFAULTS) == {"no detectable difference", "worse"}


def test_a_pick_worse_than_the_defaults_gives_way_to_them(tmp_path: Path) -> None:
    space = space_of()
    study, study_dir = recorded(tmp_path, space, [2.0] * N)
    best = N - 1
    base = result([2.0, 2.1, 1.9], cvs=[0.3, 0.25, 0.33])
    study.set_user_attr("autotune.verified.0", verified(base))
    # a little lower loss_cv on average (within the noise), a final loss 0.3 higher on each seed
    mine = result([2.3, 2.41, 2.19], cvs=[0.27, 0.28, 0.31])
    study.set_user_attr(f"autotune.verified.{best}", verified(mine))
    summary = st.summarize(study, space, study_dir)
    pick = summary["pick"]
    assert (pick["number"], pick["first_choice"], pick["verdict"]) == (0, best, "worse")
    assert pick["defaults_preferred"] is True
    assert summary["vs_baseline"]["worse_on"] == ["final_loss"]
    assert summary["vs_baseline"]["why"] == "worse than the baseline on final_loss"


def test_verify_names_the_causes_of_the_seeds_that_diverged() -> None:
    gone = result([1.0, 9.0, 9.0], ["complete", "diverged", "diverged"])
    assert pd.causes_text(gone) == " (loss_explosion on seeds 2, 3)"
    assert pd.causes_text(result([1.0])) == ""


def test_only_seeds_whose_runs_are_whole_are_paired() -> None:
    """A seed labelled diverged that ran its whole length has real final numbers and is paired;
    one that stopped early has none; a seed without the metric is left out, not a crash."""
    names = ["loss_cv", "throughput", "final_loss", "loss_drop"]
    base = summarize_seeds(
        [
            run(1, 2.0, "diverged", whole=True),
            run(2, 9.0, "diverged", whole=False),
            run(3, 2.1),
            run(4, 2.2),
        ],
        names,
    )
    lost = run(4, 1.0)
    lost["summary"]["metrics"]["final_loss"] = None
    mine = summarize_seeds([run(1, 1.5), run(2, 1.6), run(3, 1.4), lost], names)
    out = pd.compare(mine, base, [("final_loss", "minimize")])
    diff = out["metrics"]["final_loss"]["difference"]
    assert diff["n"] == 2, diff  # seeds 1 and 3
    assert diff["mean"] == pytest.approx(((1.5 - 2.0) + (1.4 - 2.1)) / 2)
    assert out["diverged"]["baseline_seeds"] == 2 and out["diverged"]["pick_seeds"] == 0


def test_an_interval_with_a_missing_end_decides_nothing() -> None:
    for low, high in ((None, -1.0), (1.0, None), (None, None)):
        got = pd.metric_verdict({"low": low, "high": high}, "minimize")
        assert got == "no detectable difference", (low, high)


def test_verify_says_which_promise_broke_and_what_it_lost_on() -> None:
    diverged = {"metric": "diverged", "verdict": "DIVERGED more often than promised"}
    assert pd.verify_problems({"promise": [diverged]}) == [
        "diverged: DIVERGED more often than promised"
    ]
    vs = {
        "diverged": {"n": 3, "pick_seeds": 0, "baseline_seeds": 0},
        "worse_on": ["final_loss", "throughput", "loss_cv"],
    }
    assert pd.verify_problems({"vs_baseline": vs}) == [
        "it loses to the baseline over the same seeds on final_loss, loss_cv"
    ]


def test_the_causes_of_divergence_are_grouped_by_cause() -> None:
    runs = [run(1, 2.0, "diverged"), run(2, 2.0, "diverged"), run(3, 2.0, "diverged")]
    runs[1]["cause"] = "no_recovery"
    runs[2]["cause"] = None
    got = pd.causes_text({"runs": summarize_seeds(runs)["runs"]})
    assert got == " (loss_explosion on seeds 1; no_recovery on seeds 2; unknown cause on seeds 3)"


def test_the_verdict_line_reads_as_documented() -> None:
    mets = pd.compared_metrics(
        [{"metric": "final_loss", "direction": "minimize"}, {"metric": "throughput"}]
    )
    assert mets == [("final_loss", "minimize"), ("throughput", "minimize")]
    better = pd.compare(result([1.50, 1.61, 1.42]), result([2.0, 2.1, 1.9]), mets[:1])
    # The final loss is positive: judged by the per-seed ratio on the log scale. The ratios
    # 0.75, 0.7667, 0.7474: geometric mean 0.755, its interval t(2) 4.303 x s / sqrt(3) of
    # the logs mapped back; the raw mean difference beside it.
    logs = [math.log(a / b) for a, b in ((1.50, 2.0), (1.61, 2.1), (1.42, 1.9))]
    half = 4.302653 * statistics.stdev(logs) / math.sqrt(3)
    mid = statistics.fmean(logs)
    lo, geo, hi = (math.exp(x) for x in (mid - half, mid, mid + half))
    assert pd.format_line(better, "trial 3") == (
        "trial 3 vs baseline (paired over seeds [1, 2, 3]): BETTER: better than the baseline: "
        f"final_loss; final_loss x{geo:.3g} the baseline's [x{lo:.3g}, x{hi:.3g}] "
        "(difference -0.49)"
    )
    one = pd.compare(result([1.5]), result([2.0]), mets[:1])
    assert pd.format_line(one) == (
        "pick vs baseline (paired over seeds [1]): NO DETECTABLE DIFFERENCE: no difference "
        "beyond the seed noise over 1 paired seed (final_loss); final_loss x0.75 the baseline's "
        "(difference -0.5) (1 pair: no interval)"
    )
    # A metric that can be 0 or negative (loss_drop) keeps the difference.
    drop = pd.compare(result([0.5, 0.6]), result([0.4, 0.3]), [("loss_drop", "maximize")])
    assert "ratio" not in drop["metrics"]["loss_drop"]
    assert pd.format_line(None, "recipe") == "recipe vs baseline: not compared"
    alone = {"verdict": "not compared", "why": "it is the baseline"}
    assert pd.format_line(alone) == "pick vs baseline: NOT COMPARED: it is the baseline"


def test_not_compared_says_why_in_the_documented_shape() -> None:
    same = pd.compare(result([1.0]), result([1.0]), [("final_loss", "minimize")], same=True)
    assert same == {
        "verdict": "not compared",
        "seeds": [],
        "metrics": {},
        "diverged": None,
        "why": "it is the baseline (PyTorch's defaults): nothing to compare with",
    }
    alone = pd.compare(result([1.0]), None, [("final_loss", "minimize")])
    assert alone == {
        "verdict": "not compared",
        "seeds": [],
        "metrics": {},
        "diverged": None,
        "why": "the baseline was not run at these seeds and this length",
    }
    mets = pd.compared_metrics([{"metric": "throughput", "direction": "maximize"}])
    assert mets == [("final_loss", "minimize"), ("throughput", "maximize")]


# ---------------------------------------------------------------------------------------------
# The paired verdict's every branch, its reasons and its rows, worked by hand
# ---------------------------------------------------------------------------------------------

THREE = [("final_loss", "minimize"), ("loss_cv", "minimize"), ("throughput", "maximize")]


def seeds_result(
    finals: list[float],
    cvs: list[float],
    tps: list[float],
    diverged: tuple[int, ...] = (),
    first_seed: int = 1,
) -> dict[str, Any]:
    """Seeds first_seed, ... with these metrics; the seeds (1-based positions) in `diverged`
    stopped early, diverged."""
    runs = []
    for k, (f, c, t) in enumerate(zip(finals, cvs, tps, strict=True), 1):
        gone = k in diverged
        runs.append(
            {
                "seed": first_seed + k - 1,
                "outcome": "diverged" if gone else "complete",
                "cause": "loss_explosion" if gone else None,
                "summary": {
                    "metrics": {"final_loss": f, "loss_cv": c, "throughput": t},
                    "steps_run": 12 if gone else 30,
                    "steps_planned": 30,
                },
            }
        )
    return summarize_seeds(runs, ["final_loss", "loss_cv", "throughput"])


BASE4 = seeds_result(
    [2.0, 2.01, 1.99, 9.0], [0.3, 0.31, 0.29, 0.3], [100.0, 101.0, 99.0, 100.0], diverged=(4,)
)


def test_the_paired_verdict_rows_and_reasons_branch_by_branch() -> None:
    # better on loss_cv, worse on final_loss and throughput, diverged less: mixed
    mine = seeds_result([2.5, 2.51, 2.49, 2.5], [0.1, 0.11, 0.09, 0.1], [90.0, 91.0, 89.0, 90.0])
    out = pd.compare(mine, BASE4, THREE)
    assert out["verdict"] == "mixed" and out["seeds"] == [1, 2, 3, 4]
    # (diverged less on 1 seed of 4: within chance, no gain of the verdict's, but said)
    assert out["why"] == (
        "better on loss_cv, worse on final_loss, throughput; diverged on 0 of 4 seeds, the "
        "baseline on 1: not beyond chance over 4 seeds (p = 1; it takes 6 seeds that diverged on "
        "one side alone)"
    )
    assert out["diverged"] == {
        "n": 4,
        "pick": 0.0,
        "baseline": 0.25,
        "pick_seeds": 0,
        "baseline_seeds": 1,
        "pick_only": 0,
        "baseline_only": 1,
        "p": 1.0,
        "level": 0.95,
        "beyond_chance": False,
        "every_seed": None,
        "decides": False,
    }
    row = out["metrics"]["throughput"]
    assert set(row) == {"direction", "difference", "ratio", "pick", "baseline", "verdict", "level"}
    assert (row["direction"], row["verdict"]) == ("maximize", "worse")
    assert row["ratio"]["mean"] == pytest.approx(0.9, rel=0.01) and row["ratio"]["n"] == 3
    assert row["pick"]["n"] == 4 and row["baseline"]["n"] == 3  # seed 4: the baseline stopped
    # each side over seeds on the log scale: the geometric means
    assert row["pick"]["mean"] == pytest.approx(90.0, rel=1e-3) and row["baseline"]["mean"] == (
        pytest.approx(100.0, rel=1e-3)
    )
    # worse on two, better on none, diverging alike: worse, both named
    same_div = seeds_result(
        [2.5, 2.51, 2.49, 9.5], [0.3, 0.31, 0.29, 0.3], [90.0, 91.0, 89.0, 90.0], diverged=(4,)
    )
    out = pd.compare(same_div, BASE4, THREE)
    assert out["verdict"] == "worse"
    assert out["why"] == "worse than the baseline on final_loss, throughput"
    assert out["diverged"]["pick"] == 0.25
    # as good on every metric, diverged less on 1 seed of 4: within chance, no difference
    # (better by divergence alone takes a difference beyond chance: tests/recipe/
    # test_divergence_chance.py); with loss_cv better, better by loss_cv
    alike = seeds_result(
        [2.0, 2.01, 1.99, 2.0], [0.3, 0.31, 0.29, 0.3], [100.0, 101.0, 99.0, 100.0]
    )
    out = pd.compare(alike, BASE4, THREE)
    chance = (
        "diverged on 0 of 4 seeds, the baseline on 1: not beyond chance over 4 seeds (p = 1; it "
        "takes 6 seeds that diverged on one side alone)"
    )
    assert out["verdict"] == "no detectable difference"
    assert out["why"].endswith(f"; {chance}")
    calmer = seeds_result(
        [2.0, 2.01, 1.99, 2.0], [0.1, 0.11, 0.09, 0.1], [100.0, 101.0, 99.0, 100.0]
    )
    out = pd.compare(calmer, BASE4, THREE)
    assert out["why"] == f"better than the baseline: loss_cv; {chance}"
    # nothing beyond the noise over the seeds both ran
    base3 = seeds_result([2.0, 2.01, 1.99], [0.3, 0.31, 0.29], [100.0, 101.0, 99.0])
    out = pd.compare(alike, base3, THREE)
    assert out["verdict"] == "no detectable difference"
    assert out["why"] == (
        "no difference beyond the seed noise over 3 paired seeds (final_loss, loss_cv, throughput)"
    )
    # the baseline ran at other seeds
    elsewhere = seeds_result([2.0], [0.3], [100.0], first_seed=7)
    out = pd.compare(alike, elsewhere, THREE)
    assert out["verdict"] == "not compared" and out["seeds"] == []
    assert out["why"] == "the baseline was run at other seeds: no pair to compare"


def test_a_loss_many_times_lower_on_every_seed_is_better_whatever_the_raw_spread() -> None:
    """A black-box review's case: 20-40x lower on each of 3 seeds, while the baseline's losses
    spread widely (0.09-0.21): the raw differences' interval reached past 0 and the verdict
    said no detectable difference (and the defaults were exported). Judged by the ratio it is
    better; each side's interval is on the log scale (never below 0)."""
    mine, base = result([0.0067, 0.0044, 0.0031]), result([0.205, 0.089, 0.127])
    raw = paired([0.0067, 0.0044, 0.0031], [0.205, 0.089, 0.127])
    assert raw["low"] < 0 < raw["high"]  # the raw differences alone could not tell
    out = pd.compare(mine, base, [("final_loss", "minimize")])
    assert out["verdict"] == "better", out
    ratio = out["metrics"]["final_loss"]["ratio"]
    assert ratio["high"] < 0.1 and ratio["mean"] == pytest.approx(0.034, rel=0.02)
    assert out["metrics"]["final_loss"]["baseline"]["low"] > 0
    assert out["metrics"]["final_loss"]["baseline"]["scale"] == "log"


def test_the_line_names_the_seeds_compared_when_some_did_not_run_whole() -> None:
    """A seed that failed on either side is left out of the comparison, and the line says
    which seeds were compared (a review saw "paired over seeds [1, 2, 3] ... over 3 paired
    seeds" where seed 2 had failed on both sides)."""
    failed = ["complete", "failed", "complete"]
    mine, base = result([2.0, 2.2, 2.1], failed), result([2.1, 2.3, 2.0], failed)
    out = pd.compare(mine, base, [("final_loss", "minimize")])
    assert out["seeds"] == [1, 2, 3] and out["compared_seeds"] == [1, 3]
    line = pd.format_line(out)
    assert "paired over seeds [1, 3] of [1, 2, 3]" in line
    assert "over 2 paired seeds" in line
