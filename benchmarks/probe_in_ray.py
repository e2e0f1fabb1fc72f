"""Where a probe inside a study loses its ~6%: the same probe, interleaved in rounds, run
(a) by this process forked from its own zygote, no Ray in the path (the trial's own launcher,
`run_trial_process`), (b) as a Ray task on a local Ray started as a study starts it, forked by
the worker's zygote (how every phase of a study runs a probe: the screen too since it no longer
runs on Ray Tune), and (c) `run_probe` in this process (the direct loop of `study_overhead.py`).
Each is timed by the probe's own clock (`summary.wall_s`, the training loop's wall time:
process start and exit apart), the figure `study_overhead.py` compares.

    python benchmarks/probe_in_ray.py                 # tiny_gpt tiny, 1000 steps, 4 rounds
    python benchmarks/probe_in_ray.py --steps 2000 --rounds 6 --json results/probe_in_ray.json

If (b) matches (a), the Ray worker's environment is not what slows a probe inside a study;
what is left is the study's own driver work (Optuna, MLflow) beside it. (Until 2026-12-07 it
also ran (d), a one-trial Ray Tune run of the screen's trainable; RESULTS.md keeps its figures.)
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

import yaml

from autotune import space as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_overhead import make_space

TIMEOUT_S = 600.0


def probe_wall(out: dict[str, Any]) -> float:
    """The probe's own wall time from a `run_trial_process` result (raises when it failed)."""
    summary = out.get("summary") or {}
    if out.get("outcome") not in (None, "complete", "ok") and not summary:
        raise RuntimeError(f"the probe failed: {out.get('outcome')}: {out.get('error')}")
    return float(summary["wall_s"])


def direct(cfg: dict[str, Any]) -> float:
    from autotune.process.launcher import run_trial_process

    return probe_wall(run_trial_process(cfg, {}, timeout_s=TIMEOUT_S, threads=1, spare=True))


def in_process(cfg: dict[str, Any]) -> float:
    """`run_probe` in this process, as `study_overhead.py`'s direct loop runs it."""
    from autotune.probe import ProbeConfig, run_probe

    torch_threads(1)
    return float(run_probe(ProbeConfig.from_dict(cfg))["wall_s"])


def torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def as_task(ray: Any, cfg: dict[str, Any]) -> float:
    from autotune.study.workers import probe_task

    task = ray.remote(num_cpus=1)(probe_task)
    return probe_wall(ray.get(task.remote(cfg, {}, TIMEOUT_S, 1, True)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)

    from autotune.study.session import init_ray

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "space.yaml"
        path.write_text(yaml.safe_dump(make_space(2, "tiny_gpt", "tiny", args.steps)))
        space = sp.load(path)
        cfg = sp.probe_config(space, knobs=space.baseline_knobs()).to_dict()
        ray = init_ray(None, Path(tmp) / "study")
        ways = {"direct (own zygote, no Ray)": lambda r: direct(cfg),
                "in this process (run_probe)": lambda r: in_process(cfg),
                "Ray task (worker's zygote)": lambda r: as_task(ray, cfg)}  # fmt: skip
        walls: dict[str, list[float]] = {k: [] for k in ways}
        for way in ways.values():  # untimed: each path's zygote pays its imports once
            way(-1)
        t0 = time.time()
        for r in range(args.rounds):
            names = list(ways)  # each way takes each place in the round in turn
            order = names[r % len(names) :] + names[: r % len(names)]
            for k in order:
                walls[k].append(ways[k](r))
            print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in walls.items()),
                  file=sys.stderr)  # fmt: skip
        ray.shutdown()
    base = statistics.mean(walls[next(iter(walls))])
    out = {
        "steps": args.steps,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "load_average_end": os.getloadavg(),
        "wall_s": round(time.time() - t0, 1),
        "walls_s": walls,
        "ratio_to_direct": {k: statistics.mean(v) / base for k, v in walls.items()},
    }
    for k, v in walls.items():
        print(f"{k:>38}: mean {statistics.mean(v):.2f} s  x{out['ratio_to_direct'][k]:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
