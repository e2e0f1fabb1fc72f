"""Run one probe on a GPU and count the host synchronisations it makes (part of gpu_check.sh).

    python benchmarks/gpu_sync_check.py --precision fp16 [--steps 300] [--workload tiny_gpt]

torch's sync debug mode warns on every operation that waits for the device. The probe fetches
its telemetry every `telemetry_every` steps (and the first max(3, ceil(0.1*steps)) steps one by
one, to stop an early divergence at once), so a probe without per-step syncs makes about
early + steps/telemetry_every of them, plus a few outside the loop. The script prints one line:
the syncs counted, that expectation, the sum of the probe's step times (CUDA events) against the
wall time of the loop, and the outcome. It exits 1 when syncs exceed half the steps.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings

import torch

from autotune.probe import ProbeConfig, run_probe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workload", default="tiny_gpt")
    ap.add_argument("--size", default="small")
    args = ap.parse_args()
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
    torch.cuda.set_sync_debug_mode("warn")
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_probe(cfg)
    wall = time.perf_counter() - t0
    torch.cuda.set_sync_debug_mode(0)
    syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
    steps = len(result["series"]["loss"])
    early = max(3, math.ceil(0.1 * steps))
    expected = early + math.ceil(steps / cfg.telemetry_every)
    step_sum = float(sum(t for t in result["series"].get("step_time", []) if t == t))
    line = {
        "precision": args.precision,
        "status": result["status"],
        "steps": steps,
        "host_syncs": syncs,
        "expected_at_most": expected,
        "syncs_per_step": round(syncs / max(1, steps), 3),
        "step_time_sum_s": round(step_sum, 3),
        "wall_s": round(wall, 3),
        "throughput": result["metrics"].get("throughput"),
        "final_scale": result["metrics"].get("final_scale"),
    }
    print(json.dumps(line))
    return 0 if syncs <= steps / 2 and result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
