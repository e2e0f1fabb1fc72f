"""Feasible trials that never reached the length a study decided at.

Rungs promote the best few toward the target (`autotune.study.rungs`). When every trial
carried on to the target diverged, failed or broke a constraint there, the study has no
candidate at the length it decided at, yet the screen and the lower rungs may hold feasible
configurations that were never run that long (a late blow-up that hits only some
configurations, the promoted ones among them). "Every trial diverged" would then be false, and
would hide the configurations worth carrying on: `at_target` says what happened at the target
and which feasible trials stopped short of it, the best of them first, so that the summary,
`show --json`, `export` and `studies` can name them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.probe.outcome import Outcome
from autotune.study import attrs as ua
from autotune.study import pick as pk


def at_target(
    study: Any, objectives: Sequence[Mapping[str, Any]], screen_steps: int
) -> dict[str, Any] | None:
    """When a study decided at a rung above the screen (`screen_steps`) and no trial run there
    is feasible: `steps` (that length), `carried` (the trials run there: `n`, `numbers`, per
    outcome the count, per cause the count) and `short` (the feasible trials that stopped
    short of it, each {`number`, `steps` (its longest feasible run), `values`, `params`},
    longest first, then as the pick ranks them: the first is `best`). None otherwise: the
    study has candidates at its length, or decided at the screen."""
    decided = ua.decided(study)
    steps = decided.get("steps")
    if not steps or not decided.get("rung") or int(steps) == screen_steps:
        return None
    there = pk.rung_rows(study, int(steps))
    if not there or any(r.get("feasible") and r.get("values") for r in there.values()):
        return None
    short = _short(study, objectives, set(there), int(steps), screen_steps)
    outcomes: dict[str, int] = {}
    causes: dict[str, int] = {}
    for row in there.values():
        what = str(row.get("outcome") or Outcome.FAILED)
        what = "infeasible" if what == Outcome.COMPLETE else what  # complete, broke a constraint
        outcomes[what] = outcomes.get(what, 0) + 1
        if row.get("cause"):
            causes[str(row["cause"])] = causes.get(str(row["cause"]), 0) + 1
    return {
        "steps": int(steps),
        "carried": {
            "n": len(there),
            "numbers": sorted(there),
            "outcomes": outcomes,
            "causes": causes,
        },
        "short": short,
        "best": short[0]["number"] if short else None,
    }


def _short(
    study: Any,
    objectives: Sequence[Mapping[str, Any]],
    run_there: set[int],
    steps: int,
    screen_steps: int,
) -> list[dict[str, Any]]:
    """The feasible trials not run at `steps`, whose longest run (a rung below, else the
    screen) was feasible: one that diverged or broke a constraint at a lower rung is no
    configuration to carry on. Longest first, then in the pick's order (`pick.ranked`) among
    those of one length: values at different lengths do not compare."""
    longest = pk.longest_runs(study, complete=False)
    cands = []
    for c in pk.candidates(study, every=True):
        if c.number in run_there:
            continue
        last = longest.get(c.number)
        if last is not None and not (last.get("feasible") and last.get("values")):
            continue
        cands.append(c)
    lengths = sorted({c.steps or screen_steps for c in cands}, reverse=True)
    out = []
    for length in lengths:
        same = [c for c in cands if (c.steps or screen_steps) == length]
        for c in pk.ranked(same, objectives):
            out.append(
                {"number": c.number, "steps": length, "values": c.values, "params": c.params}
            )
    return out


def carried_text(state: Mapping[str, Any]) -> str:
    """`the 5 trials carried on to 800 steps (the target) diverged there (5 of 5:
    loss_explosion)`: what happened to every trial run at the decided length."""
    carried = state["carried"]
    n, outcomes = int(carried["n"]), carried["outcomes"]
    causes = ", ".join(
        k if len(carried["causes"]) == 1 else f"{k} {v}"
        for k, v in sorted(carried["causes"].items())
    )
    if len(outcomes) == 1:  # all alike: diverged, failed, oom, or complete but infeasible
        what = next(iter(outcomes))
        what = "broke a constraint" if what == "infeasible" else what
        counted = f"{n} of {n}"
    else:
        what = "none held"
        counted = ", ".join(f"{k} {v} of {n}" for k, v in sorted(outcomes.items()))
    trials = f"the {n} trials" if n != 1 else "the one trial"
    return (
        f"{trials} carried on to {state['steps']} steps (the target) {what} there "
        f"({counted}{f': {causes}' if causes else ''})"
    )


def short_text(state: Mapping[str, Any], limit: int = 3) -> str:
    """`feasible trials that did not reach 800 steps: trial 2 (complete at 200 steps), ...`."""
    short = state["short"]
    if not short:
        return f"no feasible trial stopped short of {state['steps']} steps either"
    shown = ", ".join(
        f"trial {s['number']} (complete and feasible at {s['steps']} steps)" for s in short[:limit]
    )
    more = f" and {len(short) - limit} more" if len(short) > limit else ""
    return f"feasible trials that did not reach {state['steps']} steps: {shown}{more}"


def next_step(state: Mapping[str, Any], name: str) -> str:
    """What to do about it: carry the best short trial on (study `name`), or promote more."""
    if state.get("best") is None:
        return "widen the space, lower the learning rate, or run more trials"
    return (
        f"carry one on: `autotune export {name} --pick 'trial {state['best']}' -o recipe.yaml`, "
        f"then `autotune verify recipe.yaml --steps {state['steps']}`, or run the study again "
        "with a larger promotion (rungs.min_promote)"
    )


def no_pick(state: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The summary's `pick` when there is none at the target but `state` (`at_target`) has
    feasible trials short of it: `best` is the first of them, `best_steps` the length it
    reached; `best_diverged_share` is null: it never ran at the target, over any seed."""
    best = state["short"][0] if state["short"] else None
    return {
        "how": "balanced",
        "number": None,
        "holds": False,
        "best": best["number"] if best else None,
        "best_steps": best["steps"] if best else None,
        "best_diverged_share": None,
        "steps": state["steps"],
        "why": carried_text(state),
        "message": f"{carried_text(state)}; {short_text(state)}: {next_step(state, name)}",
    }


def refusal(name: str, state: Mapping[str, Any]) -> str:
    """Export's refusal of a balanced (or other named) pick when `state` (`at_target`) holds:
    the trials that stopped short are named as such, not as infeasible."""
    return (
        f"study {name} has no feasible trial at {state['steps']} steps, the length it decided "
        f"at: {carried_text(state)}. Closest: {short_text(state)}. Next: {next_step(state, name)}"
    )


def recipe_short(chosen: Any, probe_steps: int, decided_at: int) -> dict[str, int] | None:
    """A trial named with --pick that stopped short of the length the study decided at, and
    was not verified there: its numbers are its own shorter run's (`probe_steps`)."""
    ran = int(chosen.steps or probe_steps)
    if ran < decided_at and not chosen.verified:
        return {"steps": ran, "decided_steps": decided_at}
    return None
