"""What a rung's (or a verification seed's) probe pays to start on its Ray worker: a fresh
process (`python -m autotune.process.entry`, torch imported per probe) against a child forked by
the worker's zygote (torch imported once per worker), through the study's own job runner
(`autotune.study.workers.run_jobs`) on a local Ray.

Per probe: `start_s`, the seconds from asking for the probe's process to its `start` event
(`run_trial_process`), and the probe process's whole wall time. The two ways alternate, fresh
first, each in a Ray of its own (so that no worker or zygote is left from the other).

    python benchmarks/rung_start.py                 # 8 probes each way, mlp, 30 steps
    python benchmarks/rung_start.py --probes 4 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SPACE = """\
name: rung-start
workload: {{name: {workload}}}
probe: {{steps: {steps}, micro_batch: 8, threads: 1}}
budget: {{trials: 2, concurrency: 1}}
knobs:
  lr: 0.01
"""


def one_way(space: Any, probes: int, spare: bool) -> list[dict[str, Any]]:
    """`probes` probes through `run_jobs` in a Ray of their own; their records."""
    import ray

    from autotune import space as sp
    from autotune.study import workers

    temp = Path(tempfile.gettempdir()) / f"autotune-ray-{os.getuid()}"
    temp.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp))
    try:
        jobs = [workers.ProbeJob(i, sp.probe_config(space), {}) for i in range(probes)]
        out: list[dict[str, Any]] = []
        workers.run_jobs(space, ray, jobs, 600, lambda j, r, s: out.append(r), str, spare=spare)
    finally:
        ray.shutdown()
    for r in out:
        if r.get("outcome") != "complete":
            raise SystemExit(f"a probe failed: {r.get('cause')}: {r.get('error')}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--probes", type=int, default=8)
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from autotune import space as sp

    with tempfile.TemporaryDirectory(prefix="autotune-bench-") as tmp:
        path = Path(tmp) / "rung-start.yaml"
        path.write_text(SPACE.format(workload=args.workload, steps=args.steps))
        space = sp.load(str(path))
        result: dict[str, Any] = {"probes": args.probes, "load_before": os.getloadavg()[0]}
        for name, spare in (("fresh", False), ("zygote", True)):
            t0 = time.perf_counter()
            recs = one_way(space, args.probes, spare)
            starts = [float(r["start_s"]) for r in recs]
            result[name] = {
                "start_s": starts,
                "start_median_s": statistics.median(starts),
                "start_after_first_median_s": statistics.median(starts[1:] or starts),
                "process_s": sum(float(r["wall_s"]) for r in recs),
                "probe_s": sum(float(r["summary"]["wall_s"]) for r in recs),
                "wall_s": time.perf_counter() - t0,
                "forked": sum(1 for r in recs if r.get("zygote")),
            }
            print(f"  {name}: start_s {[round(s, 2) for s in starts]}", file=sys.stderr)
        result["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name in ("fresh", "zygote"):
            r = result[name]
            print(
                f"{name:>6}: start per probe median {r['start_median_s']:.2f} s (after the "
                f"first {r['start_after_first_median_s']:.2f} s), {r['forked']}/{args.probes} "
                f"forked; {args.probes} probe processes {r['process_s']:.1f} s, of which the "
                f"probes {r['probe_s']:.1f} s; all, with Ray's start {r['wall_s']:.1f} s"
            )
        print(f"load average {result['load_before']:.1f} before, {result['load_after']:.1f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
