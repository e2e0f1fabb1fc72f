"""How often the study's paired verdict reads `better` for its pick when the pick was chosen
among k verified configurations on the same seeds: when nothing differs (a false `better`), and
when one candidate is truly better (the verdict's power), under four rules.

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
  other objectives that differ in nothing (3 metrics), under each rule:
  - `shipped`: as a configuration fixed in advance (each interval at 1 - 0.05/m);
  - `k counted`: the error shared over the k candidates too (1 - 0.05/(m k), `among=k`);
  - `confirmed`: a `better` among k > 1 is run again on as many fresh seeds, pick and baseline,
    and judged over all the seeds (anything else stands);
  - `if needed`: confirmed only where `k counted` does not already read `better`: what the
    study does (`autotune.study.confirmed`).

Reported per (seeds, k, metrics, effect, rule): the share of draws whose verdict is `better` (and
`worse`), each with its 95% Wilson interval. Pure computation: no study, Ray or MLflow runs.

    python benchmarks/pick_selection.py                 # 3000 draws per row (~8 min)
    python benchmarks/pick_selection.py --draws 500 --effects 0 --json out.json
"""

from __future__ import annotations

import argparse
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

RULES = ("shipped", "k counted", "confirmed", "if needed")
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


class Model:
    """The simulated runs: each configuration's value of each of the `m` metrics at a seed is
    0.1 x exp(a part every configuration shares at that seed, `shared` of the variance, plus a
    part of its own), the first metric lowered by a configuration's `shift`."""

    def __init__(self, rng: random.Random, m: int, shared: float) -> None:
        self.rng, self.shared = rng, shared
        self.names = [name for name, _ in OBJECTIVES[:m]]
        self.own = math.sqrt(1.0 - shared)

    def parts(self, n: int) -> list[dict[str, float]]:
        """The shared parts of `n` seeds."""
        sd = math.sqrt(self.shared)
        return [{name: self.rng.gauss(0.0, sd) for name in self.names} for _ in range(n)]

    def config(self, shift: float, seed_part: list[dict[str, float]]) -> list[dict[str, float]]:
        """One configuration's metrics at each of the seeds whose shared parts are given."""
        out = []
        for part in seed_part:
            noise = {n: self.rng.gauss(0.0, self.own) for n in self.names}
            noise[self.names[0]] -= shift
            out.append({n: 0.1 * math.exp(part[n] + noise[n]) for n in self.names})
        return out


def draw(
    rng: random.Random, seeds: int, k: int, m: int, shared: float, effect: float
) -> tuple[str, str, str, str]:
    """One study's verdicts for its pick among `k` candidates: as shipped, with k counted,
    confirmed (a `better` among k > 1 run again on as many fresh seeds, pick and baseline, and
    judged over all the seeds; anything else stands), and confirmed only where the k counted
    do not already read `better` (as the study does: `autotune.study.confirmed`)."""
    model = Model(rng, m, shared)
    names, own, parts, config = model.names, model.own, model.parts, model.config
    first = parts(seeds)
    shifts = [effect * own if c == 0 else 0.0 for c in range(k)]
    base = config(0.0, first)
    cands = [config(shift, first) for shift in shifts]
    i = min(range(k), key=lambda c: sum(math.log(r["final_loss"]) for r in cands[c]))
    mine, theirs = runs(cands[i], names), runs(base, names)
    shipped = str(paired.compare(mine, theirs, OBJECTIVES[:m])["verdict"])
    count = str(paired.compare(mine, theirs, OBJECTIVES[:m], among=k)["verdict"])
    confirmed = shipped
    if shipped == "better" and k > 1:
        fresh = parts(seeds)
        mine = runs(cands[i] + config(shifts[i], fresh), names)
        theirs = runs(base + config(0.0, fresh), names)
        confirmed = str(paired.compare(mine, theirs, OBJECTIVES[:m])["verdict"])
    needed = "better" if count == "better" else confirmed
    return shipped, count, confirmed, needed


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


def parse_model_args(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`ap`'s arguments with the model's (`--shared`, `--rng`, `--json`), parsed and checked."""
    ap.add_argument("--shared", type=float, default=0.5, help="the seed's share of the variance")
    ap.add_argument("--rng", type=int, default=0, help="the simulation's random seed")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    if args.draws < 1 or not 0.0 <= args.shared < 1.0:
        ap.error("--draws must be >= 1 and --shared in [0, 1)")
    return args


def cells(args: argparse.Namespace) -> Iterator[tuple[int, int, int, float]]:
    """Every (seeds, k, metrics, effect) the rows are drawn for, in order."""
    for n in args.seeds:
        for k in args.k:
            for m in (1, 3):
                for effect in args.effects:
                    yield n, k, m, effect


def write_rows(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """The rows, with the model's settings, to `--json` (when given)."""
    if args.json:
        out = {"rows": rows, "shared": args.shared, "rng": args.rng}
        out["python"] = platform.python_version()
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


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
    args = parse_model_args(ap, argv)
    rng = random.Random(args.rng)
    rows = []
    print("seeds  k  metrics  effect  rule      better [95%]              worse [95%]")
    for n, k, m, effect in cells(args):
        both = [draw(rng, n, k, m, args.shared, effect) for _ in range(args.draws)]
        for i, rule in enumerate(RULES if k > 1 else RULES[:1]):
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
    write_rows(args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
