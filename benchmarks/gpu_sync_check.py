"""Run one probe on a GPU and count the host synchronisations it makes (part of gpu_check.sh).

    python benchmarks/gpu_sync_check.py --precision fp16 [--steps 300] [--workload tiny_gpt]

torch's sync debug mode warns on every operation that waits for the device. The probe fetches
its telemetry every `telemetry_every` steps (and the first max(3, ceil(0.1*steps)) steps one by
one, to stop an early divergence at once): inside its step loop it should synchronise once per
fetch and never more. Outside the loop it synchronises too, once per run: `model.to(device)`
copies each parameter tensor from pageable host memory (one sync each), and the untrained
model's held-out loss is read once. The script prints one line: the syncs counted inside the
step loop against the fetches the schedule makes, those outside it, the sum of the probe's step
times (CUDA events) against the wall time of the run, and the outcome; with `--where`, the
lines that synchronised. It exits 1 when the loop synchronises more often than the schedule
fetches, or the probe did not complete. Measured on an H200: benchmarks/RESULTS.md, "GPU check".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from collections import Counter
from typing import Any

import torch

from autotune.probe import ProbeConfig, run_probe
from autotune.probe.metrics import throughput_warmup_steps
from autotune.probe.telemetry import fetch_after


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workload", default="tiny_gpt")
    ap.add_argument("--size", default="small")
    ap.add_argument("--where", action="store_true", help="also name the lines that synchronise")
    ap.add_argument(
        "--profile", type=int, default=0, help="then profile this many steps: the top ops"
    )
    args = ap.parse_args()
    if args.steps < 1 or args.profile < 0:
        ap.error("--steps must be >= 1 and --profile >= 0")
    if not torch.cuda.is_available():
        print("no CUDA/ROCm device: nothing to check", file=sys.stderr)
        return 2
    cfg = ProbeConfig(
        workload=args.workload,
        size=args.size,
        steps=args.steps,
        micro_batch=32,
        precision=args.precision,
        device="cuda",
        knobs={"clip_norm": 1.0, "warmup_steps": 20},
    )
    run_probe(ProbeConfig(**{**cfg.to_dict(), "steps": 20}))  # warm the kernels and allocator
    sites: Counter[str] = Counter()
    in_loop = [0]

    def seen(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if "synchroniz" in str(message).lower():
            stack = traceback.extract_stack()[:-1]
            sites[_site(stack)] += 1
            in_loop[0] += any(_is_step_loop(f) for f in stack)

    torch.cuda.set_sync_debug_mode("warn")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = seen  # called while the op runs: its stack is the caller's
        result = run_probe(cfg)
    wall = time.perf_counter() - t0
    torch.cuda.set_sync_debug_mode(0)
    syncs = sum(sites.values())
    steps = len(result["series"]["loss"])
    expected = _fetches(steps, cfg.telemetry_every)
    step_sum = float(sum(t for t in result["series"].get("step_time", []) if t == t))
    line = {
        "precision": args.precision,
        "status": result["status"],
        "steps": steps,
        "loop_syncs": in_loop[0],
        "fetches": expected,
        "outside_loop_syncs": syncs - in_loop[0],
        "loop_syncs_per_step": round(in_loop[0] / max(1, steps), 3),
        "step_time_sum_s": round(step_sum, 3),
        "wall_s": round(wall, 3),
        "throughput": result["metrics"].get("throughput"),
        "final_scale": result["metrics"].get("final_scale"),
    }
    if args.where:
        line["where"] = dict(sites.most_common(12))
    print(json.dumps(line))
    if args.profile:
        _profile(ProbeConfig(**{**cfg.to_dict(), "steps": args.profile}))
    return 0 if in_loop[0] <= expected and result["status"] == "ok" else 1


def _fetches(steps: int, every: int) -> int:
    """How many times the probe's step loop fetches its telemetry over `steps` steps (its own
    rule, `autotune.probe.telemetry.fetch_after`)."""
    early = throughput_warmup_steps(steps)
    return sum(fetch_after(s, steps, every, early) for s in range(steps))


def _is_step_loop(frame: traceback.FrameSummary) -> bool:
    return frame.name == "_train" and frame.filename.replace("\\", "/").endswith("probe/loop.py")


def _site(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame of autotune's or a workload's code on `stack`."""
    for frame in reversed(stack):
        name = frame.filename.replace("\\", "/")
        for root in ("/autotune/", "/workloads/", "/benchmarks/"):
            if root in name and "gpu_sync_check" not in name:
                return f"{root.strip('/')}/{name.split(root, 1)[1]}:{frame.lineno} {frame.name}"
    return "outside autotune"


def _profile(cfg: ProbeConfig) -> None:
    """The probe's top ops by self CPU time and by CUDA time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_probe(cfg)
    table = prof.key_averages()
    for key in ("self_cpu_time_total", "self_device_time_total"):
        print(f"top ops by {key} over {cfg.steps} steps")
        print(table.table(sort_by=key, row_limit=15, max_name_column_width=50))


if __name__ == "__main__":
    sys.exit(main())
