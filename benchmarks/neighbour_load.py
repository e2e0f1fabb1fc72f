"""How much a probe slows when something else runs on the machine's other core(s).

The study-overhead benchmark found its probes ~6% slower inside a study than in a plain loop on
an otherwise idle 2-core machine, while Ray, the driver (Tune's loop, the MLflow writer logging
the previous trial) and Ray's own processes used a few percent of a core beside them. This
measures the machine's side of that: the same probe alone, and beside a process that keeps
another core busy a given share of the time (busy-waits, then sleeps), interleaved in rounds so
that a drifting machine moves every column alike.

    python benchmarks/neighbour_load.py                       # tiny_gpt, 1000 steps, 3 rounds
    python benchmarks/neighbour_load.py --shares 0.1 0.5 --rounds 5 --json
    python benchmarks/neighbour_load.py --shares --ray        # beside an idle local Ray

`--ray` adds a column: the probe beside a local Ray that runs nothing (started as a study starts
it: no dashboard, its workers at nice 0), whose processes (the GCS, the raylet, its agents and
idle workers) wake up often but use little CPU: a load a duty-cycle neighbour does not mimic.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from autotune import space as sp
from autotune.probe import run_probe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_overhead import make_space

PERIOD_S = 0.05  # one busy-then-idle cycle of the neighbour
IDLE_RAY = (
    "import os, sys, time, ray\n"
    "ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)\n"
    "open(sys.argv[1], 'w').close()\n"
    "time.sleep(3600)\n"
)
NEIGHBOUR = (
    "import time\n"
    "while True:\n"
    "    t = time.perf_counter()\n"
    "    while time.perf_counter() - t < {busy}: pass\n"
    "    time.sleep({idle})\n"
)


def beside_ray(cfg: object) -> float:
    """The probe's wall time beside a local Ray that runs nothing (started, then left to
    settle for 5 s before the probe; stopped after)."""
    env = {**os.environ, "RAY_worker_niceness": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready"
        ray = subprocess.Popen(
            [sys.executable, "-c", IDLE_RAY, str(ready)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while not ready.exists():
                if ray.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the local Ray did not start")
                time.sleep(0.2)
            time.sleep(5.0)
            return float(run_probe(cfg)["wall_s"])  # type: ignore[arg-type]
        finally:
            ray.send_signal(signal.SIGINT)  # KeyboardInterrupt: Ray shuts down at exit
            ray.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shares", type=float, nargs="*", default=[0.1, 0.5])
    ap.add_argument("--ray", action="store_true", help="add the column beside an idle local Ray")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "space.yaml"
        path.write_text(yaml.safe_dump(make_space(2, "tiny_gpt", "tiny", args.steps)))
        space = sp.load(path)
    cfg = sp.probe_config(space, knobs=space.baseline_knobs())
    walls: dict[str, list[float]] = {"alone": [], **{f"beside {s:.0%}": [] for s in args.shares}}
    if args.ray:
        walls["beside idle Ray"] = []
    run_probe(cfg)  # untimed: the process's first probe pays torch's warm-up
    for r in range(args.rounds):
        walls["alone"].append(run_probe(cfg)["wall_s"])
        for share in args.shares:
            code = NEIGHBOUR.format(busy=share * PERIOD_S, idle=(1 - share) * PERIOD_S)
            neighbour = subprocess.Popen([sys.executable, "-c", code])
            try:
                walls[f"beside {share:.0%}"].append(run_probe(cfg)["wall_s"])
            finally:
                neighbour.kill()
                neighbour.wait()
        if args.ray:
            walls["beside idle Ray"].append(beside_ray(cfg))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in walls.items()),
              file=sys.stderr)  # fmt: skip
    alone = statistics.mean(walls["alone"])
    out = {
        "steps": args.steps,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "walls_s": walls,
        "slowdown": {k: statistics.mean(v) / alone for k, v in walls.items()},
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in walls.items():
            print(f"{k:>12}: mean {statistics.mean(v):.2f} s  x{out['slowdown'][k]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
