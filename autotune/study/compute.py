"""What a study spent, in samples: the screen, the rungs and the verification as measured, beside
two estimates of what other flows would have spent.

A sample is what a probe's `samples_seen` counts (sequences, images or rows per optimizer step,
times the steps it ran, times the processes of a DDP probe); tokens are not counted separately.

Measured (from what the study stored): `screen` = the finished trials' `samples_seen` (their
Optuna user attributes, else their trials/NNNN.json); `rungs` = the rung records
trials/NNNN-rK.json at the lengths of the current rungs (a record left from an earlier target is
not this answer's); `verification` = the records verify/NNNN-s{steps}-seed{S}.json. A promoted
probe that continued its trial's probe at the rung below counts the samples it ran
(`samples_run`), not the ones it inherited; one that started over counts all. A probe
stopped early by a divergence or an out-of-memory counts the samples it saw; a probe that failed
without a summary counts none; the first attempt of an OOM retry and the one-process timing
of `probe.measure_scaling` are not in a summary's `samples_seen`, so not here either. `total`
is their sum.

Estimated from the space (b = probe.batch x probe.world_size samples per step, N = the trials
screened, V = verify.top_k x verify.seeds verification probes): `full_length` = b x T x (N + V),
every screened trial and the same verification at budget.target_steps T (the verification as
measured, once some has run: it may hold more probes than V); `today` =
b x probe.steps x (N + V'), the flow without rungs, V' the verification probes that ran (the
baseline's seeds too) counted once per trial and seed, else V: the baseline's screen probe at the
verification seeds (the yardstick of the relative constraints, verify/0000-s{probe.steps}-seed{S})
is its verification in a screen-only study, so the baseline's seeds at the target are not run
again there. The summary line gives `vs_today` only for a study with rungs
(without, it is the screen-only study). `vs_today` = total / today, `saved_vs_full` =
1 - total / full_length.

A rung or verification record that cannot be read as one probe's (not JSON, not an object, a
summary of the wrong shape: a file damaged or edited by hand) is counted as nothing and named in
`unreadable`, which the summary's line says: a figure that left something out says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.study import attrs as ua
from autotune.study import folder
from autotune.study import rungs as rg

_RUNG_FILE = re.compile(r"\d{4,}-r\d+\.json")
_VERIFY_FILE = re.compile(r"(\d{4,})-s\d+-seed(-?\d+)\.json")


@dataclass(frozen=True)
class Plan:
    """What the estimates take from the space."""

    samples_per_step: int  # b: probe.batch x probe.world_size
    probe_steps: int
    target_steps: int
    verify_probes: int  # verify.top_k x verify.seeds

    @classmethod
    def of(cls, space: sp.Space) -> Plan:
        p = space.probe
        return cls(
            samples_per_step=p.samples_per_step * p.world_size,
            probe_steps=p.steps,
            target_steps=space.budget.target_steps or p.steps,
            verify_probes=space.verify.top_k * space.verify.seeds,
        )


def samples_of(record: Mapping[str, Any]) -> int:
    """The samples one probe's process trained on, from its record (`summary.samples_run`: a
    continued probe's own steps; else `samples_seen`; for a summary that lacks both, samples
    per step x steps run); 0 for a probe without a summary. ValueError for a record that is not
    a probe's (a summary that is not an object, a count that is not a number >= 0)."""
    summary = record.get("summary") or {}
    if not isinstance(summary, Mapping):
        raise ValueError("its summary is not an object")
    seen = summary.get("samples_run")
    if seen is None:
        seen = summary.get("samples_seen")
    if seen is None:
        seen = _number(summary.get("samples_per_step")) * _number(summary.get("steps_run"))
    return int(_number(seen))


def _number(v: Any) -> float:
    """A count as a record holds it (None: 0); ValueError for anything else."""
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < float("inf"):
        raise ValueError(f"a count of {str(v)[:40]!r}")
    return float(v)


def account(
    screen: Iterable[int],
    rungs: Iterable[int],
    verification: Iterable[int],
    plan: Plan,
    verified_configs: int | None = None,
) -> dict[str, Any]:
    """The compute of a study from the samples of each of its probes (see the module).
    `verified_configs`: the verification probes a screen-only study would run, one per trial
    and seed that ran (the baseline's yardstick and its seeds at the target are one); None:
    every verification probe is one."""
    screened, verified_probes = list(screen), list(verification)
    spent = {"screen": sum(screened), "rungs": sum(rungs), "verification": sum(verified_probes)}
    total = sum(spent.values())
    # the same verification at the screen's length: as many probes as ran (the baseline's
    # seeds beside the candidates' too, once each), else as estimated
    ran = len(verified_probes) if verified_configs is None else verified_configs
    probes = len(screened) + (ran or plan.verify_probes)
    today = plan.samples_per_step * plan.probe_steps * probes
    # every screened trial at the target, and the same verification: as it ran (it may hold
    # more probes than V: candidates past top_k, the baseline's seeds), else as estimated
    at_target = plan.samples_per_step * plan.target_steps
    verified = spent["verification"] or at_target * plan.verify_probes
    full = at_target * len(screened) + verified
    return {
        **spent,
        "total": total,
        "today": today,
        "full_length": full,
        "vs_today": total / today if today else None,
        "saved_vs_full": 1.0 - total / full if full else None,
        "samples_per_step": plan.samples_per_step,
        "target_steps": plan.target_steps,
        "unit": "samples",
    }


def study_compute(study: Any, space: sp.Space, study_dir: Path | None) -> dict[str, Any] | None:
    """The compute of `study` from its storage and its folder's records; None without a folder
    (the rung and verification records live there)."""
    if study_dir is None:
        return None
    lengths = rg.plan(space)
    unreadable: list[str] = []
    rung_records = _records(folder.trials_dir(study_dir), _RUNG_FILE, unreadable)
    verify_records = _records(folder.verify_dir(study_dir), _VERIFY_FILE, unreadable)
    out = account(
        screen_samples(study, study_dir, unreadable),
        (_samples(p, r, unreadable) for p, r in rung_records if _current(r, lengths)),
        (_samples(p, r, unreadable) for p, r in verify_records),
        Plan.of(space),
        _trials_and_seeds(verify_records),
    )
    out["unreadable"] = sorted(unreadable)
    return out


def _trials_and_seeds(records: Iterable[tuple[Path, Mapping[str, Any]]]) -> int:
    """How many (trial, seed) pairs the verification records hold: the baseline's screen at a
    verification seed (the yardstick) and the same seed at the target are one probe of a
    screen-only study, which would not run the baseline's seeds a second time."""
    pairs = set()
    for path, _ in records:
        found = _VERIFY_FILE.fullmatch(path.name)
        if found:
            pairs.add((int(found[1]), int(found[2])))
    return len(pairs)


def _samples(path: Path, record: Mapping[str, Any], unreadable: list[str]) -> int:
    """`samples_of(record)`, or 0 with `path` noted as unreadable (its folder/name)."""
    try:
        return samples_of(record)
    except (ValueError, TypeError, OverflowError):
        unreadable.append(_shown(path))
        return 0


def _shown(path: Path) -> str:
    """A record's name as the compute line gives it: its folder (trials, verify) and file."""
    return f"{path.parent.name}/{path.name}"


def _current(record: Mapping[str, Any], plan: list[int]) -> bool:
    """Whether a rung record is at its rung's length in the space's current `plan`."""
    rung = record.get("rung")
    if isinstance(rung, bool) or not isinstance(rung, int):
        return False
    return 0 < rung < len(plan) and record.get("steps") == plan[rung]


def screen_samples(study: Any, study_dir: Path, unreadable: list[str] | None = None) -> list[int]:
    """Per finished trial, the samples its probe saw (a trial record that is not a probe's:
    0, its name added to `unreadable`)."""
    import optuna

    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    noted = [] if unreadable is None else unreadable
    out = []
    for t in study.get_trials(deepcopy=False, states=done):
        seen = t.user_attrs.get(ua.SAMPLES_SEEN)
        if seen is None:
            path = folder.trial_path(study_dir, t.number)
            seen = _samples(path, folder.read_json(path) or {}, noted)
        out.append(int(seen))
    return out


def _records(
    where: Path, name: re.Pattern[str], unreadable: list[str]
) -> list[tuple[Path, dict[str, Any]]]:
    """The JSON records in `where` whose file name matches `name`, with their paths; the names
    of those that are not a JSON object go to `unreadable`."""
    if not where.is_dir():
        return []
    out = []
    for p in sorted(where.glob("*.json")):
        if not name.fullmatch(p.name):
            continue
        record = folder.read_json(p)
        if record is None:
            unreadable.append(_shown(p))
        else:
            out.append((p, record))
    return out


def format_line(compute: Mapping[str, Any] | None) -> str | None:
    """One line for the end-of-study summary; None when nothing was spent yet."""
    if not compute or not compute.get("total"):
        return None
    target = compute["target_steps"]
    rungs = bool(compute["rungs"]) or compute["full_length"] != compute["today"]
    parts = [f"screen {_count(compute['screen'])}"]
    if rungs:
        parts.append(f"rungs {_count(compute['rungs'])}")
    parts.append(f"verification {_count(compute['verification'])}")
    text = f"compute: {_count(compute['total'])} samples ({', '.join(parts)})"
    if rungs and compute.get("vs_today") is not None:  # without rungs it is one
        text += f" = {compute['vs_today']:.1f}x a screen-only study"
    saved = compute.get("saved_vs_full")
    if rungs and saved is not None:
        more = "less" if saved >= 0 else "more"
        text += (
            f", {abs(saved):.0%} {more} than every trial (and the same verification) "
            f"at {target} steps"
        )
    if compute.get("cut_short"):  # `unfinished.spent`: what never ran is no saving
        text += f", so far: the study was cut short ({compute['cut_short']}), no saving figure"
    elif compute.get("running"):
        text += f", so far: the study is still running ({compute['running']}), no saving figure"
    bad = compute.get("unreadable") or []
    if bad:
        named = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        text += f"; {len(bad)} record file(s) unreadable, counted as nothing: {named}"
    return text


def _count(n: int) -> str:
    """164000 -> 164k, 2500000 -> 2.5M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.3g}{suffix}"
    return str(n)
