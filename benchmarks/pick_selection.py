"""How often the study's paired verdict reads `better` for a pick that is no different from the
defaults, when the pick was chosen among k verified configurations on the same seeds, with the
k counted in the verdict's error (as a study does) and without (as before).

The verdict (`autotune.recipe.paired.compare`) shares a 5% error over the metrics it compares
(README, "The pick against the defaults"): for a configuration fixed in advance, it reads
`better` or `worse` when nothing differs at most ~5% of the time, `better` about half of that.
A study verifies its `verify.top_k` best candidates (3 by default) on the same seeds as the
baseline and compares the one it picks, so the pick is the luckiest of k on those seeds. This
script measures what that selection does to the verdict, with the verdict's own code:

- every configuration and the baseline draw the same distribution (nothing differs): at each
  seed a part shared by every configuration (the seed's data order and initialisation, what the
  pairing removes) and a part of their own, on the log scale (`--shared` is the shared part's
  share of the variance);
- k candidates and the baseline run the seeds; the pick is the candidate with the lowest mean
  final loss over them (what the balanced pick reduces to with one objective; with several, the
  pick is chosen on them together);
- `paired.compare(pick, baseline)` over the final loss alone, and over the final loss and two
  other objectives that differ in nothing either (3 metrics), once with `chosen_from=k` (each
  interval at 1 - 0.05 / (m k), what a study's verdict does: `study/verdict.py`) and once with
  the k uncounted (1 - 0.05 / m; a configuration fixed in advance, `autotune verify`).

Reported per (seeds, k, metrics, counted): the share of draws whose verdict is `better` and
`worse`, each with its 95% Wilson interval. Pure computation: no study, Ray or MLflow runs.

    python benchmarks/pick_selection.py                 # 3000 draws per row (~1 min)
    python benchmarks/pick_selection.py --draws 500 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
from typing import Any

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


def draw(rng: random.Random, seeds: int, k: int, m: int, shared: float) -> tuple[str, str]:
    """One study's verdicts for its pick among `k` candidates no different from the baseline:
    with the k counted, and uncounted."""
    names = [name for name, _ in OBJECTIVES[:m]]
    seed_part = [{n: rng.gauss(0.0, math.sqrt(shared)) for n in names} for _ in range(seeds)]

    def config() -> list[dict[str, float]]:
        own = math.sqrt(1.0 - shared)
        return [
            {n: 0.1 * math.exp(seed_part[i][n] + rng.gauss(0.0, own)) for n in names}
            for i in range(seeds)
        ]

    base = config()
    cands = [config() for _ in range(k)]
    pick = min(cands, key=lambda c: sum(math.log(r["final_loss"]) for r in c))
    mine, theirs = runs(pick, names), runs(base, names)
    counted = paired.compare(mine, theirs, OBJECTIVES[:m], chosen_from=k)["verdict"]
    return str(counted), str(paired.compare(mine, theirs, OBJECTIVES[:m])["verdict"])


def wilson(hits: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of the share hits / n."""
    z = 1.96
    p = hits / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


def _row(said: list[str], seeds: int, k: int, m: int, counted: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"seeds": seeds, "k": k, "metrics": m, "k_counted": counted}
    row["draws"] = len(said)
    for v in ("better", "worse"):
        hits = said.count(v)
        row[v] = hits / len(said)
        row[f"{v}_interval"] = wilson(hits, len(said))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=3000, help="studies simulated per row")
    ap.add_argument("--seeds", default="3,5", help="verification seeds (comma-separated)")
    ap.add_argument("--k", default="1,2,3,5", help="candidates verified (comma-separated)")
    ap.add_argument("--shared", type=float, default=0.5, help="the seed's share of the variance")
    ap.add_argument("--rng", type=int, default=0, help="the simulation's random seed")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    if args.draws < 1 or not 0.0 <= args.shared < 1.0:
        ap.error("--draws must be >= 1 and --shared in [0, 1)")
    rng = random.Random(args.rng)
    rows = []
    print("seeds  k  metrics  k counted  better [95%]              worse [95%]")
    for n in (int(s) for s in args.seeds.split(",")):
        for k in (int(s) for s in args.k.split(",")):
            for m in (1, 3):
                both = [draw(rng, n, k, m, args.shared) for _ in range(args.draws)]
                for counted in (True, False) if k > 1 else (True,):
                    said = [pair[0 if counted else 1] for pair in both]
                    row = _row(said, n, k, m, counted)
                    rows.append(row)
                    b, w = row["better_interval"], row["worse_interval"]
                    print(
                        f"{n:5d} {k:2d} {m:8d}  {'yes' if counted else 'no':>9}  "
                        f"{row['better']:6.1%} [{b[0]:.1%}, {b[1]:.1%}]"
                        f"    {row['worse']:6.1%} [{w[0]:.1%}, {w[1]:.1%}]",
                        flush=True,
                    )
    if args.json:
        out = {
            "rows": rows,
            "shared": args.shared,
            "rng": args.rng,
            "python": platform.python_version(),
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
