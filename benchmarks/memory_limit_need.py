"""The memory a probe needs under `AUTOTUNE_PROBE_MEMORY_MB`, found by bisection: the
smallest N (MiB over the probe process's imports) under which one probe of the workload runs to
its end, per micro-batch, run length and way the probe process starts.

    python benchmarks/memory_limit_need.py                  # long_signal wide, batch 64
    python benchmarks/memory_limit_need.py --micro 16,64 --steps 10 --json results/x.json

Each probe is a process of its own, as a trial runs it (`run_trial_process`, one thread):
**fresh** (`python -m autotune.process.entry`: it imports, then limits itself) or **forked** by
a zygote that imported before it (a study's trial). The variable's promise (README, Migration:
"A recipe that does not transfer") is that N is the probe's own room, so the need depends on
the micro-batch and neither on the run's length nor on how the process started: the table
shows whether it does. A run that fails otherwise than by running out of memory stops the
benchmark.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import close_report, machine, say, table

from autotune.process.memory_limit import ENV

WORKLOAD = str(Path(__file__).resolve().parent / "workloads" / "long_signal.py") + ":make"
TIMEOUT_S = 900.0


def runs_to_its_end(cfg: dict[str, Any], mb: int, way: str) -> bool:
    """Whether the probe `cfg` ran to its end under N = `mb` MiB (False: out of memory)."""
    from autotune.process.launcher import run_trial_process
    from autotune.process.zygotes import discard_zygote

    out = run_trial_process(
        cfg,
        {},
        timeout_s=TIMEOUT_S,
        threads=1,
        spare=way == "forked",
        extra_env={ENV: str(mb)},
    )
    if way == "forked":
        if out.get("zygote") is None:
            raise RuntimeError("asked for a forked probe, got a fresh process")
        discard_zygote()  # the next N is another environment: another zygote
    outcome = str(out.get("outcome"))
    if outcome == "complete":
        return True
    if outcome == "oom":
        return False
    raise RuntimeError(f"the probe at {mb} MiB ended {outcome}: {out.get('error')}")


def need(cfg: dict[str, Any], way: str, lo: int, hi: int, resolution: int) -> dict[str, Any]:
    """Bisect N between `lo` (assumed too little) and `hi` (doubled until it fits): the need is
    in (low, high]."""
    tried: list[tuple[int, bool]] = []
    while not runs_to_its_end(cfg, hi, way):
        tried.append((hi, False))
        lo, hi = hi, hi * 2
        if hi > 1 << 16:
            raise RuntimeError("did not fit in 64 GiB")
    tried.append((hi, True))
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        ok = runs_to_its_end(cfg, mid, way)
        tried.append((mid, ok))
        lo, hi = (lo, mid) if ok else (mid, hi)
    return {"low_mb": lo, "high_mb": hi, "probes": len(tried), "tried": tried}


def case(args: argparse.Namespace, micro: int, steps: int, way: str) -> dict[str, Any]:
    """One row: the need of the workload at `micro` for `steps` steps, started `way`."""
    cfg = {
        "workload": args.workload,
        "size": args.size,
        "steps": steps,
        "micro_batch": micro,
        "knobs": {"accum_steps": args.batch // micro, "lr": 0.1},
        "threads": 1,
    }
    t0 = time.perf_counter()
    found = need(cfg, way, 0, args.hi, args.resolution)
    say(f"micro-batch {micro}, {steps} steps, {way}: +{found['low_mb'] + 1}-{found['high_mb']} MiB")
    wall = round(time.perf_counter() - t0, 1)
    return {"micro_batch": micro, "steps": steps, "way": way, **found, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", default=WORKLOAD, help="a workload reference")
    ap.add_argument("--size", default="wide")
    ap.add_argument("--batch", type=int, default=64, help="samples per optimizer step")
    ap.add_argument("--micro", default="16,32,64", help="micro-batches (each divides --batch)")
    ap.add_argument("--steps", default="10,120", help="run lengths")
    ap.add_argument("--ways", default="fresh,forked", help="fresh, forked or both")
    ap.add_argument("--hi", type=int, default=256, help="first N tried, MiB (doubled if short)")
    ap.add_argument("--resolution", type=int, default=4, help="MiB")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    micros = [int(x) for x in args.micro.split(",")]
    lengths = [int(x) for x in args.steps.split(",")]
    ways = [w.strip() for w in args.ways.split(",")]
    if any(w not in ("fresh", "forked") for w in ways):
        ap.error("--ways: fresh, forked")
    if any(m < 1 or args.batch % m for m in micros):
        ap.error(f"--micro: each must divide --batch {args.batch}")
    if any(n < 1 for n in lengths) or args.hi < 1 or args.resolution < 1:
        ap.error("--steps, --hi and --resolution must be >= 1")
    started, m = time.perf_counter(), machine()
    results = [case(args, mb, n, w) for mb in micros for n in lengths for w in ways]
    rows = [
        [r["micro_batch"], r["steps"], r["way"], f"+{r['low_mb'] + 1}-{r['high_mb']} MiB",
         r["probes"], r["wall_s"]]
        for r in results
    ]  # fmt: skip
    text = table(["micro-batch", "steps", "way", "needs (N)", "probes", "wall s"], rows)
    close_report(args.json, m, started, results, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
