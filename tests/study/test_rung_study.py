"""Rungs over a real SQLite Optuna study: trials asked and told through the study's own code with
made-up metrics (`recorded_study`), rung probes recorded with made-up results through
`record_rung`; promotion, the pick at the decided rung, the honest answers and export's refusal.
No Ray, no probe process."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

from autotune import space as sp
from autotune import study as st
from autotune.errors import RecipeError
from autotune.study import pick as pk
from autotune.study import rung_phase as rp
from autotune.study import rungs as rg

N = 9


def open_recorded(tmp_path: Path, metrics: list[dict[str, float]]) -> tuple[Any, sp.Space, Path]:
    import optuna

    study_dir = h.recorded_study(tmp_path, "r", trials=N, finished=N, metrics=metrics)
    study = optuna.load_study(study_name="r", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = sp.loads(h.mlp_space("r", trials=N), source="r", overrides=["budget.target_steps=90"])
    return study, space, study_dir


def screen_space() -> sp.Space:
    """The recorded study's space as it was stored: no budget.target_steps, so decided at the
    screen (with a target and no rung run, the study is unfinished: its rungs are pending, and
    a verification there weighs on no named pick, `autotune.study.unfinished`)."""
    return sp.loads(h.mlp_space("r", trials=N), source="r")


def made_up(cv: float, tp: float = 100.0, drop: float = 0.5) -> dict[str, float]:
    return {"loss_cv": cv, "throughput": tp, "loss_drop": drop}


def probe_out(metrics: dict[str, float], outcome: str = "complete") -> dict[str, Any]:
    return {"outcome": outcome, "summary": {"metrics": metrics, "samples_seen": 32}}


def test_promotion_from_a_real_screen_and_the_pick_at_the_decided_rung(tmp_path: Path) -> None:
    # trial 3 is the stablest at the screen but does not learn (infeasible)
    metrics = [made_up(0.5)] + [made_up(0.1 * i) for i in range(1, N)]
    metrics[3] = made_up(0.01, drop=0.0)
    study, space, study_dir = open_recorded(tmp_path, metrics)
    screen = rp.screen_results(study, space)
    assert [r.feasible for r in screen] == [i != 3 for i in range(N)]
    objectives = [o.model_dump() for o in space.objectives]
    # throughput rises with the number: the front is traded off; ceil(9/3) = 3 best + baseline
    numbers = rg.promote(screen, objectives, eta=3, min_promote=2)
    assert 0 in numbers and 3 not in numbers and len(numbers) == 4

    trials = {t.number: t for t in study.get_trials()}
    steps = 90
    # at 90 steps the order turns: the highest promoted number is now the stablest
    for i, n in enumerate(numbers):
        cv = 0.4 if n == 0 else 0.3 - 0.05 * i
        rp.record_rung(space, study, study_dir, trials[n], 1, steps, probe_out(made_up(cv)))
    cur = [rp.as_result(r) for r in pk.rung_rows(study, steps).values()]
    ag = rg.agreement(screen, cur, objectives)
    assert ag["n"] == 4 and ag["tau"] is not None
    study.set_user_attr(
        "autotune.rungs", [{"rung": 1, "steps": steps, "numbers": numbers, "agreement": ag}]
    )
    study.set_user_attr(
        "autotune.decided", {"steps": steps, "rung": 1, "reason": "target", "target_steps": 90}
    )
    cands = pk.candidates(study)
    assert sorted(c.number for c in cands) == numbers and {c.steps for c in cands} == {steps}
    by_n = {c.number: c for c in cands}
    assert by_n[numbers[-1]].value("loss_cv", 0) == pytest.approx(0.3 - 0.05 * 3)
    assert (study_dir / "trials" / f"{numbers[1]:04d}-r1.json").is_file()
    # an explicit trial may be any feasible screened one
    assert {c.number for c in pk.candidates(study, every=True)} == set(range(N)) - {3}

    summary = st.summarize(study, space, study_dir)
    assert [r["steps"] for r in summary["rungs"]] == [30, 90]
    assert summary["rungs"][1]["trials"] == 4 and summary["decided"]["steps"] == 90
    assert summary["pick"]["steps"] == 90 and summary["pick"]["number"] in numbers
    text = st.format_summary(summary)
    assert "decided at 90 steps (the target)" in text
    # The improvement over the baseline is the pick's at the decided rung, labelled so; the
    # screen's best-per-objective figure is a secondary line.
    pick = summary["pick"]["number"]
    imp = summary["improvement"]["loss_cv"]
    cv = 0.3 - 0.05 * numbers.index(pick)
    assert imp["steps"] == 90 and imp["trial"] == pick and imp["source"] == "rung"
    assert (imp["baseline"], imp["best"]) == pytest.approx((0.4, cv))
    assert imp["change_pct"] == pytest.approx(100 * (cv - 0.4) / 0.4)
    assert f"vs baseline at 90 steps (the decided length; trial {pick}, the pick" in text
    # one run each, and the baseline's spread over seeds not measured: said so
    assert (
        f"loss_cv      pick {cv:.4g}  baseline 0.4  ({imp['change_pct']:+.1f}%, one run against "
        "one run: the baseline's seed-to-seed spread was not measured)"
    ) in text
    assert summary["screen_improvement"]["loss_cv"]["baseline"] == pytest.approx(0.5)
    assert "at the screen (30 steps; not what the pick was decided on): best loss_cv" in text
    # The baseline picked, alone on its front: nothing did better; beside trade-offs on the
    # front: the balanced choice, and those are named (not "nothing did better").
    base_row = (
        next(r for r in summary["pareto"] if r["number"] == 0)
        if any(r["number"] == 0 for r in summary["pareto"])
        else {**summary["pareto"][0], "number": 0}
    )
    baseline_won = {**summary, "pick": {**summary["pick"], "number": 0}, "pareto": [base_row]}
    assert (
        "(the baseline: no other configuration did better than PyTorch's defaults)"
        in st.format_summary(baseline_won)
    )
    others = [r["number"] for r in summary["pareto"] if r["number"] != 0]
    assert others
    on_front = [base_row, *(r for r in summary["pareto"] if r["number"] != 0)]
    traded = st.format_summary({**baseline_won, "pareto": on_front})
    assert "did better" not in traded
    assert f"the balanced choice of the front, where trial(s) {others[0]}" in traded
    assert "did better than PyTorch's defaults" not in text
    # a study stopped after its baseline (or whose other trials all failed): it beat nothing
    alone = {**baseline_won, "counts": {**summary["counts"], "complete": 1}}
    alone_text = st.format_summary(alone)
    assert "did better" not in alone_text
    assert "PyTorch's defaults: no other trial completed to compare it with" in alone_text

    # The export records the pick's run at the decided length (its rung record), the curve a
    # migration reproduces, not its screen's.
    from autotune.study import export as ex

    longer = probe_out(made_up(0.3 - 0.05 * numbers.index(pick)))
    longer["summary"].update(
        seed=0, steps_run=steps, series={"loss": [2.0 - i / 90 for i in range(90)]}
    )
    rp.record_rung(space, study, study_dir, trials[pick], 1, steps, longer)
    curve = ex.recipe_from_study(str(study_dir), f"trial {pick}").recorded["curve"]
    assert curve["steps_run"] == steps and curve["step"] == list(range(steps))
    assert curve["value"] == pytest.approx([2.0 - i / 90 for i in range(90)])

    # A record from before the target changed does not count.
    assert rp.read_rung_record(study_dir, numbers[1], 1, steps) is not None
    assert rp.read_rung_record(study_dir, numbers[1], 1, 120) is None


def verified(diverged_seed: int | None) -> dict[str, Any]:
    runs = [
        {
            "seed": s,
            "outcome": "diverged" if s == diverged_seed else "complete",
            "cause": "grad_explosion" if s == diverged_seed else None,
        }
        for s in (1, 2, 3)
    ]
    share = 1 / 3 if diverged_seed else 0.0
    return {
        "n": 3,
        "seeds": [1, 2, 3],
        "diverged_share": share,
        "failed": 0,
        "runs": runs,
        "metrics": {},
        "steps": 30,
        "all_feasible": diverged_seed is None,
    }


def test_no_candidate_held_is_said_and_export_refuses_without_an_explicit_pick(
    tmp_path: Path,
) -> None:
    from autotune.study import export as ex

    study, _, study_dir = open_recorded(tmp_path, [made_up(0.5 - 0.05 * i) for i in range(N)])
    space = screen_space()
    study.set_user_attr("autotune.verified.8", verified(diverged_seed=2))
    summary = st.summarize(study, space, study_dir)
    assert summary["pick"]["number"] is None and summary["pick"]["holds"] is False
    assert summary["pick"]["best"] == 8
    assert "trial 8 diverged on seed 2 (grad_explosion)" in summary["pick"]["why"]
    text = st.format_summary(summary)
    assert "no candidate held on every seed" in text
    with pytest.raises(RecipeError, match=r"--pick 'trial 8'"):
        ex.recipe_from_study(str(study_dir))
    recipe = ex.recipe_from_study(str(study_dir), "trial 8")
    assert recipe.source["trial"] == 8
    # once a candidate holds, the named pick takes it
    study.set_user_attr("autotune.verified.7", verified(diverged_seed=None))
    assert pk.pick(pk.candidates(study), [o.model_dump() for o in space.objectives]).number == 7


def test_a_diverged_baseline_is_reported_as_such_not_as_a_percentage(tmp_path: Path) -> None:
    import optuna

    study_dir = h.recorded_study(tmp_path, "r", trials=3, finished=0)
    study = optuna.load_study(study_name="r", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = sp.loads(h.mlp_space("r", trials=3), source="r")
    cond = sp.condition(space, platform="cpu")
    for i in range(3):
        trial = study.ask()
        if i:
            st.suggest(trial, space, cond.searched)
        frozen = study._storage.get_trial(trial._trial_id)
        summary = {"metrics": made_up(0.3 - 0.1 * i), "diverged_at_step": 37 if i == 0 else None}
        result = {
            "outcome": "diverged" if i == 0 else "complete",
            "cause": "loss_explosion" if i == 0 else None,
            "summary": summary,
        }
        st.tell(study, frozen, st.complete_outcome(space, frozen, result))
    summary = st.summarize(study, space, study_dir)
    imp = summary["improvement"]["loss_cv"]
    assert imp["change_pct"] is None and imp["baseline"] is None
    assert imp["baseline_diverged"] == {"step": 37, "cause": "loss_explosion", "ran_whole": False}
    text = st.format_summary(summary)
    assert "baseline diverged at step 37 (loss_explosion)" in text
    assert "%" not in next(ln for ln in text.splitlines() if ln.strip().startswith("loss_cv"))


# ---------------------------------------------------------------------------------------------
# final_loss <= 1.05 x the baseline's at the same length: screen, rungs, verification
# ---------------------------------------------------------------------------------------------

RELATIVE = (
    "constraints:\n"
    "  - {metric: loss_drop, op: '>=', value: 0.05}\n"
    "  - {metric: final_loss, op: '<=', value: 1.05, relative_to: baseline}\n"
)


def relative_space(trials: int = N) -> sp.Space:
    text = h.mlp_space("r", trials=trials) + RELATIVE
    return sp.loads(text, source="r", overrides=["budget.target_steps=90"])


def with_loss(cv: float, final: float, tp: float = 100.0) -> dict[str, float]:
    return {**made_up(cv, tp), "final_loss": final}


def test_a_trial_told_before_the_baseline_finished_is_judged_again_before_promotion(
    tmp_path: Path,
) -> None:
    import optuna

    study_dir = h.recorded_study(tmp_path, "r", trials=3, finished=0)
    study = optuna.load_study(study_name="r", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = relative_space(3)
    cond = sp.condition(space, platform="cpu")
    asked = [study.ask() for _ in range(3)]
    for trial in asked[1:]:
        st.suggest(trial, space, cond.searched)
    # trials 1 and 2 finish while the baseline (trial 0) still runs: no reference yet
    told = {1: with_loss(0.05, 2.4), 2: with_loss(0.2, 2.05), 0: with_loss(0.3, 2.0)}
    for n, metrics in told.items():
        frozen = study._storage.get_trial(asked[n]._trial_id)
        result = {"outcome": "complete", "summary": {"metrics": metrics}}
        ref = st.records.screen_reference(study)
        assert ref is None, "the baseline is its own reference"
        st.tell(study, frozen, st.complete_outcome(space, frozen, result, ref))
    trials = {t.number: t for t in study.get_trials()}
    assert trials[1].user_attrs["autotune.feasible"], "told vacuously: Optuna saw it feasible"
    assert trials[0].user_attrs["autotune.constraints"][2] < 0, "the baseline against itself"
    screen = {r.number: r for r in rp.screen_results(study, space)}
    assert not screen[1].feasible, "1.2 x the baseline's final_loss"
    assert screen[2].feasible and screen[0].feasible
    objectives = [o.model_dump() for o in space.objectives]
    assert rg.promote(list(screen.values()), objectives, eta=3, min_promote=1) == [0, 2]

    # A study decided at the screen (no rungs) picks among the screen's trials: as Optuna was
    # told, trial 1 would be a candidate (and the stablest); judged again after the screen, not.
    assert 1 in [c.number for c in pk.candidates(study)]
    rp.rejudge_screen(study, space)
    assert sorted(c.number for c in pk.candidates(study)) == [0, 2]
    summary = st.summarize(study, space, study_dir)
    assert 1 not in [row["number"] for row in summary["pareto"]]


def test_a_config_at_1_2x_the_baselines_final_loss_is_infeasible_at_its_rung(
    tmp_path: Path,
) -> None:
    metrics = [with_loss(0.5, 2.0)] + [with_loss(0.1 * i, 2.0) for i in range(1, N)]
    study, _, study_dir = open_recorded(tmp_path, metrics)
    space = relative_space()
    trials = {t.number: t for t in study.get_trials()}
    steps = 90
    # at 90 steps trial 1 is the stablest by far but ends at 1.2 x the baseline's final_loss;
    # its record is written before the baseline's (vacuous then), judged again with the rung
    at_rung = {1: with_loss(0.01, 2.4), 0: with_loss(0.3, 2.0), 2: with_loss(0.2, 2.1)}
    at_rung.update({4: with_loss(0.25, 1.9)})
    records = [
        rp.record_rung(space, study, study_dir, trials[n], 1, steps, probe_out(m))
        for n, m in at_rung.items()
    ]
    assert records[0]["feasible"], "no baseline record yet: vacuous"
    rp.judge_rung(space, study, study_dir, records)
    rows = pk.rung_rows(study, steps)
    assert {n: r["feasible"] for n, r in rows.items()} == {0: True, 1: False, 2: True, 4: True}
    saved = rp.read_rung_record(study_dir, 1, 1, steps)
    assert saved is not None and saved["feasible"] is False, "the file says so too"
    cur = [rp.as_result(r) for r in rows.values()]
    objectives = [o.model_dump() for o in space.objectives]
    assert 1 not in rg.promote(cur, objectives, eta=3, min_promote=2)
    study.set_user_attr(
        "autotune.decided", {"steps": steps, "rung": 1, "reason": "target", "target_steps": 90}
    )
    assert 1 not in {c.number for c in pk.candidates(study)}

    # All verified at the decided length: the pick's and the baseline's verified means.
    for n, cv in ((0, 0.3), (2, 0.15), (4, 0.2)):
        ver = {"n": 2, "seeds": [1, 2], "diverged_share": 0.0, "failed": 0, "runs": []}
        ver["metrics"] = {"loss_cv": {"mean": cv}, "throughput": {"mean": 100.0}}
        study.set_user_attr(f"autotune.verified.{n}", {**ver, "steps": steps})
    summary = st.summarize(study, space, study_dir)
    imp = summary["improvement"]["loss_cv"]
    assert summary["pick"]["number"] == imp["trial"] == 2
    assert (imp["source"], imp["steps"], imp["baseline"], imp["best"]) == (
        "verified",
        90,
        0.3,
        0.15,
    )
    assert imp["change_pct"] == pytest.approx(-50.0)


def test_a_verification_seed_is_judged_against_the_baselines_run_at_that_seed(
    tmp_path: Path,
) -> None:
    from autotune.recipe import verify as vf
    from autotune.study import verification as ve

    study, _, study_dir = open_recorded(
        tmp_path, [with_loss(0.5 - 0.05 * i, 2.0) for i in range(N)]
    )
    space = relative_space()
    steps = space.probe.steps
    # the baseline's seeds: 2.0 on seed 1, 3.0 on seed 2; the candidate 2.2 and 2.9
    for seed, final in ((1, 2.0), (2, 3.0)):
        out = {"outcome": "complete", "seed": seed, "number": 0}
        out["summary"] = {"metrics": with_loss(0.3, final)}
        ve.save_seed(study_dir, 0, seed, out, steps)
    runs = [
        {"seed": s, "outcome": "complete", "summary": {"metrics": with_loss(0.1, f)}}
        for s, f in ((1, 2.2), (2, 2.9))
    ]
    res = {**vf.summarize_seeds(runs, ["loss_cv"]), "steps": steps}
    ve.judge_seeds(study, space, study_dir, res, runs)
    assert [r["feasible"] for r in res["runs"]] == [False, True]
    assert res["all_feasible"] is False and res["vacuous"] == []
    # Not verified, the baseline's screen (final_loss 2.0) is the reference of every seed.
    for seed in (1, 2):
        (study_dir / "verify" / f"0000-s{steps}-seed{seed}.json").unlink()
    ve.judge_seeds(study, space, study_dir, res, runs)
    assert [r["feasible"] for r in res["runs"]] == [False, False]
    study.set_user_attr("autotune.verified.5", {**res, "diverged_share": 0.0, "n": 2})
    why = pk.why_not_held([c for c in pk.candidates(study) if c.verified])
    # which constraint, and the value (a black-box review: the reason named none)
    assert why == "trial 5 broke a constraint on seed 1: final_loss <= 1.05 x baseline (got 2.2)"


def test_improvement_at_the_decided_rung_says_the_baseline_diverged_there(tmp_path: Path) -> None:
    study, _, study_dir = open_recorded(
        tmp_path, [with_loss(0.5 - 0.05 * i, 2.0) for i in range(N)]
    )
    space = relative_space()
    trials = {t.number: t for t in study.get_trials()}
    steps = 90
    gone = {**probe_out(with_loss(0.9, math.nan), "diverged"), "cause": "loss_explosion"}
    gone["summary"]["diverged_at_step"] = 61
    outs = {0: gone, 2: probe_out(with_loss(0.2, 9.0)), 4: probe_out(with_loss(0.1, 2.0))}
    records = [
        rp.record_rung(space, study, study_dir, trials[n], 1, steps, out) for n, out in outs.items()
    ]
    rp.judge_rung(space, study, study_dir, records)
    assert pk.rung_rows(study, steps)[2]["feasible"], "no baseline value at 90: vacuous"
    study.set_user_attr(
        "autotune.decided", {"steps": steps, "rung": 1, "reason": "target", "target_steps": 90}
    )
    summary = st.summarize(study, space, study_dir)
    imp = summary["improvement"]["loss_cv"]
    assert imp["baseline_diverged"] == {"step": 61, "cause": "loss_explosion", "ran_whole": False}
    assert imp["change_pct"] is None and imp["steps"] == steps
    assert summary["vacuous"] == {"steps": 90, "constraints": ["final_loss <= 1.05 x baseline"]}
    text = st.format_summary(summary)
    assert "vs baseline: baseline diverged at step 61 (loss_explosion)" in text
    assert "final_loss <= 1.05 x baseline: vacuous at 90 steps" in text


# ---------------------------------------------------------------------------------------------
# Candidates at the decided rung: its record there decides, not the screen
# ---------------------------------------------------------------------------------------------


def held(cv: float, steps: int) -> dict[str, Any]:
    """A verification that held on both seeds, with a mean loss_cv of `cv`."""
    runs = [{"seed": s, "outcome": "complete", "feasible": True} for s in (1, 2)]
    metrics = {"loss_cv": {"mean": cv}, "throughput": {"mean": 100.0}}
    return {
        "n": 2,
        "seeds": [1, 2],
        "diverged_share": 0.0,
        "failed": 0,
        "runs": runs,
        "metrics": metrics,
        "steps": steps,
        "all_feasible": True,
    }


def test_a_baseline_that_had_not_learned_at_the_screen_is_verified_and_picked_at_the_rung(
    tmp_path: Path,
) -> None:
    from autotune.study import export as ex
    from autotune.study import verification as ve

    # The baseline (trial 0) has not learned by the screen (loss_drop 0 < 0.05): infeasible there.
    metrics = [made_up(0.5, drop=0.0)] + [made_up(0.1 * i) for i in range(1, N)]
    study, _, study_dir = open_recorded(tmp_path, metrics)
    space = sp.loads(
        h.mlp_space("r", trials=N, verify_top_k=2), source="r", overrides=["budget.target_steps=90"]
    )
    screen = rp.screen_results(study, space)
    assert not screen[0].feasible
    objectives = [o.model_dump() for o in space.objectives]
    numbers = rg.promote(screen, objectives, eta=3, min_promote=2)
    assert numbers == [0, 1, 2, 3], "the baseline is always promoted"
    # At 90 steps the baseline learned and is the most stable; trial 2, feasible at the screen,
    # stops learning there (loss_drop 0): infeasible at the decided rung.
    trials = {t.number: t for t in study.get_trials()}
    at_rung = {0: made_up(0.05), 1: made_up(0.2), 2: made_up(0.01, drop=0.0), 3: made_up(0.3)}
    for n, m in at_rung.items():
        rp.record_rung(space, study, study_dir, trials[n], 1, 90, probe_out(m))
    cur = [rp.as_result(r) for r in pk.rung_rows(study, 90).values()]
    ag = rg.agreement(screen, cur, objectives)
    study.set_user_attr(
        "autotune.rungs", [{"rung": 1, "steps": 90, "numbers": numbers, "agreement": ag}]
    )
    study.set_user_attr(
        "autotune.decided", {"steps": 90, "rung": 1, "reason": "target", "target_steps": 90}
    )
    assert sorted(c.number for c in pk.candidates(study)) == [0, 1, 3]
    every = {c.number for c in pk.candidates(study, every=True)}
    assert every == set(range(N)) - {2}, "unpromoted ones by their screen; 2 by its rung"
    todo = ve.to_verify(study, space)
    assert [c.number for c in todo] == [0, 1, 3] and {c.steps for c in todo} == {
        90
    }  # 2 searched + the baseline

    for n, cv in ((0, 0.05), (1, 0.2)):
        study.set_user_attr(f"autotune.verified.{n}", held(cv, 90))
    summary = st.summarize(study, space, study_dir)
    assert summary["pick"]["number"] == 0 and summary["pick"]["steps"] == 90
    assert [v["number"] for v in summary["verified"]] == [0, 1]
    assert summary["rungs"][1]["agreement"]["metric"] == "loss_cv"
    # the front the pick is the knee of: the candidates' values at 90 steps
    assert [(r["number"], r["steps"]) for r in summary["pareto"]] == [(0, 90)]
    text = st.format_summary(summary)
    assert "Pareto front at 90 steps" in text and "decided at 90 steps (the target)" in text
    assert "(the baseline: no other configuration did better than PyTorch's defaults)" in text
    # its infeasibility is the screen's, and the summary says at which length
    assert (
        "baseline (trial 0, PyTorch defaults) at the screen (30 steps): complete (infeasible"
        in text
    )
    assert ex.recipe_from_study(str(study_dir)).source["trial"] == 0
    with pytest.raises(RecipeError, match=r"trial 2 is not a candidate .* at 90 steps, the length"):
        ex.recipe_from_study(str(study_dir), "trial 2")


def test_at_the_screen_the_screens_feasibility_decides() -> None:
    row_ok = {"feasible": True, "values": [0.1, 100.0]}
    row_bad = {"feasible": False, "values": [0.01, 100.0]}
    # decided above the screen: the record at the decided rung, whatever the screen said
    assert pk.is_candidate(False, row_ok, above_screen=True)
    assert not pk.is_candidate(True, row_bad, above_screen=True)
    assert not pk.is_candidate(True, row_bad, above_screen=True, every=True)
    assert not pk.is_candidate(True, None, above_screen=True), "not run at the decided rung"
    assert pk.is_candidate(True, None, above_screen=True, every=True), "an explicit trial N"
    assert not pk.is_candidate(False, None, above_screen=True, every=True)
    # decided at the screen: the screen's feasibility
    assert pk.is_candidate(True, None, above_screen=False)
    assert not pk.is_candidate(False, None, above_screen=False, every=True)


def test_a_study_whose_throughput_is_within_noise_decides_on_stability(tmp_path: Path) -> None:
    # Screened trials whose throughputs (100-140) all overlap within their timing intervals
    # (+-25 each): on point values the knee of loss_cv against throughput is trial 6 (middling
    # on both); within noise the stablest, trial 2, dominates every other and is the pick, and
    # the summary says why.
    cvs = [0.5, 0.3, 0.1, 0.4, 0.35, 0.45, 0.15, 0.2, 0.6]
    tps = [100.0, 105.0, 100.0, 120.0, 125.0, 130.0, 135.0, 110.0, 140.0]

    def metrics(half: float | None) -> list[dict[str, float]]:
        out = []
        for cv, tp in zip(cvs, tps, strict=True):
            m = made_up(cv, tp)
            if half is not None:
                m.update(throughput_low=tp - half, throughput_high=tp + half)
            out.append(m)
        return out

    study, space, _ = open_recorded(tmp_path / "noisy", metrics(25.0))
    objectives = [o.model_dump() for o in space.objectives]
    space = sp.loads(h.mlp_space("r", trials=N), source="r")  # decided at the screen
    summary = st.summarize(study, space)
    assert summary["pick"]["number"] == 2
    noisy = summary["throughput_noise"]
    assert noisy["within_noise"] is True and noisy["metric"] == "throughput"
    assert noisy["candidates"] == N and noisy["range"] == [100.0, 140.0]
    assert noise_line(st.format_summary(summary))
    # the same values measured without timing noise: the knee decides, and nothing is said
    study, _, _ = open_recorded(tmp_path / "bare", metrics(None))
    bare = st.summarize(study, space)
    assert bare["throughput_noise"] is None and not noise_line(st.format_summary(bare))
    cands = pk.candidates(study)
    assert bare["pick"]["number"] == pk.ranked(cands, objectives)[0].number != 2
    # a quiet machine (+-1): throughput separates them again, nothing is said either
    study, _, _ = open_recorded(tmp_path / "quiet", metrics(1.0))
    quiet = st.summarize(study, space)
    assert quiet["throughput_noise"]["within_noise"] is False
    assert not noise_line(st.format_summary(quiet))


def noise_line(text: str) -> bool:
    said = "throughput differences are within timing noise: decided on stability and final loss"
    return any(line.startswith(said) for line in text.splitlines())


def test_when_nothing_searched_held_and_the_defaults_did_the_defaults_are_the_pick(
    tmp_path: Path,
) -> None:
    from autotune.study import export as ex

    # the baseline (trial 0) is no candidate (it did not learn at the screen seed), but it ran
    # whole and held on every verification seed; trial 8, the only other verified, did not
    metrics = [made_up(0.5, drop=0.0)] + [made_up(0.5 - 0.05 * i) for i in range(1, N)]
    study, _, study_dir = open_recorded(tmp_path, metrics)
    space = screen_space()
    study.set_user_attr("autotune.verified.8", verified(diverged_seed=2))
    study.set_user_attr("autotune.verified.0", verified(diverged_seed=None))
    assert 0 not in {c.number for c in pk.candidates(study)}
    summary = st.summarize(study, space, study_dir)
    pick = summary["pick"]
    assert (pick["number"], pick["first_choice"], pick["defaults_preferred"]) == (0, 0, True)
    assert pick["baseline"] is True and pick["verdict"] == "not compared"
    why = summary["vs_baseline"]["why"]
    assert why.startswith("no searched configuration held on every seed (trial 8 diverged on seed")
    assert why.endswith("PyTorch's defaults did")
    rows = {r["number"]: r for r in summary["verified"]}
    assert rows[0]["why_not_picked"] is None and "diverged on seed 2" in rows[8]["why_not_picked"]
    text = st.format_summary(summary)
    assert "pick: the defaults (trial 0): no searched configuration held on every seed" in text
    recipe = ex.recipe_from_study(str(study_dir))  # no --pick needed
    assert recipe.source["trial"] == 0 and recipe.source["defaults"] is True
    # an explicit pick is still the user's
    assert ex.recipe_from_study(str(study_dir), "trial 8").source["trial"] == 8
    # the defaults failing a seed too: nothing held, no pick, export refuses without one
    study.set_user_attr("autotune.verified.0", verified(diverged_seed=1))
    summary = st.summarize(study, space, study_dir)
    assert summary["pick"]["number"] is None and summary["pick"]["holds"] is False
    rows = {r["number"]: r for r in summary["verified"]}
    assert rows[0]["why_not_picked"] == (
        "the baseline (no candidate at the decided length: see its seeds)"
    )
    with pytest.raises(RecipeError, match=r"--pick 'trial 8'"):
        ex.recipe_from_study(str(study_dir))
