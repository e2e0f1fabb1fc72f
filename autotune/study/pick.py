"""Choosing one configuration from a finished study.

Candidates are the feasible trials: complete, not diverged, meeting every constraint (so learning),
at the length the study decided at (its top rung, `autotune.study.rungs`: feasible in their record
there, whatever their screen said; else the screen), with their values at that length. When
the study verified its best candidates over seeds (`autotune.recipe.verify`) at that length,
the named picks choose among the verified ones that held on every seed (none diverged
or failed, every constraint met), using their verified means; when none held there is no named
pick (RecipeError): the user chooses one explicitly with `trial N`.

Picks:
- `balanced` (default): the knee of the Pareto front. Each objective is scaled to [0, 1] over the
  front (0 = the front's best value, 1 = its worst; an objective on which the front agrees scales
  to 0), and the knee is the front member closest (Euclidean) to the ideal point (0, ..., 0): the
  configuration that gives up least, in relative terms, on every objective at once. Members at
  the same distance (two members, each the best on one objective, are both at 1) are ordered by
  how much they give up as a share of the best value of each objective (`noise.relative_shortfall`):
  5% less stable beats 85% slower.
- `fastest`: the highest throughput among the candidates.

Values within each other's noise are ties (`autotune.study.noise`): throughput carries an
interval from each probe's step timings (over seeds when verified), and two candidates whose
intervals overlap are tied on it, in the front (no worse), in the knee (an objective that
separates no two front members beyond noise is left out) and in `fastest` (the stablest of those
whose interval overlaps the fastest's); when every candidate's interval overlaps the best one's
the objective decides nothing. Ties go to stability, then final loss, then the lower number.
- `stablest`: the lowest value of the study's first minimised objective (loss_cv by default).
- `trial N`: that trial, if it is a candidate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import RecipeError, one_line
from autotune.knobs import HARDWARE_METRICS
from autotune.numbers import finite
from autotune.probe.outcome import Outcome
from autotune.recipe.seeds import TIMED, too_few_timed
from autotune.study import attrs as ua
from autotune.study import noise
from autotune.study.records import screen_feasible

PICKS = ("balanced", "fastest", "stablest")


@dataclass
class Candidate:
    """One feasible trial, with verified numbers when there are."""

    number: int
    values: list[float]  # the trial's own objective values
    metrics: dict[str, Any]
    knobs: dict[str, Any]
    env: dict[str, str]
    params: dict[str, Any]
    fp_hash: str | None = None
    baseline: bool = False
    verified: dict[str, Any] | None = None  # see autotune.recipe.verify.summarize_seeds
    extra: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None  # the probe length its values were measured at
    rung: int | None = None  # the rung whose record gave its values (None: the screen's)

    @property
    def holds(self) -> bool:
        """Verified, and on every seed complete and within every constraint."""
        v = self.verified
        return (
            v is not None
            and float(v.get("diverged_share") or 0.0) == 0.0
            and not v.get("failed")
            and bool(v.get("all_feasible", True))
        )

    def value(self, metric: str, i: int | None = None) -> float:
        """The verified mean of `metric` when verified, else the trial's own value."""
        v = (self.verified or {}).get("metrics", {}).get(metric)
        if v is not None and v.get("mean") is not None:
            return float(v["mean"])
        if i is not None:
            return float(self.values[i])
        return float(self.metrics.get(metric, math.nan))

    @property
    def stable_when_verified(self) -> bool:
        return self.verified is None or float(self.verified.get("diverged_share", 0.0)) == 0.0


def parse_pick(text: str) -> tuple[str, int | None]:
    """'balanced' | 'fastest' | 'stablest' | 'trial N' (also 'trial:N', 'trial=N', 'N')."""
    t = text.strip().lower()
    if t in PICKS:
        return t, None
    m = re.fullmatch(r"(?:trial[\s:=#]*)?(\d+)", t)
    if m:
        return "trial", int(m.group(1))
    raise RecipeError(
        f"--pick {text!r}: choose balanced, fastest, stablest or 'trial N' (e.g. --pick 'trial 7')"
    )


def is_candidate(
    screen_feasible: bool,
    row: Mapping[str, Any] | None,
    *,
    above_screen: bool,
    every: bool = False,
) -> bool:
    """Whether a trial is a candidate for the pick (and for verification).

    Decided at a rung above the screen (`above_screen`): iff its record at that rung (`row`,
    slim: `feasible`, `values`) is feasible, whatever its screen said: the baseline is always
    promoted, and one that had not learned by the screen may be the most stable there. With
    `every` (an explicit `trial N`) a trial not run at that rung counts by its screen.
    Decided at the screen: the screen's feasibility. Pure: the benchmarks call it too."""
    if not above_screen or (row is None and every):
        return screen_feasible
    return row is not None and bool(row.get("feasible")) and bool(row.get("values"))


def candidates(study: Any, every: bool = False) -> list[Candidate]:
    """The study's candidates (`is_candidate`) with their values at the length it decided at
    and their verification results at that length when they have one. `every`: also the
    feasible screened trials that were not run at that length (for an explicit `trial N`),
    each with the values of its longest complete run (`longest_runs`: a rung below, else the
    screen): the run closest to the length the study decided at."""
    import optuna

    verified = verified_results(study)
    decided = ua.decided(study)
    steps = decided.get("steps")
    at_rung = rung_rows(study, int(steps)) if steps and decided.get("rung") else None
    below = longest_runs(study, int(steps or 0)) if every and at_rung is not None else {}
    out = []
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    judged = screen_feasible(study)
    for t in study.get_trials(deepcopy=False, states=states):
        row = (at_rung or {}).get(t.number)
        screened = judged(t)
        if not is_candidate(screened, row, above_screen=at_rung is not None, every=every):
            continue
        there = row is not None or at_rung is None  # its values are at the decided length
        if row is None:  # not run at the decided length (`every`): its longest run below it
            row = below.get(t.number)
        ver = verified.get(t.number)
        if ver is not None and steps is not None and ver.get("steps", steps) != steps:
            ver = None  # verified at another length: not evidence for this one
        out.append(
            Candidate(
                number=t.number,
                values=[float(v) for v in (row["values"] if row else t.values)],
                metrics=dict(row["metrics"] if row else t.user_attrs.get(ua.METRICS) or {}),
                knobs=ua.knobs(t),
                env=ua.env(t),
                params=dict(t.params),
                fp_hash=t.user_attrs.get(ua.FP_HASH),
                baseline=ua.is_baseline(t),
                verified=ver if there else None,
                steps=int(row["steps"]) if row else (steps if at_rung is None else None),
                rung=int(row["rung"]) if row and row.get("rung") is not None else None,
            )
        )
    return out


def picked_candidates(study: Any, how: str) -> list[Candidate]:
    """`candidates` for the pick `how` (`every` with an explicit `trial N`); a RecipeError
    when the study has no trial N at all, naming its trials: "not a candidate" would send the
    user looking for why a trial that never ran is not feasible."""
    kind, number = parse_pick(how)
    if kind == "trial":
        numbers = [t.number for t in study.get_trials(deepcopy=False)]
        if number not in numbers:
            has = f"its trials are {min(numbers)} to {max(numbers)}" if numbers else "none yet"
            raise RecipeError(
                f"--pick 'trial {number}': study {study.study_name} has no trial {number} ({has})"
            )
    return candidates(study, every=kind == "trial")


def longest_runs(
    study: Any, below: int | None = None, complete: bool = True
) -> dict[int, dict[str, Any]]:
    """Per trial, its slim record at the longest rung it ran shorter than `below` steps (any
    length when None). `complete`: only complete runs with values (what an explicit `trial N`
    short of the decided length is exported from); else whatever its outcome (`short_of`)."""
    out: dict[int, dict[str, Any]] = {}
    for key, row in study.user_attrs.items():
        at = ua.rung_of(key)
        if at is None or (below is not None and not at[1] < below):
            continue
        if complete and (row.get("outcome") != Outcome.COMPLETE or not row.get("values")):
            continue
        if at[0] not in out or int(out[at[0]]["steps"]) < at[1]:
            out[at[0]] = row
    return out


def rung_rows(study: Any, steps: int) -> dict[int, dict[str, Any]]:
    """The study's slim rung records at `steps` (`autotune.rung.N.STEPS`), by trial number."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in study.user_attrs.items():
        rung = ua.rung_of(key)
        if rung is not None and rung[1] == steps:
            out[int(value["number"])] = value
    return out


def verified_results(study: Any) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for key, value in study.user_attrs.items():
        number = ua.verified_of(key)
        if number is not None:
            out[number] = value
    return out


def vector(c: Candidate, objectives: Sequence[Mapping[str, Any]]) -> list[float]:
    """`c`'s value of each objective, in the objectives' order (`Candidate.value`)."""
    return [c.value(o["metric"], i) for i, o in enumerate(objectives)]


def dominates(a: Sequence[float], b: Sequence[float], dirs: Sequence[str]) -> bool:
    """a is no worse than b in every objective and better in one; values equal within
    floating-point noise (`noise.same`) are ties."""
    better = False
    for x, y, d in zip(a, b, dirs, strict=True):
        if noise.same(x, y):
            continue
        if (x > y) if d == "minimize" else (x < y):
            return False
        better = better or x != y
    return better


def scored(c: Candidate, objectives: Sequence[Mapping[str, Any]]) -> noise.Scored:
    """`c` as `autotune.study.noise` orders it: its values (verified means first), their
    intervals (verified over seeds, else its run's own timing interval), its tie-break."""
    return noise.Scored(
        number=c.number,
        values=tuple(vector(c, objectives)),
        bounds=tuple(noise.bounds_of(c.metrics, o["metric"], c.verified) for o in objectives),
        tiebreak=noise.tiebreak(objectives, c.value),
        runs=tuple(_timed_runs(c, o["metric"]) for o in objectives),
    )


def _timed_runs(c: Candidate, metric: str) -> noise.Runs | None:
    """A verified candidate's runs of a timed metric (`noise.separated`); None otherwise."""
    return noise.runs_of(c.verified, metric) if metric in TIMED else None


def front(cands: Sequence[Candidate], objectives: Sequence[Mapping[str, Any]]) -> list[Candidate]:
    """The candidates no other candidate beats on every objective (verified values first;
    values within each other's noise are ties, `noise.dominates`; an objective within noise
    over all of them, `noise.within_noise`, decides nothing)."""
    rows = [scored(c, objectives) for c in cands]
    dirs = [o["direction"] for o in objectives]
    ignore = {i for i, d in enumerate(dirs) if noise.within_noise(rows, i, d)}
    kept = {r.number for r in noise.front(rows, dirs, ignore)}
    return [c for c in cands if c.number in kept]


def knee_distances(
    members: Sequence[Candidate], objectives: Sequence[Mapping[str, Any]]
) -> dict[int, float]:
    """Distance of each member to the ideal point, objectives scaled to [0, 1] over `members`."""
    rows = [scored(c, objectives) for c in members]
    dirs = [o["direction"] for o in objectives]
    return noise.knee(rows, dirs, range(len(objectives)))


def ranked(cands: Sequence[Candidate], objectives: Sequence[Mapping[str, Any]]) -> list[Candidate]:
    """Candidates in the order to consider them: Pareto layer by layer, each by knee distance
    over the objectives that separate its members beyond noise, then stability and final loss
    (`noise.order`)."""
    by_number = {c.number: c for c in cands}
    rows = [scored(c, objectives) for c in cands]
    return [by_number[n] for n in noise.order(rows, [o["direction"] for o in objectives])]


def noise_note(
    cands: Sequence[Candidate], objectives: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The summary's `throughput_noise` (`noise.note`) over the candidates a named pick chooses
    among (the verified ones that held, when any was verified)."""
    verified = [c for c in cands if c.verified is not None]
    pool = [c for c in verified if c.holds] if verified else list(cands)
    out = noise.note([scored(c, objectives) for c in pool], objectives)
    return _too_few_seeds(out, pool) if out and out["within_noise"] and verified else out


def _too_few_seeds(note: dict[str, Any], pool: Sequence[Candidate]) -> dict[str, Any]:
    """A tie on a timed metric read from intervals over too few seeds (`seeds.too_few_timed`:
    2 seeds span one or two orders of magnitude) is no tie: nothing could have told the
    candidates apart. The order stays as decided (on stability and final loss), and the note
    says why instead of "within timing noise" (`too_few_seeds`: the widest interval's why)."""
    metric = note["metric"]
    wide = []
    for c in pool:
        iv = ((c.verified or {}).get("metrics") or {}).get(metric) or {}
        why = too_few_timed(metric, iv)
        if why:
            span = iv["high"] / iv["low"] if (iv.get("low") or 0) > 0 else math.inf
            wide.append((span, c.number, why))
    if not wide:
        return note
    _, number, why = max(wide)
    lo, hi = note["range"]
    apart = f" (measured {lo:.3g} to {hi:.3g}, {hi / lo:.1f}x apart)" if lo > 0 else ""
    message = (
        f"{metric} not compared among the candidates: trial {number} verified on {why}: "
        f"decided on stability and final loss{apart}"
    )
    return {**note, "too_few_seeds": why, "message": message}


def pick(
    cands: Sequence[Candidate], objectives: Sequence[Mapping[str, Any]], how: str = "balanced"
) -> Candidate:
    """One candidate by `how` (see the module docstring); RecipeError when there is none."""
    kind, number = parse_pick(how)
    if kind == "trial":
        for c in cands:
            if c.number == number:
                return c
        # The longest: with an explicit pick, a trial short of the decided length is among
        # them at its own (shorter) length.
        at = max((c.steps for c in cands if c.steps), default=None)
        length = f" at {at} steps, the length the study decided at" if at else ""
        raise RecipeError(
            f"trial {number} is not a candidate (not a feasible, complete trial{length})"
        )
    if not cands:
        raise RecipeError("the study has no feasible trial to pick from")
    # Verified candidates are the ones whose numbers are known: pick among those that held on
    # every seed. When none held there is no named pick: the user chooses explicitly.
    verified = [c for c in cands if c.verified is not None]
    pool = list(cands)
    if verified:
        pool = [c for c in verified if c.holds]
        if not pool:
            at = verified[0].steps
            best = ranked(verified, objectives)[0]
            share = float((best.verified or {}).get("diverged_share") or 0.0)
            detail = "PyTorch's defaults, " if best.baseline else ""
            detail += "the best of those verified"
            detail += f"; it diverged on {share:.0%} of its seeds" if share else ""
            raise NoCandidateHolds(
                f"no candidate held on every seed{f' at {at} steps' if at else ''}: "
                f"{why_not_held(verified)}; choose one explicitly with --pick "
                f"'trial {best.number}' ({detail})"
            )
    if kind == "balanced":
        return ranked(pool, objectives)[0]
    if kind == "fastest":
        i = _index(objectives, "throughput")
        rows = [
            noise.Scored(
                number=c.number,
                values=(c.value("throughput", i),),
                bounds=(noise.bounds_of(c.metrics, "throughput", c.verified),),
                tiebreak=noise.tiebreak(objectives, c.value),
                runs=(_timed_runs(c, "throughput"),),
            )
            for c in pool
        ]
        return next(c for c in pool if c.number == noise.fastest(rows, 0))
    minimised = [o["metric"] for o in objectives if o["direction"] == "minimize"]
    metric = minimised[0] if minimised else "loss_cv"
    i = _index(objectives, metric)
    return min(pool, key=lambda c: (finite(c.value(metric, i), math.inf), c.number))


class NoCandidateHolds(RecipeError):
    """Every verified candidate diverged, failed or broke a constraint on some seed."""


def why_not_held(verified: Sequence[Candidate]) -> str:
    """Why each verified candidate did not hold: its first failing seed."""
    out = []
    for c in sorted(verified, key=lambda c: c.number):
        runs = (c.verified or {}).get("runs") or []
        bad = next((r for r in runs if r.get("outcome") != Outcome.COMPLETE), None)
        if bad is not None:
            cause = f" ({bad['cause']})" if bad.get("cause") else ""
            error = one_line(bad.get("error") or "")  # what it raised, one line
            out.append(
                f"trial {c.number} {bad.get('outcome')} on seed {bad.get('seed')}{cause}"
                + (f": {error}" if error else "")
            )
        elif not c.holds:
            broke = next((r for r in runs if r.get("feasible") is False), None)
            on = f"seed {broke.get('seed')}" if broke else "a seed"
            which = ", ".join(str(b) for b in (broke or {}).get("broken") or [])
            # which, with its value (`verification.judge_seeds`), where it was recorded
            out.append(
                f"trial {c.number} broke a constraint on {on}" + (f": {which}" if which else "")
            )
    return "; ".join(out) or "no verified candidate"


def _index(objectives: Sequence[Mapping[str, Any]], metric: str) -> int | None:
    for i, o in enumerate(objectives):
        if o["metric"] == metric:
            return i
    return None


def why_none(study: Any, limit: int = 3) -> str:
    """The trials that came closest to being candidates, and why each is not (for an error);
    a trial queued but never run (Optuna's WAITING: e.g. the baseline of a study stopped before
    it started) comes last, as not run: it did not fail."""
    import optuna

    rows: list[tuple[float, int, str]] = []  # the trials that ran, closest first
    queued: list[tuple[float, int, str]] = []  # then those that never ran
    for t in study.get_trials(deepcopy=False):
        if t.state == optuna.trial.TrialState.RUNNING:
            continue
        if t.state == optuna.trial.TrialState.WAITING:  # enqueued, never started: not failed
            queued.append((math.inf, t.number, "queued, not run"))
            continue
        outcome = ua.outcome(t)
        cons = t.user_attrs.get(ua.CONSTRAINTS) or []
        names = t.user_attrs.get(ua.CONSTRAINT_NAMES) or []
        if outcome == Outcome.COMPLETE:
            broken = [
                f"{names[i] if i < len(names) else f'constraint {i}'} (by {c:.3g})"
                + (_unmeasured(study, t) if i == 0 and names[:1] == ["not_diverged"] else "")
                for i, c in enumerate(cons)
                if c > 0
            ]
            why = "broke " + ", ".join(broken) if broken else "infeasible"
            closeness = sum(c for c in cons if c > 0)
        else:
            cause = t.user_attrs.get(ua.CAUSE)
            why = outcome + (f" ({cause})" if cause else "")
            error = one_line(t.user_attrs.get(ua.ERROR) or "")
            why += f": {error}" if error and outcome == Outcome.FAILED else ""
            closeness = math.inf
        rows.append((closeness, t.number, why))
    rows.sort()
    rows += queued
    return "; ".join(f"trial {n}: {why}" for _, n, why in rows[:limit]) or "no finished trial"


def _unmeasured(study: Any, trial: Any) -> str:
    """Why a trial that completed broke `not_diverged`: it did not diverge, but an objective has
    no finite value (a `noise_per_drop` NaN: the run did not learn on its training loss), and
    `objectives.constraints_of` counts that as broken; the bare name read as a divergence."""
    measured = ua.metrics(trial)
    names = [o.get("metric") for o in study.user_attrs.get(ua.OBJECTIVES) or []]
    missing = [n for n in names if n and finite(measured.get(n)) is None]
    which = f"no finite {', '.join(missing)}" if missing else "no finite objective"
    learn = " (did not learn on its training loss)" if "noise_per_drop" in missing else ""
    return f": did not diverge, {which}{learn}"


def only_failures(study: Any) -> bool:
    """Whether the study has finished trials and every one of them failed (no result at all)."""
    outcomes = [ua.outcome(t) for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    return bool(outcomes) and all(o == Outcome.FAILED for o in outcomes)


def matched_at(
    values_in_order: Sequence[tuple[int, Sequence[float] | None]],
    source: Sequence[float],
    objectives: Sequence[Mapping[str, Any]],
    tolerance: float = 0.05,
) -> int | None:
    """The first trial (number) whose values match a warm-start source's best.

    Matching is judged on the objectives that measure the configuration rather than the hardware
    (all but throughput, tokens_per_s, peak_mem_mb and scaling_efficiency, unless only those are
    objectives): within `tolerance` (relative) of the source's value, or better."""
    idx = [i for i, o in enumerate(objectives) if o["metric"] not in HARDWARE_METRICS] or list(
        range(len(objectives))
    )
    for number, vals in values_in_order:
        if vals is None:
            continue
        ok = True
        for i in idx:
            x, s = float(vals[i]), float(source[i])
            if not (math.isfinite(x) and math.isfinite(s)):
                ok = False
                break
            slack = tolerance * abs(s)
            if objectives[i]["direction"] == "minimize" and x > s + slack:
                ok = False
            if objectives[i]["direction"] == "maximize" and x < s - slack:
                ok = False
        if ok:
            return number
    return None
