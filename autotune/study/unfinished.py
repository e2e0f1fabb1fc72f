"""Whether a study has finished, and if not, where it stopped: the one notion of "unfinished"
that `autotune show`, the end-of-study summary, `autotune studies` and `autotune export` all use.

A study runs its phases in order: the screen (budget.trials), the rungs (toward
budget.target_steps), the verification (the top candidates and the baseline over seeds). It is
unfinished while any of them has work left, or while its driver runs (its lock is held). What is
said of it then is the state so far: a pick among the trials that ran (the screen cut short), a
pick at the screen's length (the rungs cut short), a pick by the trials' own runs (the
verification cut short: a partial verification, e.g. the baseline's seeds alone, is no evidence
for choosing between candidates), and no saving figure for its compute (the "saving" would be
the trials and probes that never ran).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.study import attrs as ua
from autotune.study.compute import study_compute
from autotune.study.failures import failed_trials
from autotune.study.records import count_finished
from autotune.study.rungs import pending as rungs_pending
from autotune.study.rungs import plan
from autotune.study.verification import to_verify

PHASES = ("screen", "rungs", "verification")
"""The phases, in the order a study runs them; `state()["phase"]` is the first with work left."""


#: A summary's counts of trials Optuna holds as running: `running` while the study's driver
#: runs, `interrupted` when it died under them.
UNFINISHED = ("running", "interrupted")


def state(study: Any, space: sp.Space, running: str | None = None) -> dict[str, Any] | None:
    """None for a finished study whose driver is not running; else `phase` (the first phase
    with work left, None when only the driver still runs), `trials_finished`, `trials_planned`,
    `rung_probes` (the rung probes recorded at the current rungs: a driver stopped mid-rung ran
    some), `unverified` (with the verification pending: the trials it has still to verify),
    `driver` (who runs it now, `session.driver_running`; None: nobody) and `baseline_failed`
    (its baseline failed: the study stopped there, and running it again stops there too)."""
    finished, planned = count_finished(study), int(space.budget.trials)
    phase: str | None = None
    unverified: list[int] = []
    if finished < planned:
        phase = "screen"
    elif rungs_pending(study, space):
        phase = "rungs"
    else:
        unverified = sorted(c.number for c in to_verify(study, space))
        phase = "verification" if unverified else None
    if phase is None and running is None:
        return None
    return {
        "phase": phase,
        "trials_finished": finished,
        "trials_planned": planned,
        "rung_probes": _rung_probes(study, space),
        "unverified": unverified,
        "driver": running,
        "baseline_failed": any(r["baseline"] for r in failed_trials(study)),
    }


def verification_partial(left: Mapping[str, Any] | None) -> bool:
    """Whether the study's verification has not finished (cut short, not run yet, or running):
    then its results so far must not decide a named pick (`verdict.decide`'s `partial`)."""
    return left is not None and left.get("phase") in PHASES


def _rung_probes(study: Any, space: sp.Space) -> int:
    """The rung records in the study at the lengths of the space's current rungs."""
    lengths = set(plan(space)[1:])
    found = (ua.rung_of(k) for k in study.user_attrs)
    return sum(1 for at in found if at is not None and at[1] in lengths)


def spent(
    study: Any, space: sp.Space, study_dir: Path | None, left: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """`compute.study_compute`, but of an unfinished study (`left`, from `state`) with no
    saving figure (`saved_vs_full` None) nor ratio to a screen-only study (`vs_today` None),
    and `cut_short` naming the phase it stopped in (or `running`, the phase its driver is in,
    while one runs): both estimates count every planned probe, so what never ran would read
    as saved ("0.8x a screen-only study" of a study stopped in its screen)."""
    found = study_compute(study, space, study_dir)
    if found is None or not left:
        return found
    phase = left.get("phase") or "running"
    found = {**found, "saved_vs_full": None, "vs_today": None}
    if left.get("driver"):  # its driver runs: not cut short, only not finished yet
        return {**found, "running": phase}
    return {**found, "cut_short": phase}


def text(left: Mapping[str, Any] | None, screen_steps: int, target_steps: int) -> str | None:
    """Where an unfinished study stopped and what its pick is worth, to follow "study NAME"
    (None when it finished; a study whose driver runs says so elsewhere). A record without a
    `phase` (a recipe exported before there were phases) was cut short in its screen."""
    if not left or left.get("driver"):
        return None
    phase = left.get("phase", "screen")
    if not phase:
        return None
    again = "run the same `autotune study` command again to finish it"
    if left.get("baseline_failed"):
        # Run again, it stops at the same failed baseline (`driver.stop_if_baseline_failed`):
        # the advice is the error's, not "run it again".
        return (
            f"was stopped before it finished: {left['trials_finished']} of "
            f"{left['trials_planned']} trials ran, and its baseline failed, so nothing can be "
            "judged against it (running it again stops there too: fix the job, then start the "
            "study afresh, after removing its folder or under another name)"
        )
    if phase == "screen":
        return (
            f"was stopped before it finished: {left['trials_finished']} of "
            f"{left['trials_planned']} trials ran, and the pick is among those only ({again})"
        )
    if phase == "rungs":
        ran = int(left.get("rung_probes") or 0)
        probes = f"{ran} rung probe{'s' if ran != 1 else ''} ran, " if ran else ""
        return (
            f"was stopped before it finished: in its rungs ({probes}none decided), so the pick "
            f"is the screen's at {screen_steps} steps, not decided toward {target_steps} "
            f"({again})"
        )
    numbers = ", ".join(map(str, left.get("unverified") or []))
    return (
        f"was stopped before it finished: in its verification, with trial(s) {numbers} not "
        f"verified, so the pick is by the trials' own runs, not verified ({again})"
    )
