"""What the spare process costs the throughput objective.

During a study, when a trial's training loop starts, its Ray worker starts the next trial's spare
process, which imports torch at nice 19 beside the running trial (see `autotune/launcher.py`).
This measures the trial's throughput with and without that import running beside it: the same
probe, one torch thread, alternating alone / with a spare in one process, `--repeats` times each.
Reported: the median throughput of each and their ratio (with / alone). The import lasts a couple
of seconds; a short probe (the default here, ~5 s) is the worst case, a longer probe dilutes it.

    python benchmarks/spare_interference.py
    python benchmarks/spare_interference.py --steps 1000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from typing import Any

from autotune import launcher
from autotune import space as sp
from autotune.probe import ProbeConfig, run_probe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--space", default="gradclip")
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    space = sp.load(args.space, [f"probe.steps={args.steps}", "knobs.lr=0.003"])
    cfg = ProbeConfig.from_space(space)
    env = launcher.probe_env({}, threads=1)
    alone: list[float] = []
    beside: list[float] = []
    for i in range(args.repeats):
        for with_spare in (False, True):

            def report(msg: dict[str, Any], with_spare: bool = with_spare) -> None:
                if with_spare and msg.get("event") == "start":
                    launcher.start_spare(env)

            r = run_probe(cfg, report)
            launcher.discard_spare()
            (beside if with_spare else alone).append(r["metrics"]["throughput"])
            print(
                f"  {i + 1}/{args.repeats} {'with spare' if with_spare else 'alone     '}: "
                f"{r['metrics']['throughput']:.0f} samples/s",
                file=sys.stderr,
            )
    out = {
        "space": args.space,
        "steps": args.steps,
        "repeats": args.repeats,
        "alone_median": statistics.median(alone),
        "with_spare_median": statistics.median(beside),
        "ratio": statistics.median(beside) / statistics.median(alone),
        "ratios": [b / a for a, b in zip(alone, beside, strict=True)],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        r = out["ratios"]
        print(
            f"{args.space}, {args.steps} steps: alone {out['alone_median']:.0f}, with spare "
            f"{out['with_spare_median']:.0f} samples/s (medians); ratio {out['ratio']:.3f} "
            f"(pairs {min(r):.2f}-{max(r):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
