"""What rungs cost a study of a user's training script (issue 25): the shipped examples
(`examples/plain_loop`, `examples/hf_trainer`, `examples/lightning`: 8 trials at 100 steps, a
300-step target, 2 candidates x 2 seeds verified) run as `autotune study` runs them, three ways
on the same sampler seed, one after another in this one run:

- `continued`: as shipped; a promoted probe continues its shorter probe through the script's state
  hook (`trial.resume`, `hf.attach`, `lt.ckpt_path`);
- `restart`: `rungs.continuation: false`, every promoted probe from step 0 (what a script without
  the hook costs, and what every script cost before the hook);
- `full`: every trial at the target (`probe.steps` = `budget.target_steps`: no rungs), then the
  same verification: what a study without rungs costs.

Per study: the samples it trained on (`autotune show --json`'s `compute.total`, measured from its
records), its wall time (the whole `autotune study` command: Ray and MLflow start included), how
many promoted probes continued, its pick. Samples are exact; wall times on a shared machine are
not (read them as a direction). Each study runs in its own temporary folder (local Ray, SQLite).

    python benchmarks/script_rungs.py [--examples plain_loop hf_trainer] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pick_vs_defaults as pvd  # its `autotune` runs the CLI (this folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("plain_loop", "hf_trainer", "lightning")
ARMS: dict[str, list[str]] = {
    "continued": [],
    "restart": ["--set", "rungs.continuation=false"],
    "full": ["--set", "probe.steps=300"],
}


def run_study(example: str, arm: str, seed: int) -> dict[str, Any]:
    """One `autotune study` of `example` in arm `arm`; its compute, wall and pick."""
    space = ROOT / "examples" / example / "space.yaml"
    with tempfile.TemporaryDirectory(prefix=f"script-rungs-{example}-{arm}-") as tmp:
        t0 = time.perf_counter()
        args = ["study", "--space", str(space), "--seed", str(seed), *ARMS[arm]]
        done = pvd.autotune(args, Path(tmp), 3600)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"{example}/{arm}: exit {done.returncode}\n{done.stdout[-3000:]}")
        shown = pvd.autotune(["show", example, "--json"], Path(tmp), 600)
        if shown.returncode != 0:
            raise RuntimeError(f"{example}/{arm}: show exit {shown.returncode}\n{shown.stderr}")
        summary = json.loads(shown.stdout)
    compute = summary.get("compute") or {}
    rungs = summary.get("rungs") or []
    return {
        "example": example,
        "arm": arm,
        "wall_s": round(wall, 1),
        "samples": compute.get("total"),
        "screen": compute.get("screen"),
        "rungs": compute.get("rungs"),
        "verification": compute.get("verification"),
        "continued": sum(int(r.get("continued") or 0) for r in rungs[1:]),
        "promoted": sum(int(r.get("trials") or 0) for r in rungs[1:]),
        "pick": (summary.get("pick") or {}).get("number"),
        "verdict": (summary.get("pick") or {}).get("verdict"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", nargs="+", default=list(EXAMPLES), choices=EXAMPLES)
    ap.add_argument("--seed", type=int, default=0, help="the sampler seed of every study")
    ap.add_argument("--json", type=Path, help="write the rows there")
    args = ap.parse_args()
    rows = []
    for example in args.examples:
        for arm in ARMS:
            print(f"{example} / {arm} ...", file=sys.stderr, flush=True)
            rows.append(run_study(example, arm, args.seed))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    head = "example | arm | samples | vs full | rungs | continued | wall s | vs full | pick"
    print(f"| {head} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        full = next(x for x in rows if x["example"] == r["example"] and x["arm"] == "full")
        ratio = r["samples"] / full["samples"] if full["samples"] else float("nan")
        print(
            f"| {r['example']} | {r['arm']} | {r['samples']:,} | {ratio:.2f} | {r['rungs']:,} | "
            f"{r['continued']} of {r['promoted']} | {r['wall_s']} | "
            f"{r['wall_s'] / full['wall_s']:.2f} | trial {r['pick']} ({r['verdict']}) |"
        )
    if args.json:
        meta = {"load_avg": os.getloadavg(), "cpus": os.cpu_count(), "when": time.time()}
        args.json.write_text(json.dumps({"rows": rows, "machine": meta}, indent=1))


if __name__ == "__main__":
    main()
