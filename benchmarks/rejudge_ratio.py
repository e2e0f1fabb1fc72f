"""Re-judge recorded quality comparisons by the rule the tool now judges with.

`compute_at_scale.py` and `migrate_retune.py` call a pick "as good" as another when it is not
measurably worse over the same fresh seeds. They judged that by the raw per-seed difference
until the tool's own paired verdict (`autotune.recipe.paired`) moved to the per-seed log ratio
for positive metrics (final loss, noise_per_drop, ...). This reads their recorded per-seed
values (no probe is run) and judges them both ways, side by side:

    python benchmarks/rejudge_ratio.py                      # the results/ files below
    python benchmarks/rejudge_ratio.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import _common as c

RESULTS = Path(__file__).resolve().parent / "results"
AT_SCALE = (
    "compute_at_scale.json",
    "compute_at_scale_mlp_rerun.json",
    "compute_at_scale_tiny_gpt.json",
)
RETUNE = ("migrate_retune.json", "migrate_retune_5seeds.json")


def _verdicts(xs: Sequence[float | None], ys: Sequence[float | None]) -> dict[str, Any]:
    j = c.judged_pair(xs, ys)
    d = j["diff"]
    return {
        "n": d.get("n"),
        "diff": d,
        "ratio": j["ratio"],
        "worse_by_difference": d.get("low") is not None and d["low"] > 0,
        "worse_by_ratio": j["worse"],
    }


def at_scale(data: Mapping[str, Any], source: str) -> list[dict[str, Any]]:
    """Each strategy's pick against full length's over the fresh seeds, per metric."""
    rows = []
    for case in data.get("results") or []:
        strategies = case.get("strategies") or {}
        ref = (strategies.get("full") or {}).get("fresh")
        for name, s in strategies.items():
            q = s.get("fresh")
            if name == "full" or q is None or ref is None:
                continue
            row: dict[str, Any] = {"source": source, "case": case.get("case"), "who": name}
            if q["number"] == ref["number"]:
                rows.append({**row, "same_config": True})
                continue
            for m in ("final_loss", case.get("stability")):
                row[m] = _verdicts([r.get(m) for r in q["seeds"]], [r.get(m) for r in ref["seeds"]])
            row["infeasible_ok"] = q["infeasible"] <= ref["infeasible"]
            rows.append(row)
    return rows


def retune(data: Mapping[str, Any], source: str) -> list[dict[str, Any]]:
    """Each sampler seed's re-tuned pick against the cold study's pick, per metric."""
    rows = []
    for r in data.get("rows") or []:
        cold, re = r.get("cold_quality"), r.get("retune_quality")
        if not cold or not re:
            continue
        row: dict[str, Any] = {"source": source, "case": f"sampler seed {r.get('seed')}"}
        row["who"] = "re-tune"
        for m in ("final_loss", "noise_per_drop"):
            if isinstance(cold.get(m), list):
                row[m] = _verdicts(re[m], cold[m])
        rows.append(row)
    return rows


def _text(v: Mapping[str, Any] | None) -> str:
    if not v:
        return "-"
    d, ratio = v["diff"], v["ratio"]
    by_d = "worse" if v["worse_by_difference"] else "not worse"
    if ratio is None or ratio.get("low") is None:
        return f"{d['mean']:+.3g} [{c.fmt(d['low'])}, {c.fmt(d['high'])}]: {by_d} / no ratio"
    by_r = "**worse**" if v["worse_by_ratio"] else "not worse"
    return (
        f"{d['mean']:+.3g} [{c.fmt(d['low'])}, {c.fmt(d['high'])}]: {by_d}; "
        f"x{ratio['mean']:.3g} [x{ratio['low']:.3g}, x{ratio['high']:.3g}]: {by_r}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for name in AT_SCALE:
        if (RESULTS / name).exists():
            rows += at_scale(json.loads((RESULTS / name).read_text()), name)
    for name in RETUNE:
        if (RESULTS / name).exists():
            rows += retune(json.loads((RESULTS / name).read_text()), name)
    table = []
    for r in rows:
        if r.get("same_config"):
            table.append([r["source"], r["case"], r["who"], "the same configuration", "", ""])
            continue
        metrics = [k for k in r if isinstance(r[k], dict)]
        stab = next((m for m in metrics if m != "final_loss"), None)
        changed = any(r[m]["worse_by_difference"] != r[m]["worse_by_ratio"] for m in metrics)
        table.append(
            [
                r["source"],
                r["case"],
                r["who"],
                _text(r.get("final_loss")),
                f"{stab}: {_text(r.get(stab))}" if stab else "-",
                "**changed**" if changed else "same",
            ]
        )
    head = ["results", "case", "pick", "final_loss: difference; ratio", "stability", "verdict"]
    print(c.table(head, table))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"benchmark": "rejudge_ratio", "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
