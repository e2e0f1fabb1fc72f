"""Idle workers at rung barriers: a discrete-event simulation of a study's probes on W workers,
synchronous rungs against asynchronous promotion (ASHA, Li et al. 2020), both as the study runs
them: the promotion policy is the study's own (`autotune.study.promotion.Ladder`, what
`rungs.promotion: sync | async` runs), driven by recorded probe durations (issue 27 item 4).

Durations come from real studies' records (`--collect` reads study folders into
`results/probe_durations.json`, committed): per screened trial its probe's own seconds per step
(`summary.wall_s / steps_run`) and per study the process overhead of a screen probe and of a
promoted (continued) probe (record `wall_s` less the probe's own, medians; a study's first trial,
which also started its worker, left out). A simulated study of N trials draws each trial's
seconds per step from one recorded study's screened trials (with replacement); a probe of trial
i from length a to b (continued) takes overhead + (b - a) x its seconds per step. Lengths: the
recorded probe length L0, target `--factor` x L0, the study's rungs (`rungs.rung_steps`, eta 3,
at most 4 rungs). Each trial has a latent quality; its value (one stability objective, lower is
better, every probe feasible) at a length is that plus noise shrinking with the length: it
decides who is promoted and the rungs' agreement (PASHA's growth rule, the study's defaults:
agreement 0.7 over 2 rung pairs), not the durations.

- synchronous (`rungs.promotion: sync`, the default): the screen (all N at once, as the
  study's job runner feeds it), then rung by rung, each waiting for its slowest probe;
- asynchronous (`rungs.promotion: async`): the screen, then a free worker takes the Ladder's
  next promotion (from the top rung down, a trial in the top floor(m / eta) of the m finished at
  its rung; the synchronous quota when the rung has ended), else waits;
- "+ fill idle" (`rungs.fill_idle: true`): a worker with neither a promotion nor a baseline
  seed to take is given the best finished configuration of an open rung below the top that was
  not promoted (`Ladder.fill`): more configurations go on, on workers that would idle;
- "+ entrants verified beside" (not built, measured and rejected): on top of the fill, once
  the top rung has entrants, a worker that would idle takes a verification seed of the baseline,
  then of the top rung's finished probes (best first), then of every other entrant, from its
  entry: the tail's few long probes run beside more of the same;
- "+ screen" (not built): asynchronous promotion from the screen too (a free worker promotes a
  screened trial before starting the next unscreened one), the same Ladder with the screen open.

Verification (`verify.top_k` 2 candidates and the baseline x 3 seeds, at the decided length from
step 0) runs after the last rung probe, as the study runs it.

The pick's regret: its latent quality less the study's best trial's (0: the study's best was
picked; the qualities spread 1), for a pick read at the decided rung before verification.

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

from autotune.study import promotion as pm
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

    def verify_s(self, i: int, k: int) -> float:
        """A verification probe of trial i at rung k's length from step 0 (another seed)."""
        return self.o_screen + self.plan[k] * self.step_s[i]


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
            d = s.duration(i, k) if kind == "rung" else s.verify_s(i, k)
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


OBJECTIVES = [{"metric": "noise_per_drop", "direction": "minimize"}]


class Built:
    """The study's phases: the screen, the rungs by the study's own promotion policy (`early`:
    `rungs.promotion: async`; `screen_open`: promotions from the screen before it has ended,
    not built), then verification of the best `top_k` at the decided rung and the baseline."""

    def __init__(
        self,
        s: Study,
        *,
        early: bool,
        screen_open: bool = False,
        beside: str = "",
        fill: bool = False,
        top_k: int = 2,
        seeds: int = 3,
    ):
        self.s, self.top_k, self.seeds, self.screen_open = s, top_k, seeds, screen_open
        self.beside, self.fill = beside, fill
        self.started: dict[int, int] = {}  # trial -> verification seeds handed out beside
        self.ladder = pm.Ladder(
            s.plan,
            list(range(s.n)),
            baseline=0,
            objectives=OBJECTIVES,
            settings=pm.Settings(grow=GROW[0]),
            early=early,
        )
        self.unscreened = list(range(s.n))
        self.held: list[rg.RungResult] = []  # screen results, told when the screen has ended
        self.verify: list[Job] | None = None

    def next(self) -> Job | None:
        if self.verify is not None:
            return self.verify.pop(0) if self.verify else None
        if not self.screen_open and (self.unscreened or len(self.held) < self.s.n):
            return ("rung", self.unscreened.pop(0), 0) if self.unscreened else None
        job = self.ladder.next()
        if job is not None:
            return "rung", job[0], job[1]
        if self.unscreened:
            return "rung", self.unscreened.pop(0), 0
        decided = self.ladder.decided
        if decided is None:
            got = self._beside()
            if got is None and self.fill:  # `rungs.fill_idle`: the study's own rule
                more = self.ladder.fill()
                got = None if more is None else ("rung", more[0], more[1])
            return got
        k = int(decided["rung"])
        ran = list(self.ladder.rungs[k].results.values())
        best = [n for n in pm.ranked([r for r in ran if not r.baseline], OBJECTIVES)]
        chosen = sorted({0, *best[: self.top_k]})
        self.verify = [
            ("verify", i, k) for i in chosen for _ in range(self.seeds - self.started.get(i, 0))
        ]
        return self.verify.pop(0) if self.verify else None

    def _beside(self) -> Job | None:
        """A worker would idle before the decision: once the top rung has an entrant (the study
        then decides at the target), a verification seed at the target, the baseline's first
        (needed whatever is picked), then (`beside="candidates"`) those of the current best
        `top_k` finished at the top (speculative: a later finisher may displace them)."""
        top = len(self.s.plan) - 1
        if not self.beside or not self.ladder.rungs[top].entrants:
            return None
        want = [0]
        if self.beside in ("candidates", "entrants"):
            ran = [r for r in self.ladder.rungs[top].results.values() if not r.baseline]
            cut = self.top_k if self.beside == "candidates" else None
            want += pm.ranked(ran, OBJECTIVES)[:cut]
        if self.beside == "entrants":  # every entrant of the top rung, from its entry
            want += [i for i in self.ladder.rungs[top].entrants if i not in want]
        for i in want:
            if self.started.get(i, 0) < self.seeds:
                self.started[i] = self.started.get(i, 0) + 1
                return "verify", i, top
        return None

    def done(self, job: Job) -> None:
        kind, i, k = job
        if kind != "rung":
            return
        r = rg.RungResult(i, self.s.plan[k], i == 0, "complete", [self.s.score(i, k)], True)
        if k == 0 and not self.screen_open:
            self.held.append(r)
            if len(self.held) == self.s.n:
                for x in self.held:
                    self.ladder.done(0, x)
            return
        self.ladder.done(k, r)


#: `rungs.grow` of the simulated studies (`--grow`; the study's default: pasha).
GROW = ["pasha"]

MODES = {
    "synchronous": lambda s: Built(s, early=False),
    "synchronous + baseline verified beside": lambda s: Built(s, early=False, beside="baseline"),
    "asynchronous": lambda s: Built(s, early=True),
    "asynchronous + screen (not built)": lambda s: Built(s, early=True, screen_open=True),
    "asynchronous + baseline verified beside": lambda s: Built(s, early=True, beside="baseline"),
    "asynchronous + candidates verified beside": lambda s: Built(
        s, early=True, beside="candidates"
    ),
    "asynchronous + baseline verified beside + fill idle": lambda s: Built(
        s, early=True, beside="baseline", fill=True
    ),
    "asynchronous + fill idle + entrants verified beside": lambda s: Built(
        s, early=True, beside="entrants", fill=True
    ),
}


def run(
    pools: Mapping[str, Any],
    trials: Sequence[int],
    workers: int,
    factor: int,
    reps: int,
    open_screen: Sequence[int] = (),
    only: Sequence[str] = tuple(MODES),
) -> list[dict[str, Any]]:
    """Per pool and trial count, the mean over `reps` simulated studies of each mode (the
    "+ screen" mode only at the trial counts in `open_screen`: it ranks the screen at every
    screened trial, slow at 192). `at_target`: the share of studies decided at the target."""
    rows = []
    for name, pool in pools.items():
        for n in trials:
            modes = {
                m: f
                for m, f in MODES.items()
                if m in only and (n in open_screen or "screen" not in m)
            }
            agg: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
            for rep in range(reps):
                s = Study(pool, n, factor, random.Random(rep))
                for mode, policy in modes.items():
                    p = policy(s)
                    out = schedule(s, workers, p)
                    decided = p.ladder.decided or {}
                    out["at_target"] = float(decided.get("rung") == len(s.plan) - 1)
                    out["regret"] = regret(s, p.ladder)
                    agg[mode].append(out)
            row: dict[str, Any] = {"pool": name, "trials": n, "plan": s.plan}
            for mode, res in agg.items():
                row[mode] = {k: statistics.fmean(r[k] for r in res) for k in res[0]}
            rows.append(row)
    return rows


def regret(s: Study, ladder: pm.Ladder) -> float:
    """How far the pick (the best non-baseline at the decided rung, in the pick's order) is
    from the study's best trial, in the latent quality's units (its spread is 1): 0 when the
    study picked its best configuration."""
    k = int((ladder.decided or {}).get("rung", 0))
    ran = [r for r in ladder.rungs[k].results.values() if not r.baseline]
    pick = pm.ranked(ran, OBJECTIVES)[0] if ran else 0
    return s.quality[pick] - min(s.quality)


def cell(x: Mapping[str, Any] | None, base: Mapping[str, Any], first: bool) -> str:
    """One mode's cell: idle / waiting idle, makespan and work against synchronous."""
    if x is None:
        return "-"
    out = f"{x['idle_share']:.0%} / {x['waiting_idle_share']:.0%}"
    if not first:
        out += (
            f" (makespan {x['makespan_s'] / base['makespan_s']:.2f}x, "
            f"work {x['busy_s'] / base['busy_s']:.2f}x)"
        )
    return out + f", target {x['at_target']:.0%}, regret {x['regret']:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--collect", nargs="+", metavar="STUDY_DIR", help="write the durations")
    ap.add_argument("--durations", default=str(DURATIONS))
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--trials", default="48,96,192")
    ap.add_argument("--factor", type=int, default=20)
    ap.add_argument("--reps", type=int, default=30, help="simulated studies per cell")
    ap.add_argument(
        "--open-screen", default="48", help="trial counts to run the '+ screen' mode at"
    )
    ap.add_argument(
        "--modes",
        default="",
        help="comma-separated modes to run (default: all); synchronous always runs",
    )
    ap.add_argument(
        "--grow", default="pasha", choices=("pasha", "always"), help="rungs.grow of the studies"
    )
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    GROW[0] = args.grow
    if args.collect:
        pools = collect(args.collect)
        Path(args.durations).write_text(json.dumps(pools, indent=1) + "\n")
        print(f"wrote {args.durations}: {', '.join(pools)}")
        return 0
    try:
        pools = json.loads(Path(args.durations).read_text())
        trials = [int(x) for x in args.trials.split(",")]
        open_screen = [int(x) for x in args.open_screen.split(",") if x]
    except (OSError, ValueError) as e:
        print(f"rung_idle_sim.py: {e}", file=sys.stderr)
        return 2
    wanted = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in wanted if m not in MODES]
    if unknown:
        print(f"rung_idle_sim.py: unknown mode(s) {unknown}; modes: {list(MODES)}", file=sys.stderr)
        return 2
    modes = [m for m in MODES if not wanted or m in wanted or m == "synchronous"]
    rows = run(pools, trials, args.workers, args.factor, args.reps, open_screen, modes)
    if args.json:
        Path(args.json).write_text(json.dumps({"workers": args.workers, "rows": rows}, indent=1))
    print(
        f"{args.workers} workers, mean of {args.reps} simulated studies per row; per mode: idle "
        "share / waiting idle share (idle while a probe below the top rung runs); makespan and "
        "probe-seconds against synchronous; the share of studies decided at the target; the "
        "pick's regret\n"
    )
    print("| durations from | trials | rungs | " + " | ".join(modes) + " |")
    print("|---|---|---|" + "---|" * len(modes))
    for r in rows:
        cells = [cell(r.get(m), r["synchronous"], i == 0) for i, m in enumerate(modes)]
        plan = " -> ".join(map(str, r["plan"]))
        print(f"| {r['pool']} | {r['trials']} | {plan} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
