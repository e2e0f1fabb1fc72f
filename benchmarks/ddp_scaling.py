"""Throughput of a DDP probe at world size 2 against one process, on the CPU with gloo.

Each repeat runs the probe with `probe.world_size` processes and `probe.measure_scaling`, which
then times one process at the same per-process micro-batch and thread count (weak scaling:
two processes train on twice the samples per step). Efficiency = throughput(N) / (N x
throughput(1)); 1.0 means the second process costs nothing. The probe's throughput is samples
over the median steady step time, so process start-up and the evaluation are not counted.

    python benchmarks/ddp_scaling.py                    # the defaults: mlp small, 200 steps x 64
    python benchmarks/ddp_scaling.py --size medium --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch

from autotune.probe import ProbeConfig
from autotune.process.entry import run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--size", default="small")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--micro-batch", type=int, default=64, help="per process")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    cfg = ProbeConfig(
        workload=args.workload,
        size=args.size,
        steps=args.steps,
        micro_batch=args.micro_batch,
        device="cpu",
        threads=args.threads * args.world_size,  # shared out: args.threads per process
        world_size=args.world_size,
        measure_scaling=True,
    )
    ones, ns, effs = [], [], []
    t0 = time.perf_counter()
    for i in range(args.repeats):
        r = run(cfg)
        s, eff = r["scaling"], r["metrics"]["scaling_efficiency"]
        if r["status"] != "ok" or eff is None:
            print(f"repeat {i}: status {r['status']}, scaling {s}", file=sys.stderr)
            return 1
        ones.append(s["throughput_1"])
        ns.append(s["throughput_n"])
        effs.append(eff)
        print(
            f"repeat {i}: 1 process {s['throughput_1']:.0f}/s, {args.world_size} processes "
            f"{s['throughput_n']:.0f}/s, efficiency {eff:.3f}",
            file=sys.stderr,
        )
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, gloo, {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    command = "python benchmarks/ddp_scaling.py" + (
        " " + " ".join(sys.argv[1:]) if argv is None and sys.argv[1:] else ""
    )
    what = (
        f"{args.workload} {args.size}, {args.steps} steps x {args.micro_batch} per process, "
        f"{args.threads} thread(s) per process"
    )
    print(
        "| command | 1 process (samples/s, median) | N processes (samples/s, median) "
        "| efficiency (median, min–max) |"
    )
    print("|---|---|---|---|")
    print(
        f"| `{command}` ({what}, N = {args.world_size}) | {statistics.median(ones):.0f} "
        f"| {statistics.median(ns):.0f} | **{statistics.median(effs):.2f}** "
        f"({min(effs):.2f}–{max(effs):.2f}) |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
