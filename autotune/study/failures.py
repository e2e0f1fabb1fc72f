"""Failed trials, said where the user looks: their one-line messages for `show` and the summary,
the stop of a study whose baseline failed or whose every trial failed, and how long a training
script may run before its first report.

A trial *fails* when its process could not produce a result: the script raised, exited non-zero,
never reported, reported badly, ran past its time, or its process died. A divergence or an
out-of-memory is a result, not a failure. Each failed trial's record carries `error`, one
printable line (`autotune.errors.one_line`), in trials/NNNN.json and the trial's user attributes.
A verification seed fails the same ways; its error is in its verify/*.json and the trial's
verified result (`runs`), and is said as a failed trial's is (`failed_seeds`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.errors import one_line
from autotune.probe.outcome import MEASURED, Outcome
from autotune.study import attrs as ua

#: Lines of failed trials printed in a summary (the rest are counted).
SHOWN = 5
#: The first-report rule of a script trial after the baseline: this many times the baseline's
#: time from its start to its first report, at least FLOOR_S, at most `budget.first_report_s`.
MULTIPLE = 5
FLOOR_S = 60.0


def failed_trials(study: Any) -> list[dict[str, Any]]:
    """Every finished trial that failed, by number: `{number, baseline, cause, error}`."""
    rows = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if t.state.is_finished() and t.user_attrs.get(ua.OUTCOME) == Outcome.FAILED:
            rows.append(
                {
                    "number": t.number,
                    "baseline": ua.is_baseline(t),
                    "cause": t.user_attrs.get(ua.CAUSE),
                    "error": one_line(t.user_attrs.get(ua.ERROR) or "") or None,
                }
            )
    return rows


def failed_seeds(study: Any) -> list[dict[str, Any]]:
    """Every verification seed that failed (not diverged: raised, crashed, ran past its time),
    by trial and seed: `{number, baseline, cause, error, seed, steps}`, `error` one line as a
    failed trial's is (what the seed's probe raised; not trusted to be readable)."""
    base = {t.number for t in study.get_trials(deepcopy=False) if ua.is_baseline(t)}
    rows = []
    for key, ver in study.user_attrs.items():
        number = ua.verified_of(key)
        if number is None:
            continue
        for r in (ver or {}).get("runs") or []:
            if r.get("outcome") == Outcome.FAILED:
                rows.append(
                    {
                        "number": number,
                        "baseline": number in base,
                        "cause": r.get("cause"),
                        "error": one_line(r.get("error") or "") or None,
                        "seed": r.get("seed"),
                        "steps": ver.get("steps"),
                    }
                )
    return sorted(rows, key=lambda r: (r["number"], r["seed"] is None, r["seed"] or 0))


def describe(row: Mapping[str, Any]) -> str:
    """`trial 3 failed (exception): ValueError: boom`, from a record or a `failed_trials` row;
    `trial 3 failed on verification seed 2 (exception): ...` from a `failed_seeds` row."""
    label = "baseline (trial 0)" if row.get("baseline") else f"trial {row['number']}"
    if row.get("baseline") and row.get("number") not in (None, 0):
        label = f"baseline (trial {row['number']})"
    on = f" on verification seed {row['seed']}" if row.get("seed") is not None else ""
    cause = f" ({row['cause']})" if row.get("cause") else ""
    error = one_line(row.get("error") or "")
    return f"{label} failed{on}{cause}" + (f": {error}" if error else "")


def not_a_candidate(study: Any, number: int) -> str | None:
    """Why trial `number`, named by an explicit pick, is no candidate, where its own record
    says it: not finished, failed (with its error), diverged or out of memory. None for a
    complete trial (infeasible, or not run at the decided length: the pick's own message says
    so), and for no such trial (`export` says that before it picks)."""
    trial = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
    if trial is None:
        return None
    if not trial.state.is_finished():
        return f"trial {number} has not finished (the study stopped while it ran; --resume runs it)"
    outcome = trial.user_attrs.get(ua.OUTCOME)
    cause = trial.user_attrs.get(ua.CAUSE)
    if outcome == Outcome.FAILED:
        error = trial.user_attrs.get(ua.ERROR)
        row = {"number": number, "baseline": ua.is_baseline(trial), "cause": cause}
        return describe({**row, "error": error})
    if outcome in (Outcome.DIVERGED, Outcome.OOM):
        what = "diverged" if outcome == Outcome.DIVERGED else "ran out of memory"
        return f"trial {number} {what}" + (f" ({one_line(str(cause))})" if cause else "")
    return None


def summary_lines(rows: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The summary's lines of failed trials (and verification seeds): the first SHOWN, then
    how many more."""
    rows = list(rows or [])
    lines = [f"  {describe(r)}" for r in rows[:SHOWN]]
    if len(rows) > SHOWN:
        lines.append(f"  ... and {len(rows) - SHOWN} more failed (`autotune show --json`)")
    return lines


def baseline_stop(row: Mapping[str, Any], study_dir: Path, name: str) -> str:
    """Why a study stops once its baseline failed, and how to start it again."""
    record = study_dir / "trials" / f"{int(row['number']):04d}.json"
    return (
        f"{describe(row)}. The study stops: every trial is judged against the baseline. "
        f"Its log is in {record} (log_tail). Fix the job, then start the study afresh: "
        f"remove {study_dir} (or run it under another name, --set name={name}-2)"
    )


def every_trial_failed(counts: Mapping[str, int], rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The message of a study whose every finished trial failed; None otherwise."""
    failed = int(counts.get(Outcome.FAILED.value) or 0)
    results = sum(int(counts.get(k.value) or 0) for k in MEASURED)
    if failed == 0 or results > 0:
        return None
    rows = [r for r in rows if r.get("seed") is None]  # the screen's, not a verification's
    first = f"; {describe(rows[0])}" if rows else ""
    return f"every trial failed ({failed} of {failed}){first}"


def first_report_s(limit: float | None, baseline_first_s: float | None) -> float | None:
    """How long a script trial may run before its first report: `budget.first_report_s`
    (`limit`; None: no limit), tightened once the baseline has reported to MULTIPLE times its
    time to its first report, never under FLOOR_S."""
    if limit is None or baseline_first_s is None or baseline_first_s <= 0:
        return limit
    return min(limit, max(FLOOR_S, MULTIPLE * baseline_first_s))


def first_report_rule(limit: float | None, baseline_first_s: float | None) -> str | None:
    """Why a script trial's first-report limit (`first_report_s`) is what it is and what lifts
    it, where the baseline's rule set it under `budget.first_report_s` (`limit`); None where
    that setting did (raising it helps then)."""
    tight = first_report_s(limit, baseline_first_s)
    if limit is None or tight is None or baseline_first_s is None or tight >= limit:
        return None
    return (
        f"the limit is {MULTIPLE}x the baseline's {baseline_first_s:.3g} s to its first report, "
        f"at least {FLOOR_S:g} s (budget.first_report_s, {limit:g} s, only caps it): a trial "
        "that starts much slower than the baseline is stopped there; budget.first_report_s: "
        "null lifts every first-report limit"
    )


class BaselineFailed(Exception):
    """The screen stopped because the baseline failed; its message is `baseline_stop`'s."""
