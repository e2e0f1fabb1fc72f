"""The study's summary as text for the terminal (`autotune study`'s end, `autotune show`): its
counts, the baseline, the decision, the Pareto front, the verified candidates and the pick.
`summary.summarize` builds what it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.probe import applied
from autotune.probe.outcome import Outcome
from autotune.recipe.inactive import inactive
from autotune.recipe.paired import format_line
from autotune.recipe.verify import format_interval
from autotune.study import clip_seed
from autotune.study.compute import format_line as compute_line
from autotune.study.failures import summary_lines
from autotune.study.fidelity import format_line as fidelity_line
from autotune.study.identical import warning_line as identical_line
from autotune.study.next_line import next_line
from autotune.study.short_of import carried_text, next_step, short_text
from autotune.study.unfinished import UNFINISHED
from autotune.study.unfinished import text as unfinished_text
from autotune.study.verdict import against
from autotune.study.vs_baseline_text import vs_baseline
from autotune.study.yardstick import format_line as yardstick_line


def format_summary(
    summary: Mapping[str, Any],
    *,
    tracking_uri: str | None = None,
    storage: str | None = None,
    study_dir: Path | None = None,
) -> str:
    """The end-of-study report: counts, baseline vs best, the Pareto front, where to look
    (`storage`: the study was named in that storage, and the commands it suggests name it;
    `study_dir`: its folder, which they name where the study's name would not find it from
    here, a `--study-dir` elsewhere than ./autotune-studies/NAME)."""
    pick = summary.get("pick")
    lines = [
        _counts_line(summary),
        *_progress_lines(summary),
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
    stopped = unfinished_text(
        summary.get("unfinished"),
        int((summary.get("rungs") or [{}])[0].get("steps") or 0),
        int(summary.get("target_steps") or 0),
    )
    lines += [f"study {summary['study']} {stopped}"] if stopped else []
    lines += _pick_lines(summary)
    if summary.get("warm_start"):
        lines.append(_warm_start_line(summary["warm_start"]))
    if summary.get("not_applied"):
        lines.append(f"warning: {applied.text(summary['not_applied'])}")
    for name, why in (summary.get("dropped_knobs") or {}).items():
        lines.append(f"not searched: {name} ({why})")
    if summary.get("clip_norm_auto"):
        lines.append(clip_seed.text(summary["clip_norm_auto"]))
    has_pick = bool(pick and pick.get("number") is not None)
    lines.append(next_line(str(summary["study"]), has_pick, tracking_uri, storage, study_dir))
    return "\n".join(lines)


def _pick_lines(summary: Mapping[str, Any]) -> list[str]:
    """The pick, its paired verdict against the baseline, and the advice when there is none
    (which says how the trial it names fared: it may have diverged)."""
    pick = summary.get("pick")
    if not pick:
        return []
    if pick.get("number") is None and summary.get("short_of_target"):
        return []  # `_pareto_lines` said what to carry on
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
                    f"  {_side_label(who, row, pick)} trial {row['number']}: final_loss "
                    f"{_side_loss(vs, who, row)} at {vs.get('steps')} steps"
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
    elif summary.get("pick_off_front"):
        head = _off_front_head(pick, summary["pick_off_front"])
    else:
        head = (
            f"pick (balanced: the knee of the front{', verified' if pick['verified'] else ''}): "
            f"trial {pick['number']}  "
            + (_baseline_won(summary) if base and pick["number"] == base.get("number") else "")
        )
    lines.append(head + _params(summary, pick.get("params") or {}, pick.get("knobs")))
    if vs.get("defaults_not_taken") and not pick.get("defaults_preferred"):
        # a verdict that gives way to the defaults, and the defaults not taken: say why
        lines.append(f"  not the defaults: {vs['defaults_not_taken']}")
    return lines


def _off_front_head(pick: Mapping[str, Any], off: Mapping[str, Any]) -> str:
    """The pick line of a pick that is not on the printed front (`summary._off_front`). The
    front is each trial's run at the probe seed; a verified pick is the knee of the verified
    means over other seeds. A review saw "pick (balanced: the knee of the front, verified):
    trial 7" under a front that listed trial 4 alone, trial 4 having beaten 7 at seed 0."""
    beaten = off.get("beaten_by") or []
    who = ", ".join(map(str, beaten[:5])) + (" ..." if len(beaten) > 5 else "")
    there = f"trial(s) {who} beat it" if beaten else "others beat it"
    seeds = off.get("verified_seeds")
    if seeds:
        return (
            f"pick (balanced, verified over seeds {list(seeds)}): trial {pick['number']}  "
            f"(not on the front above, each trial's run at seed {off.get('seed')}, where "
            f"{there}: it is the knee of the verified configurations that held, on their "
            "means over those seeds; see their intervals above) "
        )
    return (
        f"pick (balanced: the knee of the front, ties within noise): trial {pick['number']}  "
        f"(not on the front above, where {there} within their measured noise: a tie when "
        "the knee is chosen) "
    )


def _side_loss(vs: Mapping[str, Any], who: str, row: Mapping[str, Any]) -> str:
    """One side's final loss under the paired line: the values the verdict's ratio is over
    (`vs_baseline.metrics.final_loss`), which count a seed labelled diverged that ran its whole
    length. Its verified interval is over the seeds that did not diverge: a review saw
    "baseline trial 0: final_loss n/a" under a ratio x2.51e-06 computed from the baseline's
    final losses (~45000) on the 3 seeds it diverged on and ran on."""
    own = row.get("final_loss")
    used = (((vs.get("metrics") or {}).get("final_loss") or {}).get(who)) or {}
    if used.get("mean") is None or used == own or not row.get("diverged_share"):
        return format_interval(own)
    return format_interval(used) + (
        " (as the ratio counts it: the seeds it diverged on ran their whole length)"
    )


def _side_label(who: str, row: Mapping[str, Any], pick: Mapping[str, Any]) -> str:
    """The label of one side of the paired comparison, padded to 8. The searched side is the
    named pick's first choice (`vs_baseline.pick`); when the defaults were preferred over it,
    it is not the pick, and "pick" beside it read as if it were (the review saw "pick trial 2"
    above "pick: the defaults (trial 0)"): it is the configuration compared."""
    if who == "pick" and row.get("number") != pick.get("number"):
        who = "compared"
    return f"{who:<8}"


def _baseline_won(summary: Mapping[str, Any]) -> str:
    """What the baseline as the pick means. Alone on the Pareto front: no other configuration
    did better on any objective without doing worse on another. Beside others on the front:
    it is the balanced choice among trade-offs, and those others are named (they are better on
    some objective; the review saw "no other configuration did better" above a trial with a
    fifth of its final loss). Nothing else completed: it beat nothing."""
    others = int((summary.get("counts") or {}).get("complete", 0)) - 1
    if others <= 0:
        return "(the baseline, PyTorch's defaults: no other trial completed to compare it with) "
    base = (summary.get("baseline") or {}).get("number")
    if (summary.get("pick") or {}).get("verified"):
        verified = _baseline_won_verified(summary, base)
        if verified:
            return verified
    front = [int(r["number"]) for r in summary.get("pareto") or []]
    beside = [n for n in front if n != base]
    if not beside:
        return "(the baseline: no other configuration did better than PyTorch's defaults) "
    named = ", ".join(map(str, beside[:5])) + (" ..." if len(beside) > 5 else "")
    if base not in front:  # the front's trials beat it by a point, not beyond the seed noise
        return (
            f"(the baseline, PyTorch's defaults: trial(s) {named} on the front did no better "
            "beyond the noise it was measured with, and a tie goes to the defaults) "
        )
    return (
        "(the baseline, PyTorch's defaults: the balanced choice of the front, where trial(s) "
        f"{named} are better on some objective and worse on another) "
    )


def _baseline_won_verified(summary: Mapping[str, Any], base: Any) -> str | None:
    """What the baseline as a verified pick means: chosen on the verified means, not on the
    printed front (each trial's one run at the probe seed), so the front's trade-offs are not
    the reason (a review saw "trial(s) 2, 3 are better on some objective and worse on another"
    of trials whose verified means were worse on both). None when nothing else was verified."""
    rows = [v for v in summary.get("verified") or [] if v.get("number") != base]
    if not rows:
        return None
    seeds = (summary.get("verified") or [{}])[0].get("seeds")
    held = [str(v["number"]) for v in rows if v.get("held", True)]
    if not held:
        return (
            "(the baseline, PyTorch's defaults: the only verified configuration that held on "
            f"every seed {seeds}; the others' rows above say why not) "
        )
    named = ", ".join(held[:5]) + (" ..." if len(held) > 5 else "")
    return (
        f"(the baseline, PyTorch's defaults: the balanced choice on the means verified over "
        f"seeds {seeds}, beside trial(s) {named}, whose means are above) "
    )


def _causes_text(causes: Mapping[str, int] | None) -> str:
    return ", ".join(f"{k} x{v}" for k, v in (causes or {}).items())


def _decided_line(summary: Mapping[str, Any]) -> str | None:
    """At which length the answer was decided, and how the rankings of the rungs agreed."""
    decided = summary.get("decided")
    if not decided or _done(summary) == 0:  # nothing finished: nothing decided
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
        filled = sum(int(r.get("filled") or 0) for r in rows[1:])
        if filled:
            agreed += f"; {filled} promoted beyond the quota for a worker that would idle"
        unlike = sum(int(r.get("continued_differently") or 0) for r in rows[1:])
        if unlike:  # e.g. a Lightning fit whose plain DataLoader drew its batches afresh
            agreed += (
                f" ({unlike} not as the run from step 0 would have: see their records' "
                "continuation.note)"
            )
    if steps == target:
        if len(rows) == 1:
            return f"decided at {steps} steps, the probe length (no budget.target_steps)"
        return f"decided at {steps} steps (the target){agreed}"
    if (summary.get("unfinished") or {}).get("phase") in ("screen", "rungs"):
        # the rungs are still to decide: finishing the study is the check (said below)
        return f"decided at {steps} of {target} steps ({decided.get('reason')}){agreed}"
    return (
        f"decided at {steps} of {target} steps ({decided.get('reason')}){agreed}; not run at the "
        f"target: check with `autotune verify recipe.yaml --steps {target}`"
    )


def _counts_line(summary: Mapping[str, Any]) -> str:
    c = summary["counts"]
    done = _done(summary)
    unfinished = "running" if summary.get("in_progress") else "interrupted"
    planned = int(summary["trials"])
    # More done than planned: budget.trials was lowered on a resume ("4/2 trials" read wrong).
    ran = f"{done}/{planned} trials" if done <= planned else f"{done} trials (budget {planned})"
    rungs = summary.get("rung_counts") or []
    screen = (summary.get("rungs") or [{}])[0].get("steps")
    return (
        f"study {summary['study']}: {ran} — "
        f"{c.get('complete', 0)} complete, {c.get('diverged', 0)} diverged, "
        f"{c.get('oom', 0)} out of memory, {c.get('failed', 0)} failed"
        + (f", {left} {unfinished}" if (left := _unfinished_trials(summary)) else "")
        + (f" at the screen ({screen} steps)" if rungs else "")
        + "".join(f"; {_rung_count(r)}" for r in rungs)
    )


def _rung_count(row: Mapping[str, Any]) -> str:
    """`5 promoted to 800 steps: 5 diverged`: the probes run at one rung, by outcome (those
    with none left out). The count line's screen counts alone read "0 diverged" beside "no
    feasible trial at 800 steps: 5 of 5 diverged there" (a late blow-up)."""
    words = {"complete": "complete", "diverged": "diverged", "oom": "out of memory"}
    shown = [
        f"{row[k]} {words.get(k, k)}"
        for k in ("complete", "diverged", "oom", "failed")
        if int(row.get(k) or 0)
    ]
    return f"{row['trials']} promoted to {row['steps']} steps: {', '.join(shown)}"


def _done(summary: Mapping[str, Any]) -> int:
    """The trials that finished (any outcome)."""
    return sum(int(v) for k, v in summary["counts"].items() if k not in UNFINISHED)


def _unfinished_trials(summary: Mapping[str, Any]) -> int:
    """Trials Optuna holds as running: running now, or interrupted (a record from before the
    `interrupted` count has them all under `running`)."""
    return sum(int(summary["counts"].get(k) or 0) for k in UNFINISHED)


def _progress_lines(summary: Mapping[str, Any]) -> list[str]:
    """A study whose driver runs now: what follows is the state so far."""
    if not summary.get("in_progress"):
        return []
    return [
        f"in progress: its driver ({summary.get('driver') or 'unknown pid'}) is running it; "
        "this is the state so far, and the pick may change"
    ]


def _baseline_lines(summary: Mapping[str, Any]) -> list[str]:
    """The baseline's outcome, and per objective the best value against the baseline's."""
    lines = []
    base = summary.get("baseline")
    unfinished = summary.get("baseline_unfinished")
    if base is None and unfinished:
        how = {"not started": "not started yet", "interrupted": "interrupted while running"}
        state = (
            "running"
            if unfinished == "running"
            else f"has not finished ({how.get(unfinished, unfinished)}); run the study's "
            "`autotune study` command again (or add --resume) to resume it"
        )
        lines.append(f"baseline (trial 0, PyTorch defaults): {state}")
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
            lines.append(f"  {o['metric']:<12} pick {row['best']:.4g}" + vs_baseline(row))
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
            f"best {m} {row['best']:.4g}{vs_baseline(row, short=True)}" for m, row in screen.items()
        )
        lines.append(f"at the screen ({steps} steps; not what the pick was decided on): {shown}")
    return lines


def _pareto_lines(summary: Mapping[str, Any]) -> list[str]:
    if not summary["pareto"]:
        done, running = _done(summary), _unfinished_trials(summary)
        if summary.get("in_progress"):
            return [f"no feasible trial yet ({done} finished): the study is in progress"]
        if done == 0:
            return ["no trial has finished yet: nothing to compare"]
        short = summary.get("short_of_target")
        if short is not None:  # not every trial: those carried on to the target, there
            return [
                f"no feasible trial at {short['steps']} steps: {carried_text(short)}",
                f"  {short_text(short)}",
                f"  {next_step(short, summary['study'])}",
            ]
        whole = not running and done >= int(summary.get("trials") or 0)
        every = "every trial" if whole else f"every finished trial ({done})"
        return [
            f"no feasible trial: {every} diverged, failed or broke a constraint "
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
        params = _params(summary, r["params"], r.get("knobs"))
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


def _params(
    summary: Mapping[str, Any], params: Mapping[str, Any], knobs: Mapping[str, Any] | None = None
) -> str:
    """A trial's searched knobs, each the script never applied marked so (`not_applied`); one
    its other knobs switch off (`knobs`, all it ran with: `min_lr_ratio` under a constant
    schedule, a clipping policy's child under another policy) left out: it was not chosen."""
    unapplied = summary.get("not_applied") or {}
    off = set(inactive(knobs)) if knobs else set()
    return ", ".join(
        f"{k}={_short(v)}" + (" (not applied)" if k in unapplied else "")
        for k, v in params.items()
        if k not in off
    )


def _short(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
