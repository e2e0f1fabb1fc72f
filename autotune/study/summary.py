"""The study's summary: the Pareto front, the improvement over the baseline, the verified
candidates and the pick, parameter importances, and its text for the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.probe.outcome import Outcome
from autotune.recipe.paired import format_line
from autotune.recipe.seeds import ran_whole
from autotune.recipe.verify import format_interval
from autotune.study import attrs as ua
from autotune.study import clip_seed
from autotune.study import improvement as im
from autotune.study import pick as pk
from autotune.study.compute import format_line as compute_line
from autotune.study.compute import study_compute
from autotune.study.failures import failed_seeds, failed_trials, summary_lines
from autotune.study.fidelity import format_line as fidelity_line
from autotune.study.fidelity import rank_fidelity
from autotune.study.identical import identical_losses
from autotune.study.identical import warning_line as identical_line
from autotune.study.objectives import directions, reference, vacuous
from autotune.study.pick import dominates
from autotune.study.records import screen_feasible
from autotune.study.verdict import against, pick_part
from autotune.study.yardstick import format_line as yardstick_line
from autotune.tracking.connection import redact


def pareto_front(points: Sequence[tuple[int, Sequence[float]]], dirs: Sequence[str]) -> list[int]:
    return [n for n, v in points if not any(dominates(w, v, dirs) for m, w in points if m != n)]


def summarize(
    study: Any,
    space: sp.Space,
    study_dir: Path | None = None,
    dropped: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The study's summary from the Optuna storage alone (so `autotune show` can print it)."""
    judged = screen_feasible(study)
    counts, feasible, baseline, info = _tally(study.get_trials(deepcopy=False), judged)
    dirs = directions(space)
    objectives = [o.model_dump() for o in space.objectives]
    best, at_screen = im.best_and_improvement(space, feasible, baseline)
    picked, rungs = _verified_and_pick(study, objectives), _rungs(study, space, counts)
    steps = int(rungs["decided"]["steps"])
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
        "baseline": _row(space, baseline, ref) if baseline is not None else None,
        # The front of the candidates at the decided length (their values there), so that the
        # pick, the knee of that front, is on it; the screen's when decided at the screen.
        "pareto": [_front_row(space, info[n], ref, (at_rung or {}).get(n)) for n in front],
        "pareto_steps": steps,
        "best": best,
        # The pick against the baseline at the length the study decided at; the screen's
        # best-per-objective figure only beside it, labelled, when that is another length.
        "improvement": im.improvement_at(study, space, baseline, state, picked.get("pick"), steps),
        "screen_improvement": at_screen if steps != space.probe.steps else None,
        # Relative constraints with no baseline value at the decided length: not judged there.
        "vacuous": {"steps": steps, "constraints": vacuous(space, ref)} if baseline else None,
        "screen_yardstick": study.user_attrs.get(ua.SCREEN_YARDSTICK),
        "counts": counts,
        # {number, baseline, cause, error}: one line each; a verification seed's with its seed
        "failures": failed_trials(study) + failed_seeds(study),
        "identical_losses": identical_losses(study),  # knobs differ, loss series the same
        "dropped_knobs": dict(dropped or {}),
        "clip_norm_auto": study.user_attrs.get(ua.CLIP_NORM_AUTO),
        "study_dir": str(study_dir) if study_dir else None,
        "compute": (spent := study_compute(study, space, study_dir)),
        "compute_saved": (spent or {}).get("saved_vs_full"),  # vs full length + verification
        "rank_fidelity": rank_fidelity(study, space, rungs["decided"]),
    }


def _tally(
    trials: Sequence[Any], judged: Callable[[Any], bool]
) -> tuple[dict[str, int], list[tuple[int, list[float]]], Any, dict[int, Any]]:
    """Trials per outcome, the feasible ones' values, the baseline trial, and trials by number."""
    import optuna

    counts: dict[str, int] = {**{o.value: 0 for o in Outcome}, "running": 0}
    feasible: list[tuple[int, list[float]]] = []
    baseline = None
    info: dict[int, Any] = {}
    for t in trials:
        if t.state == optuna.trial.TrialState.RUNNING:
            counts["running"] += 1
            continue
        outcome = ua.outcome(t)
        counts[outcome] = counts.get(outcome, 0) + 1
        info[t.number] = t
        if t.user_attrs.get(ua.BASELINE):
            baseline = t
        if t.state == optuna.trial.TrialState.COMPLETE and judged(t):
            feasible.append((t.number, list(t.values)))
    return counts, feasible, baseline, info


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


def _rungs(study: Any, space: sp.Space, counts: Mapping[str, int]) -> dict[str, Any]:
    """The summary's `target_steps`, `rungs` (the screen first) and `decided` parts."""
    screen = space.probe.steps
    target = space.budget.target_steps or screen
    rows: list[dict[str, Any]] = [
        {
            "rung": 0,
            "steps": screen,
            "trials": sum(v for k, v in counts.items() if k != "running"),
            "agreement": None,
        }
    ]
    attrs = study.user_attrs
    for r in attrs.get(ua.RUNGS) or []:
        slims = [attrs.get(ua.rung_key(n, r["steps"])) or {} for n in r.get("numbers") or []]
        continued = sum(bool(x.get("resumed_from_step")) for x in slims)  # else started over
        rows.append({**r, "trials": len(r.get("numbers") or []), "continued": continued})
    decided = study.user_attrs.get(ua.DECIDED)
    if not decided or decided.get("target_steps") != target:
        decided = {
            "steps": screen,
            "rung": 0,
            "target_steps": target,
            "reason": "target" if target == screen else "rungs not run yet",
            "tau": None,
        }
    return {"target_steps": target, "rungs": rows, "decided": decided}


def _verified_and_pick(study: Any, objectives: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's `verified`, `pick`, `vs_baseline`, `throughput_noise` (`verdict.pick_part`)
    and `warm_start` parts."""
    import optuna

    out = pick_part(study, objectives)
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


def format_summary(summary: Mapping[str, Any], *, tracking_uri: str | None = None) -> str:
    """The end-of-study report: counts, baseline vs best, the Pareto front, where to look."""
    pick = summary.get("pick")
    lines = [
        _counts_line(summary),
        *summary_lines(summary.get("failures")),
        *_baseline_lines(summary),
        *_pareto_lines(summary),
        *_verified_lines(summary),
    ]
    decided_line = _decided_line(summary)
    if decided_line:
        lines.append(decided_line)
    both = compute_line(summary.get("compute")), fidelity_line(summary.get("rank_fidelity"))
    lines += [x for x in both if x]
    if (summary.get("throughput_noise") or {}).get("message"):
        lines.append(summary["throughput_noise"]["message"])
    same = identical_line(summary.get("identical_losses"))
    lines += [same] if same else []
    lines += _pick_lines(summary)
    if summary.get("warm_start"):
        lines.append(_warm_start_line(summary["warm_start"]))
    for name, why in (summary.get("dropped_knobs") or {}).items():
        lines.append(f"not searched: {name} ({why})")
    if summary.get("clip_norm_auto"):
        lines.append(clip_seed.text(summary["clip_norm_auto"]))
    lines.append(
        "next: `autotune ui` to browse the trials"
        + (f" ({redact(tracking_uri)})" if tracking_uri else "")
        + f", `autotune show {summary['study']}` for this summary again"
        + (
            f", `autotune export {summary['study']} -o recipe.yaml` for the recipe"
            if pick and pick.get("number") is not None
            else ""
        )
    )
    return "\n".join(lines)


def _pick_lines(summary: Mapping[str, Any]) -> list[str]:
    """The pick, its paired verdict against the baseline, and the advice when there is none
    (which says how the trial it names fared: it may have diverged)."""
    pick = summary.get("pick")
    if not pick:
        return []
    if pick.get("number") is None:
        return [  # the message says how far the trial it names diverged
            f"{pick.get('message')} (best found: trial {pick.get('best')}); "
            "`autotune export` needs an explicit --pick"
        ]
    lines = []
    vs = summary.get("vs_baseline") or {}
    if vs:
        lines.append(format_line(vs, label=f"trial {pick.get('first_choice')}"))
        same = (vs.get("pick") or {}).get("number") == (vs.get("baseline") or {}).get("number")
        for who in ("baseline",) if same else ("pick", "baseline"):
            row = vs.get(who) or {}
            if row:
                share = row.get("diverged_share")
                lines.append(
                    f"  {who:<8} trial {row['number']}: final_loss "
                    f"{format_interval(row.get('final_loss'))} at {vs.get('steps')} steps"
                    + (f"; diverged on {share:.0%} of seeds" if share is not None else "")
                    + (f" ({_causes_text(row.get('causes'))})" if row.get("causes") else "")
                )
    base = summary.get("baseline") or {}
    if pick.get("defaults_preferred") and pick.get("first_choice") == pick["number"]:
        head = (
            f"pick: the defaults (trial {pick['number']}): "
            f"{(summary.get('vs_baseline') or {}).get('why')}"
        )
    elif pick.get("defaults_preferred"):
        head = (
            f"pick: the defaults (trial {pick['number']}): trial {pick.get('first_choice')} "
            f"showed {against(pick.get('verdict'))} them over the same seeds; the simpler "
            "configuration is kept"
        )
    else:
        head = (
            f"pick (balanced: the knee of the front{', verified' if pick['verified'] else ''}): "
            f"trial {pick['number']}  "
            + (_baseline_won(summary) if base and pick["number"] == base.get("number") else "")
        )
    lines.append(
        head + ", ".join(f"{k}={_short(v)}" for k, v in (pick.get("params") or {}).items())
    )
    return lines


def _baseline_won(summary: Mapping[str, Any]) -> str:
    """What the baseline as the pick means: no other configuration did better (it beat them, or
    tied: identical runs go to the lower trial number), or nothing else completed (a study
    stopped after its baseline, or every other trial failed): then it beat nothing."""
    others = int((summary.get("counts") or {}).get("complete", 0)) - 1
    if others > 0:
        return "(the baseline: no other configuration did better than PyTorch's defaults) "
    return "(the baseline, PyTorch's defaults: no other trial completed to compare it with) "


def _causes_text(causes: Mapping[str, int] | None) -> str:
    return ", ".join(f"{k} x{v}" for k, v in (causes or {}).items())


def _decided_line(summary: Mapping[str, Any]) -> str | None:
    """At which length the answer was decided, and how the rankings of the rungs agreed."""
    decided = summary.get("decided")
    if not decided:
        return None
    steps, target = decided["steps"], summary.get("target_steps")
    rows = summary.get("rungs") or []
    taus = []
    for r in rows[1:]:
        ag = r.get("agreement") or {}
        if not ag:  # a rung of the baseline alone: nothing searched was feasible to promote
            taus.append(f"the baseline alone at {r['steps']} (nothing searched was feasible)")
            continue
        tau, p = ag.get("tau"), ag.get("p")
        shown = "tau n/a" if tau is None else f"tau {tau:+.2f}"
        shown += f" ({ag.get('n')} configs" + (f", chance p {p:.2g})" if p is not None else ")")
        taus.append(f"{ag.get('vs_steps')}->{r['steps']} {ag.get('note') or shown}")
    agreed = f": rankings {', '.join(taus)}" if taus else ""
    if len(rows) > 1:
        ran = sum(int(r.get("trials") or 0) for r in rows[1:])
        went_on = sum(int(r.get("continued") or 0) for r in rows[1:])
        agreed += f"; {went_on} of {ran} promoted probes continued from the rung below"
    if steps == target:
        if len(rows) == 1:
            return f"decided at {steps} steps, the probe length (no budget.target_steps)"
        return f"decided at {steps} steps (the target){agreed}"
    return (
        f"decided at {steps} of {target} steps ({decided.get('reason')}){agreed}; not run at the "
        f"target: check with `autotune verify recipe.yaml --steps {target}`"
    )


def _counts_line(summary: Mapping[str, Any]) -> str:
    c = summary["counts"]
    done = sum(v for k, v in c.items() if k != "running")
    return (
        f"study {summary['study']}: {done}/{summary['trials']} trials — "
        f"{c.get('complete', 0)} complete, {c.get('diverged', 0)} diverged, "
        f"{c.get('oom', 0)} out of memory, {c.get('failed', 0)} failed"
        + (f", {c['running']} interrupted" if c.get("running") else "")
    )


def _baseline_lines(summary: Mapping[str, Any]) -> list[str]:
    """The baseline's outcome, and per objective the best value against the baseline's."""
    lines = []
    base = summary.get("baseline")
    if base is not None:
        state = base["outcome"] + (f" ({base['cause']})" if base.get("cause") else "")
        if base["outcome"] == Outcome.COMPLETE and not base["feasible"]:
            broken = base.get("broken") or []
            state += f" (infeasible: breaks {', '.join(broken)})" if broken else " (infeasible)"
        screen = (summary.get("rungs") or [{}])[0].get("steps")
        decided = (summary.get("decided") or {}).get("steps")
        where = f" at the screen ({screen} steps)" if screen and decided != screen else ""
        lines.append(f"baseline (trial {base['number']}, PyTorch defaults){where}: {state}")
    imp = summary.get("improvement") or {}
    first = next(iter(imp.values()), None)
    if first:
        lines.append(
            f"vs baseline at {first['steps']} steps (the decided length; trial {first['trial']}, "
            f"the pick; {first['source']} values):"
        )
    for o in summary["objectives"]:
        row = imp.get(o["metric"])
        if row:
            lines.append(f"  {o['metric']:<12} pick {row['best']:.4g}" + _vs_baseline(row))
    vac = summary.get("vacuous") or {}
    for label in vac.get("constraints") or []:
        lines.append(
            f"  {label}: vacuous at {vac['steps']} steps (no baseline value there: it diverged, "
            "failed or did not run): not judged; the pick is judged on its own (its absolute "
            "constraints and divergence)"
        )
    relative = any(c.get("relative_to") for c in summary.get("constraints") or [])
    yard = yardstick_line(summary.get("screen_yardstick"), relative)
    lines += [yard] if yard else []
    screen = summary.get("screen_improvement") or {}
    if screen:
        steps = (summary.get("rungs") or [{}])[0].get("steps")
        shown = ", ".join(
            f"best {m} {row['best']:.4g}{_vs_baseline(row, short=True)}"
            for m, row in screen.items()
        )
        lines.append(f"at the screen ({steps} steps; not what the pick was decided on): {shown}")
    return lines


def _vs_baseline(row: Mapping[str, Any], short: bool = False) -> str:
    """`  baseline 0.06  (-16.7%)`, or why there is no percentage."""
    d = row.get("baseline_diverged")
    if d and not d.get("ran_whole"):
        return f"  vs baseline: baseline diverged at step {d.get('step')} ({d.get('cause')})"
    b = row.get("baseline")
    if b is None:
        return ""
    text = f" vs baseline {b:.4g}" if short else f"  baseline {b:.4g}"
    if d:  # labelled diverged, but it ran its whole length: its value is real
        text += f" (labelled diverged at step {d.get('step')}, {d.get('cause')}; ran on)"
    if row.get("change_pct") is not None:
        text += f" ({row['change_pct']:+.1f}%)" if short else f"  ({row['change_pct']:+.1f}%)"
    elif row.get("baseline_infeasible"):
        broken = row.get("baseline_broken") or []
        learn = any(b.startswith("loss_drop") for b in broken)
        why = "did not learn" if learn else "infeasible"
        text += f" (baseline {why}: {', '.join(broken) or 'a constraint'}; no percentage)"
    return text


def _pareto_lines(summary: Mapping[str, Any]) -> list[str]:
    if not summary["pareto"]:
        return [
            "no feasible trial: every trial diverged, failed or broke a constraint "
            "(see `autotune show` and the MLflow UI for causes)"
        ]
    objs = summary["objectives"]
    steps = summary.get("pareto_steps")
    screen = (summary.get("rungs") or [{}])[0].get("steps")
    at = f" at {steps} steps" if steps and screen and steps != screen else ""
    lines = [
        f"Pareto front{at} (feasible trials no other trial beats on every objective):",
        f"  {'trial':>5}  " + "  ".join(f"{o['metric']:>12}" for o in objs) + "  knobs",
    ]
    for r in summary["pareto"]:
        vals = "  ".join(f"{v:>12.4g}" for v in r["values"])
        params = ", ".join(f"{k}={_short(v)}" for k, v in r["params"].items())
        lines.append(f"  {r['number']:>5}  {vals}  {params}")
    return lines


def _verified_lines(summary: Mapping[str, Any]) -> list[str]:
    if not summary.get("verified"):
        return []

    objs = summary["objectives"]
    first = summary["verified"][0]
    lines = [
        f"verified with seeds {first.get('seeds')} (mean [95% interval] over the seeds that "
        "did not diverge):"
    ]
    for v in summary["verified"]:
        vals = "  ".join(
            f"{o['metric']} {format_interval(v['metrics'].get(o['metric']))}" for o in objs
        )
        causes = _causes_text(v.get("causes"))
        lines.append(
            f"  trial {v['number']:>4}  {vals}  diverged {v['diverged_share'] or 0:.0%}"
            + (f" ({causes})" if causes else "")
            + (f"  [not picked: {v['why_not_picked']}]" if v.get("why_not_picked") else "")
        )
    return lines


def _warm_start_line(warm: Mapping[str, Any]) -> str:
    text = f"warm start from {warm['ref']}" + (
        f" (tuned on {warm['fp_hash']})" if warm.get("fp_hash") else ""
    )
    if warm.get("matched_at") is not None:
        text += (
            f": matched the source's best at trial {warm['matched_at']} "
            f"({warm['matched_at'] + 1} trials, counting the baseline)"
        )
    elif warm.get("best"):
        text += ": the source's best was not matched (within 5%) in this study"
    return text


def _short(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
