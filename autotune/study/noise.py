"""When a difference between two trials beats its noise, and the order that follows from it.

A value measured with an interval (throughput and tokens_per_s carry one from each probe's own
step timings, `autotune.probe.metrics.throughput_interval`; a verified candidate's is its
interval over the seeds, `autotune.recipe.seeds`) differs from another only when their intervals
do not overlap, or (`separated`) when both were measured over at least `SEPARATED_MIN_RUNS`
runs and every run of one beats every run of the other: overlapping intervals are otherwise a
tie. A value without an interval (loss_cv, noise_per_drop, ... from one run) is compared as it
is.

Why the runs: a load spike on a busy machine slows one seed's run of a configuration several
fold, and the t-interval over three seeds then spans 20x and more, overlapping a configuration
that is twice as fast on every seed (a review: 29.9k, 33.1k and 10.8k samples/s against 63.7k,
56.8k and 63.3k read "within timing noise", and the slower one was picked). That every run of
one is faster than every run of the other is what a sceptical user checks; with three runs a
side, two configurations of the same speed show it by chance with probability 2/20 (either way),
and an outlier cannot make it up, only hide it.

Promotion (`autotune.study.rungs.promote`), the rungs' agreement and the picks
(`autotune.study.pick`) all order trials through this module:

* `better`: one trial beats another on one objective (beyond noise);
* `dominates` and `front`: Pareto dominance where a tie on an objective is "no worse";
* `within_noise`: an objective on which every trial's interval overlaps the best one's decides
  nothing among them (all tied): on a machine whose throughput noise exceeds the differences,
  the order is decided on stability and final loss;
* `order`: Pareto layer by layer (objectives within noise left out); within a layer, the knee
  distance (each objective scaled to [0, 1] over the layer) over the objectives on which some
  member beats another beyond noise, then (a tie on it) how much a member gives up in relative
  terms (`relative_shortfall`), then `Scored.tiebreak` (stability, then final loss), then the
  trial number;
* `fastest`: among the trials tied with the fastest, the stablest;
* `note`: what the summary says of it.

Pure: no Optuna, no Ray.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.knobs import HARDWARE_METRICS

Bounds = tuple[float, float]

STABILITY_FALLBACK = "noise_per_drop"
"""The stability metric of the tie-break in a space whose objectives are all hardware numbers."""

WITHIN_NOISE = "throughput differences are within timing noise: decided on stability and final loss"


@dataclass(frozen=True)
class Scored:
    """One trial as the orderings see it: its objective values, the interval of each (None: a
    value without one), and its tie-break key (smaller is better)."""

    number: int
    values: tuple[float, ...]
    bounds: tuple[Bounds | None, ...]
    tiebreak: tuple[float, ...] = ()
    #: Per objective, its runs where the interval is over runs of a timed metric (a verified
    #: candidate's seeds): the batch they were timed in and their values; None: none.
    runs: tuple[Runs | None, ...] = ()


#: Runs timed together: their batch (`autotune.recipe.seeds.timing_group`) and their values.
Runs = tuple[str, tuple[float, ...]]

#: Fewest runs a side for `separated`: 3 and 3 completely apart by chance is 2 in 20.
SEPARATED_MIN_RUNS = 3


def runs_of(verified: Mapping[str, Any] | None, metric: str) -> Runs | None:
    """The finite values of `metric` over a verified candidate's runs that completed (its
    `runs` from `autotune.recipe.seeds.summarize_seeds`), when they were all timed in one batch;
    None otherwise (no verification, or runs timed apart: a resumed verification)."""
    if not verified:
        return None
    groups: set[str | None] = set()
    values: list[float] = []
    for r in verified.get("runs") or []:
        if r.get("outcome") != "complete":
            continue
        raw = (r.get("metrics") or {}).get(metric)
        x = float(raw) if isinstance(raw, (int, float)) else math.nan
        if math.isfinite(x):
            groups.add(r.get("timing_group"))
            values.append(x)
    group = next(iter(groups)) if len(groups) == 1 else None
    return None if group is None else (group, tuple(values))


def separated(a: Scored, b: Scored, i: int) -> bool:
    """Every run of `a` on objective `i` lies beyond every run of `b`, or every run of `b` beyond
    every run of `a`: each with at least `SEPARATED_MIN_RUNS` runs, both timed in one batch
    (interleaved, under the same load; runs timed apart, as the baseline's beside the top rung
    and a candidate's in the verification, could be apart by the machine's load alone)."""
    ra = a.runs[i] if i < len(a.runs) else None
    rb = b.runs[i] if i < len(b.runs) else None
    if ra is None or rb is None or ra[0] != rb[0]:
        return False
    xa, xb = ra[1], rb[1]
    if min(len(xa), len(xb)) < SEPARATED_MIN_RUNS:
        return False
    return max(xa) < min(xb) or max(xb) < min(xa)


def bounds_of(
    metrics: Mapping[str, Any], metric: str, verified: Mapping[str, Any] | None = None
) -> Bounds | None:
    """The interval of `metric`: the verified one over seeds when `verified` has it (see
    `autotune.recipe.seeds.summarize_seeds`), else the run's own (`<metric>_low`,
    `<metric>_high` in its metrics); None when there is none or it is not finite."""
    iv = ((verified or {}).get("metrics") or {}).get(metric) if verified else None
    if verified is not None and iv and iv.get("mean") is not None:
        pair = (iv.get("low"), iv.get("high"))
    else:
        pair = (metrics.get(f"{metric}_low"), metrics.get(f"{metric}_high"))
    try:
        lo, hi = float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        return None
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and lo <= hi else None


def stability_index(objectives: Sequence[Mapping[str, Any]]) -> int | None:
    """The first objective that is not a hardware number (`HARDWARE_METRICS`); None when all
    are (a speed space)."""
    return next((i for i, o in enumerate(objectives) if o["metric"] not in HARDWARE_METRICS), None)


def tiebreak(
    objectives: Sequence[Mapping[str, Any]], value: Callable[[str, int | None], float]
) -> tuple[float, float]:
    """`(stability, final_loss)`, both smaller-is-better, NaN as +inf: the stability objective's
    value in its direction (`STABILITY_FALLBACK` when no objective measures stability), then the
    final loss. `value(metric, index)`: a trial's value of a metric (the objective's index, or
    None)."""
    i = stability_index(objectives)
    if i is None:
        stab = value(STABILITY_FALLBACK, None)
    else:
        stab = value(objectives[i]["metric"], i)
        stab = stab if objectives[i]["direction"] == "minimize" else -stab
    loss = value("final_loss", None)
    return (_inf(stab), _inf(loss))


SAME_REL = 1e-6
"""Values this close, relatively, are one value: a workload that ignores its seed gave
noise_per_drop 0.0490119158 to one trial and 0.0490119197 to the baseline (8e-8 apart, the
float arithmetic of two runs of the same numbers), and that decided the pick."""


def same(x: float, y: float) -> bool:
    """`x` and `y` equal within floating-point noise (`SAME_REL`), NaN equal to nothing."""
    return x == y or math.isclose(x, y, rel_tol=SAME_REL)


def _inf(x: float) -> float:
    return x if math.isfinite(x) else math.inf


def overlap(a: Bounds | None, b: Bounds | None) -> bool:
    """Both intervals exist and share a point."""
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def better(a: Scored, b: Scored, i: int, direction: str) -> bool:
    """`a` beats `b` on objective `i` beyond noise: a better value, and their intervals (when
    both have one) do not overlap. A NaN is beaten by any number and beats none."""
    x, y = a.values[i], b.values[i]
    if math.isnan(x) or math.isnan(y):
        return math.isnan(y) and not math.isnan(x)
    if same(x, y):  # rounding is no difference
        return False
    if overlap(a.bounds[i], b.bounds[i]) and not separated(a, b, i):
        return False
    return x < y if direction == "minimize" else x > y


def dominates(a: Scored, b: Scored, dirs: Sequence[str], ignore: Collection[int] = ()) -> bool:
    """`a` beats `b` on one objective and `b` beats `a` on none (beyond noise, `better`); the
    objectives `ignore` (within noise over the whole set, `within_noise`) are ties."""
    wins = False
    for i, d in enumerate(dirs):
        if i in ignore:
            continue
        if better(b, a, i, d):
            return False
        wins = wins or better(a, b, i, d)
    return wins


def front(
    rows: Sequence[Scored], dirs: Sequence[str], ignore: Collection[int] = ()
) -> list[Scored]:
    """The rows no other row dominates (`dominates`)."""
    out = [r for r in rows if not any(dominates(o, r, dirs, ignore) for o in rows if o is not r)]
    return out or list(rows)


def within_noise(rows: Sequence[Scored], i: int, direction: str) -> bool:
    """Whether objective `i` is within noise over `rows` as a whole: at least two rows, and
    every row's interval overlaps the interval of the best value's row (of each, when several
    share it; a row without an interval only when its value equals the best). Judged against
    the best, not pair by pair: of identical configurations timed on a busy machine two runs
    can miss each other's interval while both overlap the best's. Two rows `separated` on it
    (every run of one beyond every run of the other) are a difference, whichever is best."""
    if len(rows) < 2:
        return False
    if any(separated(a, b, i) for a in rows for b in rows if a is not b):
        return False
    top = max(_signed(r.values[i], direction) for r in rows)
    best = [r for r in rows if same(_signed(r.values[i], direction), top)]  # each, when equal
    return all(tied(r, b, i) for r in rows for b in best)


def tied(a: Scored, b: Scored, i: int) -> bool:
    """Equal on objective `i` (`same`), or within each other's interval and not `separated`."""
    if same(a.values[i], b.values[i]):
        return True
    return overlap(a.bounds[i], b.bounds[i]) and not separated(a, b, i)


def _signed(x: float, direction: str) -> float:
    if math.isnan(x):
        return -math.inf
    return -x if direction == "minimize" else x


def decides(rows: Sequence[Scored], i: int, direction: str) -> bool:
    """Whether objective `i` separates any two of `rows` beyond noise."""
    return any(better(a, b, i, direction) for a in rows for b in rows if a is not b)


def knee(rows: Sequence[Scored], dirs: Sequence[str], use: Sequence[int]) -> dict[int, float]:
    """Each row's distance to the ideal point over the objectives `use`, each scaled to [0, 1]
    over `rows` (0 = the best value among them; a non-finite value scales to 1, a column whose
    finite values are equal to 0)."""
    out = {r.number: 0.0 for r in rows}
    for i in use:
        col = [r.values[i] for r in rows if math.isfinite(r.values[i])]
        if not col:
            continue
        lo, hi = min(col), max(col)
        for r in rows:
            x = r.values[i]
            if not math.isfinite(x):
                scaled = 1.0
            elif same(hi, lo):
                scaled = 0.0
            else:
                scaled = (x - lo) / (hi - lo) if dirs[i] == "minimize" else (hi - x) / (hi - lo)
            out[r.number] += scaled * scaled
    return {n: math.sqrt(d) for n, d in out.items()}


def relative_shortfall(
    rows: Sequence[Scored], dirs: Sequence[str], use: Sequence[int]
) -> dict[int, float]:
    """Each row's distance to the best of `rows` on every objective of `use`, each as a share
    of that best (`|x - best| / |best|`; the plain difference when the best is 0; a non-finite
    value is infinitely short): how much it gives up, in relative terms. It breaks the knee's
    ties: on a layer of two members, each the best on one objective, both are at knee
    distance 1, however little one gives up and however much the other does."""
    out = {r.number: 0.0 for r in rows}
    for i in use:
        col = [r.values[i] for r in rows if math.isfinite(r.values[i])]
        if not col:
            continue
        best = min(col) if dirs[i] == "minimize" else max(col)
        for r in rows:
            x = r.values[i]
            short = abs(x - best) / abs(best) if best else abs(x - best)
            out[r.number] += short * short if math.isfinite(x) else math.inf
    return {n: math.sqrt(d) for n, d in out.items()}


def order(rows: Sequence[Scored], dirs: Sequence[str]) -> list[int]:
    """Trial numbers in the order to consider them (see the module docstring)."""
    ignore = {i for i, d in enumerate(dirs) if within_noise(rows, i, d)}
    left = list(rows)
    out: list[int] = []
    while left:
        layer = front(left, dirs, ignore)
        use = [i for i, d in enumerate(dirs) if i not in ignore and decides(layer, i, d)]
        dist, given_up = knee(layer, dirs, use), relative_shortfall(layer, dirs, use)
        key = functools.cmp_to_key(_by_tiebreak)
        layer.sort(key=lambda r: (dist[r.number], given_up[r.number], key(r)))
        out.extend(r.number for r in layer)
        taken = {r.number for r in layer}
        left = [r for r in left if r.number not in taken]
    return out


def _by_tiebreak(a: Scored, b: Scored) -> int:
    """`Scored.tiebreak`, then the trial number: values `same` within rounding are equal, so
    the lower number (the baseline, an earlier trial) is not beaten by rounding."""
    for x, y in zip(a.tiebreak, b.tiebreak, strict=False):
        if not same(x, y):
            return -1 if x < y else 1
    return a.number - b.number


def fastest(rows: Sequence[Scored], i: int) -> int:
    """The trial with the highest objective `i` (throughput); among those tied with it (`tied`)
    the one first by `Scored.tiebreak` (then the lowest number)."""
    best = max(rows, key=lambda r: (_signed(r.values[i], "maximize"), -r.number))
    tied_rows = [r for r in rows if tied(r, best, i)]
    return min(tied_rows, key=functools.cmp_to_key(_by_tiebreak)).number


def note(rows: Sequence[Scored], objectives: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The summary's `throughput_noise`: for the first hardware objective every row has an
    interval of, whether it is within noise over `rows` (`within_noise`), with `candidates`,
    the `range` of its values and the `message` to show when it is (else None). None when no
    such objective or fewer than two rows."""
    if len(rows) < 2:
        return None
    for i, o in enumerate(objectives):
        if o["metric"] not in HARDWARE_METRICS or any(r.bounds[i] is None for r in rows):
            continue
        within = within_noise(rows, i, o["direction"])
        vals = [r.values[i] for r in rows]
        lo, hi = min(vals), max(vals)
        message = None
        if within:
            message = WITHIN_NOISE.replace("throughput", o["metric"], 1)
            if lo > 0 and hi >= 1.25 * lo:  # far apart on the point values: say so
                message += (
                    f" (measured {lo:.3g} to {hi:.3g}, {hi / lo:.1f}x apart, each interval "
                    "overlapping the best's: re-time the candidates on a quiet machine, e.g. "
                    "`autotune verify` of each exported recipe, if speed matters)"
                )
        return {
            "metric": o["metric"],
            "within_noise": within,
            "candidates": len(rows),
            "range": [lo, hi],
            "message": message,
        }
    return None
