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

Verification (`verify.top_k` 2 candidates and the baseline x 3 seeds, at the target from step 0)
runs after the last rung probe, as the study runs it; the "+ overlap" modes instead start every
top-rung entrant's verification seeds beside its top-rung probe (more probes: every entrant is
verified, not only the best two; the makespan and the work are reported against synchronous).

Idle share = idle worker-seconds / (W x makespan), the makespan being the end of the last
probe. "Waiting" idle is the part spent while a probe below the top rung is still running (work
may still appear: at a barrier, or before a promotion); the rest is the tail, when the top rung's
few probes and the verification are all that is left, which no scheduler of the same probes can
fill.

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

    def verify_s(self, i: int) -> float:
        """A verification probe of trial i: the target's length from step 0 (another seed)."""
        return self.o_screen + self.plan[-1] * self.step_s[i]


Job = tuple[str, int, int]  # ("rung" or "verify", trial, rung)


def schedule(s: Study, workers: int, policy: Any) -> dict[str, Any]:
    """Run `policy`'s jobs on `workers`: a free worker takes `policy.next()` (None: nothing
    to give now); `policy.done(job)` when one ends. Counts busy, idle and waiting idle."""
    top = len(s.plan) - 1
    running: list[tuple[float, int, Job]] = []
    t, busy, waiting, probes, free, seq = 0.0, 0.0, 0.0, 0, workers, 0
    verify_s = 0.0
    while True:
        while free:
            job = policy.next()
            if job is None:
                break
            kind, i, k = job
            d = s.duration(i, k) if kind == "rung" else s.verify_s(i)
            heapq.heappush(running, (t + d, seq, job))
            seq, busy, probes, free = seq + 1, busy + d, probes + 1, free - 1
            verify_s += d if kind == "verify" else 0.0
        if not running:
            break
        end, _, job = heapq.heappop(running)
        below = [j for _, _, j in running] + [job]
        if any(kind == "rung" and k < top for kind, _, k in below):
            waiting += free * (end - t)
        t, free = end, free + 1
        policy.done(job)
    cap = workers * t
    return {
        "makespan_s": t,
        "busy_s": busy,
        "verify_s": verify_s,
        "idle_share": 1 - busy / cap,
        "waiting_idle_share": waiting / cap,
        "probes": probes,
    }


class Synchronous:
    """Rung by rung: the next rung (its promotions) once every probe of this one has ended;
    verification of the best `top_k` and the baseline at the target after the top rung, or
    (`overlap`) every top-rung entrant's verification seeds beside its top-rung probe."""

    def __init__(self, s: Study, *, overlap: bool, eta=3, min_promote=2, top_k=2, seeds=3):
        self.s, self.overlap, self.eta, self.min_promote = s, overlap, eta, min_promote
        self.top_k, self.seeds = top_k, seeds
        self.k, self.numbers = 0, list(range(s.n))
        self.queue: list[Job] = [("rung", i, 0) for i in self.numbers]
        self.left = len(self.queue)
        self.verified = False

    def next(self) -> Job | None:
        return self.queue.pop(0) if self.queue else None

    def done(self, job: Job) -> None:
        self.left -= 1
        if self.left:
            return
        s, top = self.s, len(self.s.plan) - 1
        if self.k == top:
            if self.overlap or self.verified:
                return
            best = sorted((i for i in self.numbers if i), key=lambda i: s.score(i, top))
            chosen = sorted({0, *best[: self.top_k]})
            self.queue = [("verify", i, top) for i in chosen for _ in range(self.seeds)]
            self.left, self.verified = len(self.queue), True
            return
        if self.verified:
            return
        searched = sorted((i for i in self.numbers if i), key=lambda i: s.score(i, self.k))
        q = max(self.min_promote, math.ceil(len(self.numbers) / self.eta))
        self.numbers = sorted({0, *searched[:q]})
        self.k += 1
        self.queue = [("rung", i, self.k) for i in self.numbers]
        if self.overlap and self.k == top:
            self.queue += [("verify", i, top) for i in self.numbers for _ in range(self.seeds)]
        self.left = len(self.queue)


class Asynchronous:
    """ASHA: a free worker takes, from the top rung down, a trial in the top floor(n / eta) of
    the n finished at its rung and not yet promoted (the baseline always), else the next
    unscreened trial; verification as `Synchronous` (after the last probe, or beside each
    top-rung probe with `overlap`)."""

    def __init__(self, s: Study, *, overlap: bool, eta=3, top_k=2, seeds=3):
        self.s, self.overlap, self.eta, self.top_k, self.seeds = s, overlap, eta, top_k, seeds
        self.top = len(s.plan) - 1
        self.finished: list[list[int]] = [[] for _ in s.plan]
        self.promoted: list[set[int]] = [set() for _ in s.plan]
        self.extra: list[Job] = []
        self.nxt, self.running, self.verified = 0, 0, False

    def next(self) -> Job | None:
        job = self._next()
        self.running += job is not None
        return job

    def _next(self) -> Job | None:
        s = self.s
        if self.extra:
            return self.extra.pop(0)
        for k in range(self.top - 1, -1, -1):
            ranked = sorted(self.finished[k], key=lambda i: s.score(i, k))
            best = set(ranked[: len(ranked) // self.eta]) | ({0} & set(self.finished[k]))
            for i in sorted(best - self.promoted[k], key=lambda i: s.score(i, k)):
                self.promoted[k].add(i)
                if self.overlap and k + 1 == self.top:
                    self.extra += [("verify", i, self.top) for _ in range(self.seeds)]
                return "rung", i, k + 1
        if self.nxt < s.n:
            self.nxt += 1
            return "rung", self.nxt - 1, 0
        if not self.running and not self.overlap and not self.verified:
            top = self.finished[self.top]
            best = sorted((i for i in top if i), key=lambda i: s.score(i, self.top))
            chosen = sorted({0, *best[: self.top_k]} & ({0} | set(top)))
            self.extra = [("verify", i, self.top) for i in chosen for _ in range(self.seeds)]
            self.verified = True
            return self.extra.pop(0) if self.extra else None
        return None

    def done(self, job: Job) -> None:
        self.running -= 1
        kind, i, k = job
        if kind == "rung":
            self.finished[k].append(i)


MODES = {
    "synchronous": lambda s: Synchronous(s, overlap=False),
    "asynchronous": lambda s: Asynchronous(s, overlap=False),
    "synchronous, verification beside the top rung": lambda s: Synchronous(s, overlap=True),
    "asynchronous, verification beside the top rung": lambda s: Asynchronous(s, overlap=True),
}


def run(pools: Mapping[str, Any], trials: Sequence[int], workers: int, factor: int, reps: int):
    rows = []
    for name, pool in pools.items():
        for n in trials:
            agg: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
            for rep in range(reps):
                s = Study(pool, n, factor, random.Random(rep))
                for mode, policy in MODES.items():
                    agg[mode].append(schedule(s, workers, policy(s)))
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
        f"{args.workers} workers, mean of {args.reps} simulated studies per row; per mode: idle "
        "share / waiting idle share (idle while a probe below the top rung runs); makespan and "
        "probe-seconds against synchronous\n"
    )
    short = {m: m.replace(", verification beside the top rung", " + overlap") for m in MODES}
    print("| durations from | trials | rungs | " + " | ".join(short.values()) + " |")
    print("|---|---|---|" + "---|" * len(MODES))
    for r in rows:
        base = r["synchronous"]
        cells = []
        for m in MODES:
            x = r[m]
            cells.append(
                f"{x['idle_share']:.0%} / {x['waiting_idle_share']:.0%}"
                + (
                    ""
                    if m == "synchronous"
                    else f" (makespan {x['makespan_s'] / base['makespan_s']:.2f}x, "
                    f"work {x['busy_s'] / base['busy_s']:.2f}x)"
                )
            )
        print(
            f"| {r['pool']} | {r['trials']} | {' -> '.join(map(str, r['plan']))} | "
            + " | ".join(cells)
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
