"""Idle workers at rung barriers: a discrete-event simulation of a study's probes on W workers,
synchronous rungs (the study today) against asynchronous promotion (ASHA, Li et al. 2020),
driven by recorded probe durations (issue 27 item 4).

Durations come from real studies' records (`--collect` reads study folders into
`results/probe_durations.json`, committed): per screened trial its probe's own seconds per step
(`summary.wall_s / steps_run`) and per study the process overhead of a screen probe and of a
promoted (continued) probe (record `wall_s` less the probe's own, medians; a study's first trial,
which also started its worker, left out). A simulated study of N trials draws each trial's
seconds per step from one recorded study's screened trials (with replacement); a probe of trial
i from length a to b (continued) takes overhead + (b - a) x its seconds per step. Lengths: the
recorded probe length L0, target `--factor` x L0, the study's rungs (`rungs.rung_steps`, eta 3,
at most 4 rungs). Each trial has a latent quality; its score at a length is that plus noise
shrinking with the length (only who is promoted depends on it, not the durations).

- synchronous: every rung waits for its slowest probe; rung k+1 runs the best
  max(min_promote, ceil(n_k / eta)) of rung k plus the baseline, W at a time, longest first
  as they were submitted (in trial order);
- asynchronous: a free worker takes, from the top rung down, a trial in the top floor(n / eta)
  of the n finished at its rung and not yet promoted (the baseline always), else the next
  unscreened trial, else waits.

Idle share = idle worker-seconds / (W x makespan), the makespan being the end of the last probe
(verification, the same in both, is left out). "Waiting" idle is the part spent while a probe
below the top rung is still running (work may still appear: at a barrier, or before a
promotion); the rest is the tail, when the top rung's few probes are all that is left, which no
scheduler of the same probes can fill.

    python benchmarks/rung_idle_sim.py                    # 16 workers, 48/96/192 trials
    python benchmarks/rung_idle_sim.py --collect DIR...   # durations from study folders
"""

from __future__ import annotations

import argparse
import glob
import heapq
import json
import math
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.study import rungs as rg

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "results" / "probe_durations.json"


def collect(dirs: Sequence[str]) -> dict[str, Any]:
    """Per study folder: its probe length, seconds per step of each screened trial, and the
    median process overheads of a screen probe and of a rung probe."""
    out: dict[str, Any] = {}
    for d in dirs:
        recs = []
        for p in sorted(glob.glob(str(Path(d) / "trials" / "*.json"))):
            r = json.loads(Path(p).read_text())
            s = r.get("summary") or {}
            if s.get("wall_s") and s.get("steps_run") and r.get("wall_s"):
                recs.append((Path(p).name, r, s))
        screen = [(n, r, s) for n, r, s in recs if "-r" not in n]
        rungs = [(n, r, s) for n, r, s in recs if "-r" in n]
        if len(screen) < 4:
            continue
        workload = screen[0][2].get("workload") or "?"
        key = f"{workload} ({Path(d).name}, {len(screen)} trials)"
        out[key] = {
            "source": str(d),
            "probe_steps": int(screen[0][2]["steps_planned"]),
            "step_s": [s["wall_s"] / s["steps_run"] for _, _, s in screen],
            "screen_overhead_s": statistics.median(
                r["wall_s"] - s["wall_s"] for _, r, s in screen[1:]
            ),
            "rung_overhead_s": statistics.median(r["wall_s"] - s["wall_s"] for _, r, s in rungs)
            if rungs
            else None,
        }
    return out


class Study:
    """One simulated study's trials: seconds per step, latent quality, the baseline (0)."""

    def __init__(self, pool: Mapping[str, Any], n: int, factor: int, rng: random.Random):
        self.L0 = int(pool["probe_steps"])
        self.plan = rg.rung_steps(self.L0, factor * self.L0, 3, 4)
        self.step_s = [rng.choice(pool["step_s"]) for _ in range(n)]
        self.quality = [rng.gauss(0, 1) for _ in range(n)]
        self.noise = {
            (i, k): rng.gauss(0, 1) * math.sqrt(self.L0 / steps)
            for i in range(n)
            for k, steps in enumerate(self.plan)
        }
        self.o_screen = float(pool["screen_overhead_s"])
        ro = pool.get("rung_overhead_s")
        self.o_rung = float(ro if ro is not None else pool["screen_overhead_s"])
        self.n = n

    def duration(self, i: int, k: int) -> float:
        a = self.plan[k - 1] if k else 0
        return (self.o_rung if k else self.o_screen) + (self.plan[k] - a) * self.step_s[i]

    def score(self, i: int, k: int) -> float:
        return self.quality[i] + self.noise[(i, k)]  # lower is better


def synchronous(s: Study, workers: int, eta: int = 3, min_promote: int = 2) -> dict[str, Any]:
    t, busy, waiting_idle, probes = 0.0, 0.0, 0.0, 0
    numbers = list(range(s.n))
    top = len(s.plan) - 1
    for k in range(len(s.plan)):
        free = [t] * workers
        heapq.heapify(free)
        ends = []
        for i in numbers:  # submitted in trial order; each starts when a worker is free
            start = heapq.heappop(free)
            end = start + s.duration(i, k)
            heapq.heappush(free, end)
            ends.append(end)
            busy += end - start
        probes += len(numbers)
        barrier = max(ends)
        work = sum(s.duration(i, k) for i in numbers)
        if k < top:
            waiting_idle += workers * (barrier - t) - work
        t = barrier
        if k < top:
            searched = sorted((i for i in numbers if i != 0), key=lambda i: s.score(i, k))
            q = max(min_promote, math.ceil(len(numbers) / eta))
            numbers = sorted({0, *searched[:q]})
    return _result(t, busy, waiting_idle, workers, probes)


def asynchronous(s: Study, workers: int, eta: int = 3) -> dict[str, Any]:
    top = len(s.plan) - 1
    done: list[list[int]] = [[] for _ in s.plan]  # finished at each rung
    promoted: list[set[int]] = [set() for _ in s.plan]
    running: list[tuple[float, int, int]] = []  # (end, trial, rung)
    nxt, t, busy, waiting_idle, probes = 0, 0.0, 0.0, 0.0, 0
    idle_workers = workers

    def job() -> tuple[int, int] | None:
        nonlocal nxt
        for k in range(top - 1, -1, -1):
            ranked = sorted(done[k], key=lambda i: s.score(i, k))
            best = set(ranked[: len(ranked) // eta]) | ({0} & set(done[k]))
            for i in sorted(best - promoted[k], key=lambda i: s.score(i, k)):
                promoted[k].add(i)
                return i, k + 1
        if nxt < s.n:
            nxt += 1
            return nxt - 1, 0
        return None

    while True:
        while idle_workers:
            j = job()
            if j is None:
                break
            i, k = j
            d = s.duration(i, k)
            heapq.heappush(running, (t + d, i, k))
            busy += d
            probes += 1
            idle_workers -= 1
        if not running:
            break
        end, i, k = heapq.heappop(running)
        if any(r[2] < top for r in running) or k < top:
            waiting_idle += idle_workers * (end - t)
        t = end
        idle_workers += 1
        done[k].append(i)
    return _result(t, busy, waiting_idle, workers, probes)


def _result(makespan: float, busy: float, waiting: float, workers: int, probes: int) -> dict:
    cap = workers * makespan
    return {
        "makespan_s": makespan,
        "busy_s": busy,
        "idle_share": 1 - busy / cap,
        "waiting_idle_share": waiting / cap,
        "probes": probes,
    }


def run(pools: Mapping[str, Any], trials: Sequence[int], workers: int, factor: int, reps: int):
    rows = []
    for name, pool in pools.items():
        for n in trials:
            agg: dict[str, list[dict[str, Any]]] = {"synchronous": [], "asynchronous": []}
            for rep in range(reps):
                s = Study(pool, n, factor, random.Random(rep))
                agg["synchronous"].append(synchronous(s, workers))
                agg["asynchronous"].append(asynchronous(s, workers))
            row: dict[str, Any] = {"pool": name, "trials": n, "plan": s.plan}
            for mode, res in agg.items():
                row[mode] = {k: statistics.fmean(r[k] for r in res) for k in res[0]}
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--collect", nargs="+", metavar="STUDY_DIR", help="write the durations")
    ap.add_argument("--durations", default=str(DURATIONS))
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--trials", default="48,96,192")
    ap.add_argument("--factor", type=int, default=20)
    ap.add_argument("--reps", type=int, default=50, help="simulated studies per cell")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    if args.collect:
        pools = collect(args.collect)
        Path(args.durations).write_text(json.dumps(pools, indent=1) + "\n")
        print(f"wrote {args.durations}: {', '.join(pools)}")
        return 0
    try:
        pools = json.loads(Path(args.durations).read_text())
        trials = [int(x) for x in args.trials.split(",")]
    except (OSError, ValueError) as e:
        print(f"rung_idle_sim.py: {e}", file=sys.stderr)
        return 2
    rows = run(pools, trials, args.workers, args.factor, args.reps)
    if args.json:
        Path(args.json).write_text(json.dumps({"workers": args.workers, "rows": rows}, indent=1))
    print(
        f"| durations from | trials | rungs | sync: idle / waiting idle | async: idle / waiting "
        f"idle | makespan async / sync | probes sync, async |  ({args.workers} workers, "
        f"mean of {args.reps} studies)"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        a, b = r["synchronous"], r["asynchronous"]
        print(
            f"| {r['pool']} | {r['trials']} | {' -> '.join(map(str, r['plan']))} | "
            f"{a['idle_share']:.0%} / {a['waiting_idle_share']:.0%} | "
            f"{b['idle_share']:.0%} / {b['waiting_idle_share']:.0%} | "
            f"{b['makespan_s'] / a['makespan_s']:.2f} | {a['probes']:.0f}, {b['probes']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
