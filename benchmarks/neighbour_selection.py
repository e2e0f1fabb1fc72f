"""How often `autotune migrate` says one of the recipe's Pareto neighbours holds (reads `better`
than PyTorch's defaults) when none is better (a false `holds`), and how often the one that is
better holds (the power), under three rules.

Migrate tries the neighbours nearest first, each over the recipe's seeds against the same
baseline runs, until one reads `better` (`autotune.migrate.neighbours.try_neighbours`): the first
of the j judged to do so, each with its own chance of reading `better` by luck. The simulation is
`pick_selection.py`'s (each configuration's log final loss at a seed: a part every configuration
shares at that seed plus a part of its own; `--shared` the first's share of the variance), with
the verdict's own code (`paired.compare`), over the final loss alone and over it and two other
objectives that differ in nothing:

- `shipped`: the first neighbour that reads `better` holds;
- `if needed`: one that reads `better` after j > 1 were judged, and would not with the error
  shared over the j too (`among=j`), runs again beside the defaults on as many fresh seeds and
  holds only when the verdict over all the seeds is `better`; else the next is tried (the rule
  a study's pick follows, `autotune.study.confirmed`);
- `every`: every one that reads `better` after j > 1 were judged runs again so (what migrate
  does: `autotune.migrate.neighbour_confirm`).

With `effect` > 0 the last of the k neighbours (the one tried last: the other k - 1 each had
their chance first) is better than the defaults by `effect` own-noise SDs; `holds (right one)`
counts the draws where it is that one that holds. Pure computation: nothing is trained.

    python benchmarks/neighbour_selection.py                 # 3000 draws per row (~20 min)
    python benchmarks/neighbour_selection.py --draws 300 --k 3 --effects 0
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

from pick_selection import (
    OBJECTIVES,
    Model,
    _list,
    cells,
    parse_model_args,
    runs,
    wilson,
    write_rows,
)

from autotune.recipe import paired

RULES = ("shipped", "if needed", "every")


def draw(
    rng: random.Random, seeds: int, k: int, m: int, shared: float, effect: float
) -> tuple[int | None, int | None, int | None]:
    """One migration's neighbours: which one holds under each rule (its index; None: none)."""
    model = Model(rng, m, shared)
    names, own, parts, config = model.names, model.own, model.parts, model.config
    first = parts(seeds)
    shifts = [effect * own if c == k - 1 else 0.0 for c in range(k)]
    base = config(0.0, first)
    cands = [config(shift, first) for shift in shifts]
    theirs = runs(base, names)
    objectives = OBJECTIVES[:m]
    verdicts = [str(paired.compare(runs(c, names), theirs, objectives)["verdict"]) for c in cands]
    shipped = next((j for j, v in enumerate(verdicts) if v == "better"), None)

    def confirmed(j: int) -> bool:
        fresh = parts(seeds)
        again = runs(cands[j] + config(shifts[j], fresh), names)
        every = runs(base + config(0.0, fresh), names)
        return bool(paired.compare(again, every, objectives)["verdict"] == "better")

    def first(always: bool) -> int | None:
        for j, verdict in enumerate(verdicts):
            if verdict != "better":
                continue
            mine = runs(cands[j], names)
            if j == 0 or (
                not always
                and paired.compare(mine, theirs, objectives, among=j + 1)["verdict"] == "better"
            ):
                return j
            if confirmed(j):
                return j
        return None

    return shipped, first(always=False), first(always=True)


def _row(said: list[int | None], key: dict[str, Any], right: int | None) -> dict[str, Any]:
    n = len(said)
    held = sum(1 for s in said if s is not None)
    row: dict[str, Any] = {**key, "draws": n, "holds": held / n, "holds_interval": wilson(held, n)}
    if right is not None:
        hits = said.count(right)
        row["right"] = hits / n
        row["right_interval"] = wilson(hits, n)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=3000, help="migrations simulated per row")
    ap.add_argument("--seeds", type=_list(int, 2), default="3", help="the recipe's seeds")
    ap.add_argument("--k", type=_list(int, 1), default="1,3,5", help="neighbours recorded")
    ap.add_argument(
        "--effects", type=_list(float, 0.0), default="0,4", help="the last one's gain (SDs)"
    )
    args = parse_model_args(ap, argv)
    rng = random.Random(args.rng)
    rows = []
    print("seeds  k  metrics  effect  rule       holds [95%]             the better one [95%]")
    for n, k, m, effect in cells(args):
        both = [draw(rng, n, k, m, args.shared, effect) for _ in range(args.draws)]
        right = k - 1 if effect > 0 else None
        for i, rule in enumerate(RULES if k > 1 else RULES[:1]):
            key = {"seeds": n, "k": k, "metrics": m, "effect": effect, "rule": rule}
            row = _row([pair[i] for pair in both], key, right)
            rows.append(row)
            h = row["holds_interval"]
            line = (
                f"{n:5d} {k:2d} {m:8d} {effect:7.1f}  {rule:9s} "
                f"{row['holds']:6.1%} [{h[0]:.1%}, {h[1]:.1%}]"
            )
            if right is not None:
                r = row["right_interval"]
                line += f"    {row['right']:6.1%} [{r[0]:.1%}, {r[1]:.1%}]"
            print(line, flush=True)
    write_rows(args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
