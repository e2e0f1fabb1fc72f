"""How often the study's paired verdict reads `better` for its pick when the pick was chosen
among k verified configurations on the same seeds: when nothing differs (a false `better`), and
when one candidate is truly better (the verdict's power), under the verdict as shipped and under
a rule that shares its error over the k candidates too (evaluated here, not shipped).

The verdict (`autotune.recipe.paired.compare`) shares a 5% error over the m metrics it compares
(README, "The pick against the defaults"): for a configuration fixed in advance it reads `better`
when nothing differs about 2.5% of the time. A study verifies its `verify.top_k` best candidates
(3 by default) on the same seeds as the baseline and compares the one it picks: the luckiest of k
on those seeds. This script measures what that selection does, with the verdict's own code:

- each configuration's log final loss at a seed is a part every configuration shares at that
  seed (its data order and initialisation, what the pairing removes; `--shared` is its share of
  the variance) plus a part of its own; the baseline and k - 1 candidates are the same
  distribution, and candidate 1 is lower by `effect` times the own part's standard deviation
  (0: nothing differs);
- the pick is the candidate with the lowest mean final loss over the seeds (what the balanced
  pick reduces to with one objective);
- `paired.compare(pick, baseline)` over the final loss alone, and over the final loss and two
  other objectives that differ in nothing (3 metrics), as shipped (each interval at 1 - 0.05/m)
  and with the k counted (1 - 0.05/(m k): `paired.FAMILY_ERROR` divided by k for that call).

Reported per (seeds, k, metrics, effect, rule): the share of draws whose verdict is `better` (and
`worse`), each with its 95% Wilson interval. Pure computation: no study, Ray or MLflow runs.

    python benchmarks/pick_selection.py                 # 3000 draws per row (~5 min)
    python benchmarks/pick_selection.py --draws 500 --effects 0 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import random
import sys
from collections.abc import Iterator
from typing import Any

from scipy.stats import binomtest

from autotune.recipe import paired
from autotune.recipe.seeds import summarize_seeds

OBJECTIVES = [("final_loss", "minimize"), ("noise_per_drop", "minimize"), ("loss_cv", "minimize")]


def runs(values: list[dict[str, float]], metrics: list[str]) -> dict[str, Any]:
    """One configuration's verification result over seeds 1..n, as a study records it."""
    rows = [
        {
            "seed": seed,
            "outcome": "complete",
            "summary": {"steps_run": 10, "steps_planned": 10, "metrics": m},
        }
        for seed, m in enumerate(values, 1)
    ]
    return summarize_seeds(rows, metrics=metrics)


@contextlib.contextmanager
def counted(k: int) -> Iterator[None]:
    """The verdict's shared error divided over `k` candidates as well, for the calls inside."""
    shipped = paired.FAMILY_ERROR
    paired.FAMILY_ERROR = shipped / k
    try:
        yield
    finally:
        paired.FAMILY_ERROR = shipped


def draw(
    rng: random.Random, seeds: int, k: int, m: int, shared: float, effect: float
) -> tuple[str, str]:
    """One study's verdicts for its pick among `k` candidates: as shipped, and with k counted."""
    names = [name for name, _ in OBJECTIVES[:m]]
    own = math.sqrt(1.0 - shared)
    seed_part = [{n: rng.gauss(0.0, math.sqrt(shared)) for n in names} for _ in range(seeds)]

    def config(shift: float) -> list[dict[str, float]]:
        return [
            {
                n: 0.1 * math.exp(seed_part[i][n] + rng.gauss(0.0, own) - (shift if j == 0 else 0))
                for j, n in enumerate(names)
            }
            for i in range(seeds)
        ]

    base = config(0.0)
    cands = [config(effect * own if c == 0 else 0.0) for c in range(k)]
    pick = min(cands, key=lambda c: sum(math.log(r["final_loss"]) for r in c))
    mine, theirs = runs(pick, names), runs(base, names)
    shipped = paired.compare(mine, theirs, OBJECTIVES[:m])["verdict"]
    with counted(k):
        count = paired.compare(mine, theirs, OBJECTIVES[:m])["verdict"]
    return str(shipped), str(count)


def wilson(hits: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of the share hits / n (SciPy's)."""
    ci = binomtest(hits, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def _row(said: list[str], key: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {**key, "draws": len(said)}
    for v in ("better", "worse"):
        hits = said.count(v)
        row[v] = hits / len(said)
        row[f"{v}_interval"] = wilson(hits, len(said))
    return row


def _list(kind: type, least: float) -> Any:
    """An argparse type: comma-separated values of `kind`, each at least `least`."""

    def parse(text: str) -> list[Any]:
        try:
            values = [kind(s) for s in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a list of {kind.__name__}") from None
        if any(v < least for v in values):
            raise argparse.ArgumentTypeError(f"{text!r}: each value must be at least {least}")
        return values

    return parse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=3000, help="studies simulated per row")
    ap.add_argument(
        "--seeds", type=_list(int, 2), default="3,5", help="verification seeds (comma-separated)"
    )
    ap.add_argument(
        "--k", type=_list(int, 1), default="1,3,5", help="candidates verified (comma-separated)"
    )
    ap.add_argument(
        "--effects",
        type=_list(float, 0.0),
        default="0,2,4",
        help="candidate 1's gain, in own-noise SDs",
    )
    ap.add_argument("--shared", type=float, default=0.5, help="the seed's share of the variance")
    ap.add_argument("--rng", type=int, default=0, help="the simulation's random seed")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    if args.draws < 1 or not 0.0 <= args.shared < 1.0:
        ap.error("--draws must be >= 1 and --shared in [0, 1)")
    rng = random.Random(args.rng)
    rows = []
    print("seeds  k  metrics  effect  rule      better [95%]              worse [95%]")
    for n in args.seeds:
        for k in args.k:
            for m in (1, 3):
                for effect in args.effects:
                    both = [draw(rng, n, k, m, args.shared, effect) for _ in range(args.draws)]
                    for i, rule in enumerate(("shipped", "k counted") if k > 1 else ("shipped",)):
                        key = {"seeds": n, "k": k, "metrics": m, "effect": effect, "rule": rule}
                        row = _row([pair[i] for pair in both], key)
                        rows.append(row)
                        b, w = row["better_interval"], row["worse_interval"]
                        print(
                            f"{n:5d} {k:2d} {m:8d} {effect:7.1f}  {rule:9s} "
                            f"{row['better']:6.1%} [{b[0]:.1%}, {b[1]:.1%}]"
                            f"    {row['worse']:6.1%} [{w[0]:.1%}, {w[1]:.1%}]",
                            flush=True,
                        )
    if args.json:
        out = {"rows": rows, "shared": args.shared, "rng": args.rng}
        out["python"] = platform.python_version()
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
