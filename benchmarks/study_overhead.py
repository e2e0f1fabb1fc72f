"""What the orchestration costs: N probes run directly in a loop vs the same N through a study.

Direct: `run_probe` called N times in one process, one after another, one torch thread (what a
user would script by hand). Study: `autotune study` on a grid space whose N trials are exactly
those probes (trial 0 the baseline, then one trial per `clip_norm` choice), with a local Ray,
SQLite Optuna storage and a SQLite MLflow store, one trial at a time with one torch thread (the
2-core default). Both run in this one invocation: the first half of the direct probes, the
study, then the second half (A-B-A: a machine whose speed drifts during the run, as these shared
ones do, moves both sides alike). Each half of the direct loop runs as a command of its own
(this script, `--direct-part`), as the study does. Reported: the wall-time ratio study/direct
for the loops alone (the probes in a process that has already started and imported torch) and
for both sides as commands, from their start to their exit (the plain loop then pays one
interpreter start and its imports, as the study's command pays its own), and the overhead per
trial in seconds.

    python benchmarks/study_overhead.py                 # 12 trials of ~20 s (RESULTS.md)
    python benchmarks/study_overhead.py --trials 4 --steps 100   # a quick look
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from autotune import space as sp
from autotune.probe import run_probe


def run_direct(space: sp.Space, knob_sets: list[dict], walls: list[float], start: int = 0) -> float:
    """`run_probe` for each knob set in turn, in this process; their wall times appended to
    `walls`. Returns the loop's wall time."""
    t0 = time.perf_counter()
    for i, knobs in enumerate(knob_sets, start=start + 1):
        r = run_probe(sp.probe_config(space, knobs=knobs))
        walls.append(r["wall_s"])
        print(f"  direct {i}: {r['status']}, {r['wall_s']:.1f} s", file=sys.stderr)
    return time.perf_counter() - t0


def direct_command(path: Path, part: str) -> tuple[float, float, list[float]]:
    """The direct loop as a user runs one: a command of its own (`--direct-part`), timed from
    its start to its exit, like the study's. Returns (the command's wall time, its loop's, the
    probes' wall times)."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--direct-part", part, "--space-file", str(path)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - t0
    got = json.loads(done.stdout)
    return wall, got["loop_s"], got["walls"]


def direct_part(path: Path, part: str) -> int:
    """Run knob sets `a:b` of the space at `path` in a plain loop, one torch thread; print the
    loop's wall time and the probes' as JSON (`direct_command`'s child)."""
    import torch

    torch.set_num_threads(1)
    space = sp.load(path)
    a, b = (int(x) for x in part.split(":"))
    walls: list[float] = []
    loop = run_direct(space, knob_sets_of(space)[a:b], walls, start=a)
    print(json.dumps({"loop_s": loop, "walls": walls}))
    return 0


def knob_sets_of(space: sp.Space) -> list[dict]:
    """The study's trials in order: the baseline, then one per `clip_norm` choice."""
    clips = space.knobs["clip_norm"].choices  # type: ignore[union-attr]
    return [space.baseline_knobs()] + [{**space.fixed_knobs(), "clip_norm": c} for c in clips]


def make_space(trials: int, workload: str, size: str, steps: int) -> dict:
    clips = [round(0.1 * (i + 1), 2) for i in range(trials - 1)]
    return {
        "name": "overhead",
        "workload": {"name": workload, "size": size},
        "probe": {"steps": steps, "micro_batch": 16, "threads": 1},
        "budget": {"trials": trials, "concurrency": 1, "trial_timeout_s": 600},
        "sampler": {"name": "grid"},
        "verify": {"top_k": 0},  # the same N probes on both sides: no end-of-study verification
        "knobs": {"lr": 3e-3, "clip_norm": {"choices": clips}},
    }


def breakdown(marks: list[dict], start: float, end: float, records: list[dict]) -> dict[str, float]:
    """The study's wall time (`start` to `end`, the command's) split at the driver's and the
    workers' marks (`autotune.study.timeline`), the probe processes' own time from the trial
    records; every second of it in one line."""
    at: dict[str, float] = {}
    for m in marks:
        at.setdefault(m["at"], m["t"])
    numbers = sorted(int(r["number"]) for r in records)
    process_s = sum(float(r.get("wall_s") or 0.0) for r in records)

    def span(a: str, b: str) -> float:
        return at[b] - at[a] if a in at and b in at else 0.0

    trials = [f"trial {n}" for n in numbers]
    out = {
        "process start, CLI imports, space load": at["driver"] - start,
        "service checks": span("driver", "services checked"),
        "MLflow store (connect, create)": span("services checked", "mlflow store"),
        "fingerprint, conditioning": span("mlflow store", "fingerprint"),
        # since the driver waits for Ray before it writes the study: storage, Ray, study
        **(
            {
                "Optuna storage": span("fingerprint", "optuna storage"),
                "waiting for Ray's start (before the study is written)": span(
                    "optuna storage", "ray up"
                ),
                "Optuna study": span("ray up", "optuna study"),
            }
            if "ray up" in at
            else {"Optuna storage and study": span("fingerprint", "optuna study")}
        ),
        "MLflow experiment and study run": span("optuna study", "mlflow run"),
        "reconcile, study.json, stale trials": span("mlflow run", "resume checked"),
        "Ray start (what is left of it once the stores are open)": span(
            "resume checked", "ray started"
        ),
        "the screen's start (Ray up -> the first trial asked)": span(
            "ray started", f"{trials[0]} asked"
        ),
        "asked -> on its worker (all trials)": sum(
            span(f"{t} asked", f"{t} on its worker") for t in trials
        ),
        "probe processes (the records' wall_s)": process_s,
        "on the worker, besides the process": sum(
            span(f"{t} on its worker", f"{t} reported") for t in trials
        )
        - process_s,
        "reported -> back on the driver": sum(span(f"{t} reported", f"{t} back") for t in trials),
        "the driver's record (file, Optuna, queue)": sum(
            span(f"{t} back", f"{t} recorded") for t in trials
        ),
        "recorded -> next trial asked": sum(
            span(f"{a} recorded", f"{b} asked") for a, b in itertools.pairwise(trials)
        ),
        "the screen's end (last recorded -> screen over)": span(f"{trials[-1]} recorded", "screen"),
        "yardstick, rungs": span("screen", "rungs"),
        "verification": span("rungs", "verification"),
        "Ray shutdown (begun; joined at the driver's end)": span("verification", "ray stopped"),
        "summary": span("ray stopped", "summary"),
        "importances": span("summary", "importances"),
        "MLflow: writer drained, summary and plots logged": span("importances", "summary logged"),
        "driver's end (Ray's shutdown joined)": span("summary logged", "driver done"),
        "CLI: the summary printed": span("driver done", "summary printed"),
        "process exit": end - at.get("summary printed", at["driver done"]),
    }
    out["(sum; the command's wall time)"] = sum(out.values())
    return {k: round(v, 2) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--workload", default="tiny_gpt")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--steps", type=int, default=1000, help="probe length (~20 s on one core)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--direct-part", help=argparse.SUPPRESS)  # a:b, with --space-file
    ap.add_argument("--space-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.direct_part:
        return direct_part(args.space_file, args.direct_part)

    data = make_space(args.trials, args.workload, args.size, args.steps)
    with tempfile.TemporaryDirectory(prefix="autotune-bench-") as tmp:
        path = Path(tmp) / "overhead.yaml"
        path.write_text(yaml.safe_dump(data))
        half = args.trials // 2
        first = direct_command(path, f"0:{half}")
        timeline = Path(tmp) / "timeline.jsonl"
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db",
            "AUTOTUNE_TIMELINE": str(timeline),  # autotune.study.timeline: the phases' marks
        }
        wall0 = time.time()
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "autotune", "study", "--space", str(path), "--quiet"],
            cwd=tmp,
            env=env,
            check=True,
            stdout=sys.stderr,  # the study's summary; stdout carries only the result
        )
        study = time.perf_counter() - t0
        wall1 = time.time()
        second = direct_command(path, f"{half}:{args.trials}")
        direct = first[1] + second[1]  # the loops alone, as before 2026-12-06
        direct_walls = first[2] + second[2]
        direct_probe_s = sum(direct_walls)
        # A plain loop run as a command pays one interpreter start and its imports (torch, the
        # workload), as the study's command does: each half's, the mean of the two.
        start_s = ((first[0] - first[1]) + (second[0] - second[1])) / 2
        direct_cmd = direct + start_s
        # Where the study's time went, from its trial records: the probes' own wall time
        # (run_probe, inside the probe process) and each probe process's, start to exit.
        records = [
            json.loads(f.read_text())
            for f in sorted((Path(tmp) / "autotune-studies" / "overhead" / "trials").glob("*.json"))
        ]
        study_probe_s = sum((r.get("summary") or {}).get("wall_s") or 0.0 for r in records)
        study_process_s = sum(r.get("wall_s") or 0.0 for r in records)
        marks = [json.loads(line) for line in timeline.read_text().splitlines() if line]
        phases = breakdown(marks, wall0, wall1, records)

    out = {
        "trials": args.trials,
        "workload": f"{args.workload} ({args.size})",
        "steps": args.steps,
        "direct_s": direct,
        "study_s": study,
        "ratio": study / direct,
        # both sides as commands, from their start to their exit: the plain loop with one
        # interpreter start and its imports (reported beside the ratio above, not instead)
        "direct_command_s": direct_cmd,
        "direct_start_s": start_s,
        "ratio_commands": study / direct_cmd,
        "overhead_per_trial_s": (study - direct) / args.trials,
        "direct_per_trial_s": direct / args.trials,
        # the study's extra time, split: its probes ran slower than the direct ones (other
        # processes on the machine: Ray, the driver), process start/exit, and the rest (Ray's
        # and MLflow's start, the driver between trials, the summary, shutdown)
        "probes_slower_s": study_probe_s - direct_probe_s,
        "process_s": study_process_s - study_probe_s,
        "driver_and_fixed_s": study - study_process_s,
        "direct_probe_s": direct_probe_s,
        "direct_probe_walls_s": direct_walls,
        "study_probe_walls_s": [(r.get("summary") or {}).get("wall_s") for r in records],
        "study_probe_s": study_probe_s,
        "phases_s": phases,
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"{args.trials} probes of {out['direct_per_trial_s']:.1f} s: direct {direct:.1f} s, "
            f"study {study:.1f} s, ratio {out['ratio']:.3f}, overhead "
            f"{out['overhead_per_trial_s']:.2f} s per trial\n"
            f"  as commands (the plain loop with its interpreter start and imports, "
            f"{start_s:.1f} s): direct {direct_cmd:.1f} s, ratio {out['ratio_commands']:.3f}\n"
            f"  the study's extra {study - direct:.1f} s: its probes ran "
            f"{out['probes_slower_s']:.1f} s longer in all ({study_probe_s:.1f} s against "
            f"{direct_probe_s:.1f} s), probe processes' start and exit {out['process_s']:.1f} s, "
            f"everything else (Ray and MLflow start, the driver between trials, the summary, "
            f"shutdown) {out['driver_and_fixed_s']:.1f} s"
        )
        h = len(direct_walls) // 2
        inside = [w for w in out["study_probe_walls_s"] if w is not None]
        print(
            f"  a probe's wall time, mean: direct before the study "
            f"{sum(direct_walls[:h]) / max(1, h):.2f} s, after it "
            f"{sum(direct_walls[h:]) / max(1, len(direct_walls) - h):.2f} s; inside the study "
            f"{sum(inside) / max(1, len(inside)):.2f} s"
        )
        print("  the study's wall time by phase (autotune.study.timeline):")
        for name, seconds in phases.items():
            print(f"    {seconds:7.2f} s  {name}")
        print(f"  load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
