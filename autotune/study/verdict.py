"""The pick against the baseline: the paired verdict over the verification seeds
(`autotune.recipe.paired`), and the preference for the simpler configuration.

A named pick (balanced, fastest, stablest) that shows no detectable difference from the
baseline over the same seeds, or that is worse, gives way to the baseline: PyTorch's defaults
are the pick, said so (`defaults_preferred`), and `autotune export` exports them without
`--pick`. An explicit `trial N` is kept whatever its verdict (the export warns)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autotune.errors import RecipeError, one_line
from autotune.probe.outcome import Outcome
from autotune.recipe import paired as pd
from autotune.study import attrs as ua
from autotune.study import pick as pk
from autotune.study.confirmed import awaiting, confirmation, judged
from autotune.study.failures import not_a_candidate
from autotune.study.records import baseline_trial


@dataclass
class Decision:
    """The chosen configuration, the one the named pick chose first (`first`: the same unless
    the defaults were preferred), and the paired verdict of `first` against the baseline."""

    chosen: Any
    first: Any
    verdict: dict[str, Any]
    defaults_preferred: bool = False


def against(verdict: str | None) -> str:
    """The paired verdict as words before the defaults: `trial 8 shows {against(v)} the
    defaults` (no detectable difference against, worse results than, mixed results against)."""
    return {
        "better": "better results than",
        "worse": "worse results than",
        "mixed": "mixed results against",
    }.get(str(verdict), f"{verdict} against")


def baseline_verified(study: Any, steps: int | None) -> tuple[int | None, dict[str, Any] | None]:
    """The baseline's number and its verified result at `steps` (None: not verified there)."""
    base = baseline_trial(study)
    if base is None:
        return None, None
    ver = pk.verified_results(study).get(base.number)
    if ver is None or (steps is not None and ver.get("steps") != steps):
        return base.number, None
    return base.number, ver


def against_baseline(
    study: Any, cand: Any, objectives: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The paired verdict of candidate `cand` against the baseline at its length: over every
    seed of its confirmation when it has one (`confirmed`), else over the verification's."""
    number, base = baseline_verified(study, cand.steps)
    metrics = pd.compared_metrics(objectives)
    if cand.baseline or cand.number == number:
        return pd.compare(None, None, metrics, same=True)
    if cand.verified is None:
        out = pd.compare(None, None, metrics)
        out["why"] = "not verified over seeds: no paired comparison"
        return out
    conf = confirmation(study, cand.number, cand.verified.get("steps"))
    if conf is not None:
        return judged(conf, metrics)
    return awaiting(study, cand, base, metrics, pd.compare(cand.verified, base, metrics))


def baseline_choice(study: Any, cands: Sequence[Any], steps: int | None) -> Any | None:
    """The baseline as a configuration to pick: its candidate when it is one, else built from
    its trial with its verified numbers at `steps` (it ran, but was no candidate: e.g. labelled
    diverged at the screen seed, and ran whole on every verification seed)."""
    for c in cands:
        if c.baseline:
            return c
    t = baseline_trial(study)
    if t is None:
        return None
    _, ver = baseline_verified(study, steps)
    return pk.Candidate(
        number=t.number,
        values=[float(v) for v in (t.values or [])],
        metrics=ua.metrics(t),
        knobs=ua.knobs(t),
        env=ua.env(t),
        params=dict(t.params),
        fp_hash=t.user_attrs.get(ua.FP_HASH),
        baseline=True,
        verified=ver,
        steps=steps,
    )


def decide(
    study: Any,
    cands: Sequence[Any],
    objectives: Sequence[Mapping[str, Any]],
    how: str,
    *,
    partial: bool = False,
) -> Decision:
    """`pick.pick`, then the paired verdict; a named pick that is not better than the defaults
    (`paired.PREFER_DEFAULTS`) and a baseline that held on every seed give the defaults. When
    no searched candidate held on every seed and the baseline did, the defaults are the pick
    too; when neither held, `pick.NoCandidateHolds` (the user chooses with an explicit pick),
    unless no searched configuration reached verification: then the defaults are all there is,
    and they are the pick as such, the verdict saying that they did not hold.

    `partial`: the study's verification has not finished (`unfinished.verification_partial`).
    A named pick then chooses by the trials' own runs, as before any verification: the seeds
    run so far (the baseline's alone, say) would make the few verified configurations the only
    ones a pick could choose, and call it verified. An explicit `trial N` keeps its own."""
    if partial and pk.parse_pick(how)[0] != "trial":
        cands = [replace(c, verified=None) for c in cands]
    try:
        first = pk.pick(cands, objectives, how)
    except pk.NoCandidateHolds as e:
        return _defaults_alone(study, cands, objectives, how, e)
    except RecipeError as e:  # an explicit `trial N` that is none: its own record says why
        kind, number = pk.parse_pick(how)
        why = not_a_candidate(study, number) if kind == "trial" and number is not None else None
        if why is None:
            raise
        raise RecipeError(f"{e}: {why}") from None
    verdict = against_baseline(study, first, objectives)
    if partial and not first.baseline and first.verified is None:
        verdict["why"] = "the study's verification has not finished: no paired comparison yet"
    kind, _ = pk.parse_pick(how)
    if kind == "trial" or verdict["verdict"] not in pd.PREFER_DEFAULTS:
        return Decision(first, first, verdict)
    base = baseline_choice(study, cands, first.steps)
    if base is None or not base.holds:
        verdict["defaults_not_taken"] = why_defaults_not_taken(base, first)
        return Decision(first, first, verdict)
    return Decision(base, first, verdict, defaults_preferred=True)


def why_defaults_not_taken(base: Any | None, first: Any) -> str:
    """Why a verdict that prefers the defaults (`paired.PREFER_DEFAULTS`) leaves `first` the
    pick: the defaults did not hold at its length. The summary prints it: otherwise "no
    detectable difference" next to a searched pick reads as the rule not applied. Named from
    the first seed that broke a constraint (`verification.judge_seeds` records which), else
    from `pick.why_not_held`."""
    keep = f"the pick stays trial {first.number}"
    steps = first.steps if base is None or base.verified is None else base.verified.get("steps")
    at = f" at {steps} steps" if steps is not None else ""
    if base is None or base.verified is None:
        return f"the defaults were not verified{at}: {keep}"
    runs = base.verified.get("runs") or []
    broke = next((r for r in runs if r.get("broken")), None)
    if broke is not None:
        why = f"the defaults break {', '.join(broke['broken'])} on seed {broke.get('seed')}"
    else:
        why = f"the defaults did not hold on every seed ({pk.why_not_held([base])})"
    return f"{why}{at}: {keep}"


def _defaults_alone(
    study: Any,
    cands: Sequence[Any],
    objectives: Sequence[Mapping[str, Any]],
    how: str,
    none_held: pk.NoCandidateHolds,
) -> Decision:
    """No searched candidate held on every seed: the defaults, when they did (verified at the
    same length), else `none_held` again."""
    kind, _ = pk.parse_pick(how)
    tried = [c for c in cands if c.verified is not None and not c.baseline]
    steps = tried[0].steps if tried else None
    base = None if kind == "trial" else baseline_choice(study, cands, steps)
    if base is None or base.verified is None or (tried and not base.holds):
        raise none_held
    verdict = pd.compare(None, None, pd.compared_metrics(objectives), same=True)
    if base.holds:
        verdict["why"] = (
            f"no searched configuration held on every seed ({pk.why_not_held(tried)}); "
            "PyTorch's defaults did"
        )
    else:  # nothing searched got as far as verification: the defaults are all there is
        share = float(base.verified.get("diverged_share") or 0.0)
        diverged = f", diverged on {share:.0%} of its seeds" if share else ""
        verdict["why"] = (
            "no searched configuration reached verification; PyTorch's defaults are exported as "
            f"such, and they did not hold on every seed either ({pk.why_not_held([base])}"
            f"{diverged}): nothing here beats them, and nothing says they meet the constraints"
        )
        verdict["defaults_hold"] = False
    return Decision(base, base, verdict, defaults_preferred=True)


def _single(value: Any) -> dict[str, Any]:
    """One run's value as an interval row (no interval: one seed)."""
    v = None if value is None else float(value)
    return {"mean": v, "low": None, "high": None, "n": 0 if v is None else 1}


def _causes(ver: Mapping[str, Any] | None) -> dict[str, int]:
    """Per cause, the seeds that did not complete (diverged or failed)."""
    out: dict[str, int] = {}
    for r in (ver or {}).get("runs") or []:
        if r.get("outcome") != Outcome.COMPLETE:
            key = str(r.get("cause") or r.get("outcome"))
            out[key] = out.get(key, 0) + 1
    return out


def standing(c: Any) -> dict[str, Any]:
    """A configuration at the decided length: its final loss (verified interval, else its one
    run), its diverged share and the causes (verified), and where the numbers come from."""
    ver = c.verified
    if ver is not None:
        fl = dict((ver.get("metrics") or {}).get("final_loss") or _single(None))
        return {
            "number": c.number,
            "source": "verified",
            "final_loss": fl,
            "diverged_share": ver.get("diverged_share"),
            "causes": _causes(ver),
        }
    return {
        "number": c.number,
        "source": "run",
        "final_loss": _single(c.metrics.get("final_loss")),
        "diverged_share": None,
        "causes": {},
    }


def why_not_picked(c: Any, decision: Decision | None) -> str | None:
    """Why a verified candidate is not the pick (None: it is)."""
    if decision is not None and c.number == decision.chosen.number:
        return None
    if not c.holds:
        return pk.why_not_held([c])
    if decision is None:
        return "no pick"
    if c.number == decision.first.number:
        return (
            f"{decision.verdict['verdict']} against the defaults over the same seeds: "
            "the defaults are preferred"
        )
    # the knee of the verified means, not of the printed front (each trial's own run)
    knee = "the knee of the verified configurations that held"
    return f"held, but the balanced pick ({knee}) is trial {decision.first.number}"


def pick_part(
    study: Any, objectives: list[dict[str, Any]], *, partial: bool = False
) -> dict[str, Any]:
    """The summary's `verified`, `pick`, `vs_baseline` and `throughput_noise` parts (see the
    README, `show --json`); `partial`: the verification has not finished (`decide`)."""
    cands = pk.candidates(study)
    out: dict[str, Any] = {"verified": [], "pick": None, "vs_baseline": None}
    out["throughput_noise"] = pk.noise_note(cands, objectives)  # ties on throughput
    decision = None
    if cands:
        try:
            decision = decide(study, cands, objectives, "balanced", partial=partial)
        except pk.NoCandidateHolds as e:
            tried = [c for c in cands if c.verified is not None]
            best = pk.ranked(tried, objectives)[0]
            out["pick"] = {
                "how": "balanced",
                "number": None,
                "holds": False,
                "best": best.number,
                "best_diverged_share": (best.verified or {}).get("diverged_share"),
                "steps": tried[0].steps,
                "why": pk.why_not_held(tried),
                "message": str(e),
            }
    steps = decision.chosen.steps if decision else next((c.steps for c in cands), None)
    base_number, base_ver = baseline_verified(study, steps)
    for c in pk.ranked(cands, objectives):
        if c.verified:
            out["verified"].append(_verified_row(c, objectives, why_not_picked(c, decision)))
    if base_ver is not None and not any(c.baseline for c in cands):
        base = baseline_choice(study, cands, steps)
        if base is not None:
            picked = decision is not None and decision.chosen.number == base.number
            why = (
                None
                if picked
                else "the baseline (no candidate at the decided length: see its seeds)"
            )
            out["verified"].append(_verified_row(base, objectives, why))
    if decision is None:
        return out
    chosen, first = decision.chosen, decision.first
    out["pick"] = {
        "how": "balanced",
        "number": chosen.number,
        "verified": chosen.verified is not None,
        "holds": chosen.holds if chosen.verified is not None else None,
        "steps": chosen.steps,
        "values": [chosen.value(o["metric"], i) for i, o in enumerate(objectives)],
        "params": chosen.params,
        "knobs": chosen.knobs,
        "baseline": bool(chosen.baseline),
        "verdict": decision.verdict["verdict"],
        "defaults_preferred": decision.defaults_preferred,
        "first_choice": first.number,
    }
    base_row = None
    if base_number is not None:
        base = baseline_choice(study, cands, steps)
        base_row = standing(base) if base is not None else None
    out["vs_baseline"] = {
        "steps": steps or (first.verified or {}).get("steps"),
        "pick": standing(first),
        "baseline": base_row,
        **decision.verdict,
    }
    out["throughput_noise"] = paired_noise_note(out["throughput_noise"], decision)
    return out


def paired_noise_note(note: dict[str, Any] | None, decision: Decision) -> dict[str, Any] | None:
    """The throughput note, told what the paired comparison saw. "Within noise" is judged on
    the candidates' own intervals, each wide with its runs' step timings; the comparison with
    the defaults pairs the same seeds and can measure a difference those intervals hide (a
    clipped step is slower than an unclipped one). Then the note says both (`paired`: the
    paired verdict on that metric), instead of a tie next to a measured difference."""
    if not note or not note.get("within_noise"):
        return note
    row = (decision.verdict.get("metrics") or {}).get(note["metric"]) or {}
    if row.get("verdict") not in ("better", "worse"):
        return note
    ratio = row.get("ratio") or {}
    metric = note["metric"]
    head = f"{metric} differences among the candidates are within their timing noise"
    if note.get("too_few_seeds"):  # no tie: too few seeds to compare (`pick.noise_note`)
        head = f"{metric} not compared among the candidates ({note['too_few_seeds']})"
    message = (
        f"{head}: decided on "
        f"stability and final loss. Paired over the same seeds, trial {decision.first.number} "
        f"is {row['verdict']} on {metric} than the defaults (x{ratio.get('mean', 0):.3g} the "
        f"defaults' [x{ratio.get('low', 0):.3g}, x{ratio.get('high', 0):.3g}])"
    )
    return {**note, "paired": row["verdict"], "message": message}


def _verified_row(c: Any, objectives: list[dict[str, Any]], why_not: str | None) -> dict[str, Any]:
    ver = c.verified or {}
    return {
        "number": c.number,
        "baseline": bool(c.baseline),
        "diverged_share": ver.get("diverged_share"),
        "causes": _causes(ver),
        "held": c.holds,
        "why_not_picked": why_not,
        "seeds": ver.get("seeds"),
        "final_loss": (ver.get("metrics") or {}).get("final_loss"),
        "metrics": {o["metric"]: (ver.get("metrics") or {}).get(o["metric"]) for o in objectives},
        "runs": [
            {
                **{k: r.get(k) for k in ("seed", "outcome", "cause", "feasible", "steps_run")},
                "error": one_line(r.get("error") or "") or None,  # a failed seed's, one line
            }
            for r in ver.get("runs") or []
        ],
        "vacuous": ver.get("vacuous") or [],
        "run_id": ver.get("run_id"),
        "steps": ver.get("steps"),
    }
