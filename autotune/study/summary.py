"""The study's summary: the Pareto front, the improvement over the baseline, the verified
candidates and the pick, parameter importances, and its text for the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.probe.outcome import Outcome
from autotune.recipe.seeds import ran_whole
from autotune.study import attrs as ua
from autotune.study import improvement as im
from autotune.study import pick as pk
from autotune.study import short_of, unfinished
from autotune.study.failures import failed_seeds, failed_trials
from autotune.study.fidelity import rank_fidelity
from autotune.study.identical import identical_losses
from autotune.study.objectives import directions, reference, vacuous
from autotune.study.pick import dominates
from autotune.study.records import not_applied, screen_feasible, screen_reference
from autotune.study.rungs import plan
from autotune.study.verdict import pick_part


def pareto_front(points: Sequence[tuple[int, Sequence[float]]], dirs: Sequence[str]) -> list[int]:
    return [n for n, v in points if not any(dominates(w, v, dirs) for m, w in points if m != n)]


def summarize(
    study: Any,
    space: sp.Space,
    study_dir: Path | None = None,
    dropped: Mapping[str, str] | None = None,
    *,
    running: str | None = None,
) -> dict[str, Any]:
    """The study's summary from the Optuna storage alone (so `autotune show` can print it).

    `running`: who runs the study now (`session.driver_running`: its driver lock is held),
    for `autotune show` of a study in progress: its unfinished trials are running, not
    interrupted, and what it says is the state so far."""
    judged = screen_feasible(study)
    trials = study.get_trials(deepcopy=False)
    counts, feasible, baseline, info = _tally(trials, judged, in_progress=running is not None)
    dirs = directions(space)
    objectives = [o.model_dump() for o in space.objectives]
    best, at_screen = im.best_and_improvement(study, space, feasible, baseline)
    left = unfinished.state(study, space, running)
    partial = unfinished.verification_partial(left)
    picked = _verified_and_pick(study, objectives, partial)
    rungs = _rungs(study, space, counts, left)
    steps = int(rungs["decided"]["steps"])
    short = short_of.at_target(study, objectives, space.probe.steps)
    if short is not None and short["short"] and picked.get("pick") is None:
        picked["pick"] = short_of.no_pick(short, space.name)
    for part in ("pick", "vs_baseline"):  # a study without rungs decides at the screen
        if picked.get(part) and picked[part].get("steps") is None:
            picked[part]["steps"] = steps
    state = im.baseline_at(study, space, baseline, steps)
    ref = reference(state["outcome"], state["metrics"], ran_whole(state)) if state else None
    at_rung = _decided_candidates(study, rungs["decided"])
    points = [(n, c.values) for n, c in at_rung.items()] if at_rung is not None else feasible
    values = dict(points)
    front = sorted(
        pareto_front(points, dirs),
        key=lambda n: values[n][0] * (1 if dirs[0] == "minimize" else -1),
    )
    return {
        **picked,
        **rungs,
        "study": space.name,
        "objectives": objectives,
        "constraints": [c.model_dump() for c in space.constraints],
        "trials": space.budget.trials,
        # its row is its screen run: what it breaks is judged as the screen judged it
        "baseline": None if baseline is None else _row(space, baseline, screen_reference(study)),
        # Why there is no baseline row yet: its trial is running, was interrupted or has not
        # started (None when it finished, or the study has none).
        "baseline_unfinished": _unfinished(trials, running) if baseline is None else None,
        "in_progress": running is not None,
        "driver": running,
        # Where the study stopped (`unfinished.state`): None when it finished.
        "unfinished": left,
        # The front of the candidates at the decided length (their values there), so that the
        # pick, the knee of that front, is on it; the screen's when decided at the screen.
        "pareto": [_front_row(space, info[n], ref, (at_rung or {}).get(n)) for n in front],
        "pareto_steps": steps,
        # The pick when it is not on that front (verified over other seeds, or tied within
        # noise): the front members that beat it there, so the text says where it came from.
        "pick_off_front": _off_front(picked, front, values, dirs, space.probe.seed),
        "best": best,
        # Nothing feasible at the decided length, though feasible trials stopped short of it
        # (`short_of.at_target`): what happened there, and what to carry on.
        "short_of_target": short,
        # The pick against the baseline at the length the study decided at; the screen's
        # best-per-objective figure only beside it, labelled, when that is another length.
        "improvement": im.improvement_at(study, space, baseline, state, picked.get("pick"), steps),
        "screen_improvement": at_screen if steps != space.probe.steps else None,
        # Relative constraints with no baseline value at the decided length: not judged there.
        "vacuous": {"steps": steps, "constraints": vacuous(space, ref)} if baseline else None,
        "screen_yardstick": study.user_attrs.get(ua.SCREEN_YARDSTICK),
        "counts": counts,
        # What happened to the trials promoted above the screen, per length (`counts` is the
        # screen's): a late blow-up diverges there.
        "rung_counts": _rung_counts(study, space),
        # {number, baseline, cause, error}: one line each; a verification seed's with its seed
        "failures": failed_trials(study) + failed_seeds(study),
        # knobs differ, loss series the same
        "identical_losses": identical_losses(study, space.workload.script is not None),
        "dropped_knobs": dict(dropped or {}),
        # Searched knobs the script never applied (-> the helper that would): their values in
        # the front and the pick are not what ran (`probe.applied`).
        "not_applied": not_applied(study, space),
        "clip_norm_auto": study.user_attrs.get(ua.CLIP_NORM_AUTO),
        "study_dir": str(study_dir) if study_dir else None,
        "compute": (spent := unfinished.spent(study, space, study_dir, left)),
        "compute_saved": (spent or {}).get("saved_vs_full"),  # vs full length + verification
        "rank_fidelity": rank_fidelity(study, space, rungs["decided"]),
    }


def _off_front(
    picked: Mapping[str, Any],
    front: Sequence[int],
    values: Mapping[int, Sequence[float]],
    dirs: Sequence[str],
    seed: int,
) -> dict[str, Any] | None:
    """A searched pick that is not on the printed front: the front is each candidate's own run
    (at the probe's `seed`), the pick the knee of the verified means over other seeds, or of
    values tied within their noise; on that run the front members in `beaten_by` beat it. None
    when the pick is on the front, is the baseline (`summary_text._baseline_won` says why), or
    there is none. `verified_seeds`: the seeds it was chosen on (None: not verified)."""
    pick = picked.get("pick") or {}
    n = pick.get("number")
    if n is None or n in front or pick.get("baseline") or n not in values:
        return None
    beaten = [m for m in front if dominates(values[m], values[n], dirs)]
    rows: list[dict[str, Any]] = picked.get("verified") or []
    row = next((v for v in rows if v["number"] == n), {})
    return {"seed": seed, "beaten_by": beaten, "verified_seeds": row.get("seeds")}


def _tally(
    trials: Sequence[Any], judged: Callable[[Any], bool], *, in_progress: bool
) -> tuple[dict[str, int], list[tuple[int, list[float]]], Any, dict[int, Any]]:
    """Trials per outcome, the feasible ones' values, the baseline trial (once it finished),
    and the finished trials by number. A trial still waiting to start (enqueued: the baseline
    of a study stopped in its first seconds) is not counted. A trial Optuna holds as running
    is `running` while the study's driver runs (`in_progress`), else `interrupted` (its driver
    died under it), as the text says."""
    import optuna

    unfinished = "running" if in_progress else "interrupted"
    counts: dict[str, int] = {**{o.value: 0 for o in Outcome}, "running": 0, "interrupted": 0}
    feasible: list[tuple[int, list[float]]] = []
    baseline = None
    info: dict[int, Any] = {}
    for t in trials:
        if t.state == optuna.trial.TrialState.RUNNING:
            counts[unfinished] += 1
            continue
        if not t.state.is_finished():
            continue
        outcome = ua.outcome(t)
        counts[outcome] = counts.get(outcome, 0) + 1
        info[t.number] = t
        if t.user_attrs.get(ua.BASELINE):
            baseline = t
        if t.state == optuna.trial.TrialState.COMPLETE and judged(t):
            feasible.append((t.number, list(t.values)))
    return counts, feasible, baseline, info


def _unfinished(trials: Sequence[Any], running: str | None) -> str | None:
    """The state of a baseline trial that has not finished: `running` (its driver runs),
    `interrupted` (it was running when its driver stopped) or `not started`; None when the
    study has no such trial."""
    import optuna

    for t in trials:
        if ua.is_baseline(t) and not t.state.is_finished():
            if t.state != optuna.trial.TrialState.RUNNING:
                return "not started"
            return "running" if running is not None else "interrupted"
    return None


def _decided_candidates(study: Any, decided: Mapping[str, Any]) -> dict[int, Any] | None:
    """The candidates at the decided rung by number (`pick.candidates`: feasible in their
    record there, values of that length); None when decided at the screen."""
    if not decided.get("rung"):
        return None
    return {c.number: c for c in pk.candidates(study)}


def _front_row(
    space: sp.Space, t: Any, ref: Mapping[str, Any] | None, cand: Any | None
) -> dict[str, Any]:
    """A front member's row: the trial's, with its values and metrics at the decided rung when
    it is a candidate there (`cand`)."""
    row = _row(space, t, ref)
    if cand is not None:
        row.update(values=list(cand.values), metrics=dict(cand.metrics), feasible=True)
        row.update(broken=im.broken(space, cand.metrics, ref), steps=cand.steps)
    return row


def _row(space: sp.Space, t: Any, ref: Mapping[str, Any] | None = None) -> dict[str, Any]:
    complete = t.user_attrs.get(ua.OUTCOME) == Outcome.COMPLETE
    return {
        "number": t.number,
        "values": list(t.values) if t.values else None,
        "metrics": t.user_attrs.get(ua.METRICS, {}),
        "knobs": t.user_attrs.get(ua.KNOBS, {}),
        "params": dict(t.params),
        "outcome": t.user_attrs.get(ua.OUTCOME),
        "cause": t.user_attrs.get(ua.CAUSE),
        "error": t.user_attrs.get(ua.ERROR),
        "feasible": bool(t.user_attrs.get(ua.FEASIBLE)),
        "baseline": ua.is_baseline(t),
        "broken": im.broken(space, t.user_attrs.get(ua.METRICS) or {}, ref) if complete else [],
    }


def _rungs(
    study: Any, space: sp.Space, counts: Mapping[str, int], left: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The summary's `target_steps`, `rungs` (the screen first) and `decided` parts; `left`:
    where an unfinished study stopped (a rung phase cut short is not "not run yet")."""
    screen = space.probe.steps
    target = space.budget.target_steps or screen
    rows: list[dict[str, Any]] = [
        {
            "rung": 0,
            "steps": screen,
            "trials": sum(v for k, v in counts.items() if k not in unfinished.UNFINISHED),
            "agreement": None,
        }
    ]
    attrs = study.user_attrs
    for r in attrs.get(ua.RUNGS) or []:
        slims = [attrs.get(ua.rung_key(n, r["steps"])) or {} for n in r.get("numbers") or []]
        continued = [x for x in slims if x.get("resumed_from_step")]  # else started over
        afresh = sum(bool(x.get("continuation_note")) for x in continued)  # its data, say
        filled = sum(bool(x.get("filled")) for x in slims)  # `rungs.fill_idle`
        rows.append(
            {
                **r,
                "trials": len(r.get("numbers") or []),
                "continued": len(continued),
                **({"continued_differently": afresh} if afresh else {}),
                **({"filled": filled} if filled else {}),
            }
        )
    decided = study.user_attrs.get(ua.DECIDED)
    if not decided or decided.get("target_steps") != target:
        decided = {
            "steps": screen,
            "rung": 0,
            "target_steps": target,
            "reason": "target" if target == screen else _not_decided(left),
            "tau": None,
        }
    return {"target_steps": target, "rungs": rows, "decided": decided}


def _rung_counts(study: Any, space: sp.Space) -> list[dict[str, Any]]:
    """Per length of the space's rungs above the screen that has rung records (those written
    by a driver stopped mid-rung and resumed included), `steps`, `trials` (the probes recorded
    there) and their count per outcome (`complete`, `diverged`, `oom`, `failed`)."""
    out = []
    for steps in plan(space)[1:]:
        rows = pk.rung_rows(study, steps).values()
        if not rows:
            continue
        counts = {o.value: 0 for o in Outcome}
        for r in rows:
            what = str(r.get("outcome") or Outcome.FAILED.value)
            counts[what] = counts.get(what, 0) + 1
        out.append({"steps": steps, "trials": len(rows), **counts})
    return out


def _not_decided(left: Mapping[str, Any] | None) -> str:
    """Why a study with rungs has not decided at its target: its rungs have not run, or were
    cut short after some of their probes ran."""
    ran = int((left or {}).get("rung_probes") or 0)
    if (left or {}).get("phase") == "rungs" and ran:
        what = "running" if left and left.get("driver") else "interrupted"
        return f"rungs {what}: {ran} rung probe{'s' if ran != 1 else ''} ran, none decided yet"
    return "rungs not run yet"


def _verified_and_pick(
    study: Any, objectives: list[dict[str, Any]], partial: bool = False
) -> dict[str, Any]:
    """The summary's `verified`, `pick`, `vs_baseline`, `throughput_noise` (`verdict.pick_part`;
    `partial`: the verification has not finished) and `warm_start` parts."""
    import optuna

    out = pick_part(study, objectives, partial=partial)
    out["warm_start"] = None
    warm = study.user_attrs.get(ua.WARM_START)
    if warm:
        judged = screen_feasible(study)
        feasible = [
            (t.number, t.values)
            for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
            if t.state == optuna.trial.TrialState.COMPLETE and judged(t)
        ]
        matched = None
        if warm.get("best") and [o["metric"] for o in warm.get("objectives") or []] == [
            o["metric"] for o in objectives
        ]:
            matched = pk.matched_at(feasible, warm["best"], objectives)
        out["warm_start"] = {**warm, "matched_at": matched}
    return out
