"""The probe's instrumented loop against a bare PyTorch loop of the same model, batch, precision.

Both loops train the same workload from the same seed with AdamW, the same clipping (off by
default) and the same micro-batches, in the same process, alternating A/B/A/B so that machine
noise hits both alike. Throughput is samples over the wall time of the training loop only (model
build and data generation excluded); for the probe that is from its `start` report to its last
`telemetry` report, so its per-chunk telemetry fetch, divergence checks and reports are counted.

    python benchmarks/probe_overhead.py                       # the defaults recorded in RESULTS.md
    python benchmarks/probe_overhead.py --workload tiny_gpt --size small --steps 300
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

import torch

from autotune.probe import (
    ProbeConfig,
    build_optimizer,
    build_scaler,
    pick_device,
    resolve_knobs,
    run_probe,
    seed_everything,
)
from autotune.probe.workload import resolve


def bare_loop(cfg: ProbeConfig) -> float:
    """The loop a user would write: no telemetry, no checks. Returns samples per second."""
    device = pick_device(cfg.device)
    workload = resolve(cfg.workload, cfg.size)
    k = resolve_knobs(cfg.knobs, workload.default_lr)
    seed_everything(cfg.seed)
    model = workload.build_model().to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(params, k, device)
    fp16 = cfg.precision == "fp16"
    scaler = build_scaler(k, device, enabled=fp16)
    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.precision)
    data = workload.batches(cfg.micro_batch, cfg.seed)
    clip = float(k["clip_norm"])
    samples = 0
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(cfg.steps):
        batch = tuple(t.to(device) for t in next(data))
        with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
            loss = workload.loss(model, batch)
        scaler.scale(loss).backward()
        if clip > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        samples += workload.samples(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return samples / (time.perf_counter() - t0)


def probe_loop(cfg: ProbeConfig) -> float:
    """The probe, timed from its start report to its last telemetry report."""
    marks: dict[str, float] = {}

    def report(msg: dict[str, Any]) -> None:
        if msg["event"] == "start":
            marks["start"] = time.perf_counter()
        elif msg["event"] == "telemetry":
            marks["end"] = time.perf_counter()

    result = run_probe(cfg, report)
    if result["status"] != "ok":
        raise SystemExit(f"the probe did not run cleanly: {result['status']}")
    return result["samples_per_step"] * result["steps_run"] / (marks["end"] - marks["start"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", default="tiny_gpt")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--clip", type=float, default=0.0, help="clip_norm for both loops")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    cfg = ProbeConfig(
        workload=args.workload,
        size=args.size,
        steps=args.steps,
        micro_batch=args.micro_batch,
        precision=args.precision,
        knobs={"clip_norm": args.clip},
    )
    bare_loop(ProbeConfig(**{**cfg.to_dict(), "steps": 20}))  # warm up allocator and caches
    bare, probe = [], []
    for i in range(args.repeats):
        bare.append(bare_loop(cfg))
        probe.append(probe_loop(cfg))
        print(
            f"  repeat {i + 1}: bare {bare[-1]:.1f} samples/s, probe {probe[-1]:.1f} samples/s",
            file=sys.stderr,
        )
    ratios = [p / b for p, b in zip(probe, bare, strict=True)]
    out = {
        "workload": f"{args.workload} ({args.size})",
        "steps": args.steps,
        "micro_batch": args.micro_batch,
        "precision": args.precision,
        "clip_norm": args.clip,
        "threads": args.threads,
        "repeats": args.repeats,
        "bare_median": statistics.median(bare),
        "probe_median": statistics.median(probe),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} "
        "torch thread(s)",
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"{out['workload']}, {args.precision}, {args.steps} steps x {args.micro_batch}: "
            f"bare {out['bare_median']:.1f} samples/s, probe {out['probe_median']:.1f} "
            f"samples/s, ratio {out['ratio_median']:.3f} "
            f"(min {out['ratio_min']:.3f}, max {out['ratio_max']:.3f}, {args.repeats} repeats)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
