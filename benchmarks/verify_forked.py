"""What `autotune verify`'s probes cost with a zygote kept for the command, against a fresh
process per probe (how they ran before).

A verification runs the recipe and the baseline interleaved over its seeds (`verify --seeds 3`:
six probes), each in a process of its own. A fresh process imports Python's and torch's modules
first (seconds on a CPU); inside `autotune.process.zygotes.serving` each probe is forked by a
zygote of its environment that did those imports once. This runs the same six probes both ways,
in rounds whose order alternates (a drifting machine moves both columns alike), and reports the
wall time of the six, each probe's start (asking for the process -> the probe's `start` event),
and whether both ways gave the same losses at every step (they must: the same seed).

    python benchmarks/verify_forked.py                   # gradclip's probe, 3 seeds, 3 rounds
    python benchmarks/verify_forked.py --steps 500 --rounds 5 --json results/verify_forked.json
    python benchmarks/verify_forked.py --threads 2       # each probe on two torch threads
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.probe.summary import loss_of
from autotune.process import zygotes
from autotune.recipe.verify import run_interleaved, run_one


def arms(steps: int | None, threads: int) -> list[tuple[Any, dict[str, str], str]]:
    """The shipped gradclip space's probe: a clipped, warmed-up 'recipe' and the defaults."""
    space = sp.load("gradclip", [f"probe.steps={steps}"] if steps else [])
    recipe = sp.probe_config(space, knobs={"clip_norm": 1.0, "warmup_steps": 10})
    base = sp.probe_config(space, knobs={"clip_norm": None, "warmup_steps": 0})
    return [
        (replace(recipe, threads=threads), {}, "recipe"),
        (replace(base, threads=threads), {}, "baseline"),
    ]


def fresh(arm_list: list[Any], seeds: list[int]) -> list[dict[str, Any]]:
    """Each probe a fresh process (outside `serving`), interleaved by seed as verify runs them."""
    quiet: list[str] = []
    return [
        run_one(cfg, env, seed, timeout_s=600, threads=None, say=quiet.append, label=label)
        for seed in seeds
        for cfg, env, label in arm_list
    ]


def forked(arm_list: list[Any], seeds: list[int]) -> list[dict[str, Any]]:
    """The same, as `verify` runs them now: forked by a zygote kept for the runs."""
    quiet: list[str] = []
    ran = run_interleaved(arm_list, seeds, timeout_s=600, threads=None, say=quiet.append)
    return [ran[k][i] for i in range(len(seeds)) for k in range(len(arm_list))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="probe steps (default: the space's)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each probe")
    ap.add_argument("--json", default=None, help="write every number to this file")
    a = ap.parse_args()
    json_path = Path(a.json).resolve() if a.json else None
    load_start = os.getloadavg()[0]
    arm_list, seeds = arms(a.steps, a.threads), list(range(1, a.seeds + 1))
    os.chdir(tempfile.mkdtemp())  # the probe processes import the installed package
    walls: dict[str, list[float]] = {"fresh": [], "forked": []}
    starts: dict[str, list[float]] = {"fresh": [], "forked": []}
    speed: dict[str, list[float]] = {"fresh": [], "forked": []}  # each probe's throughput
    same = True
    for r in range(a.rounds):
        order = ("fresh", "forked") if r % 2 == 0 else ("forked", "fresh")
        got: dict[str, list[dict[str, Any]]] = {}
        for way in order:
            t0 = time.perf_counter()
            got[way] = (fresh if way == "fresh" else forked)(arm_list, seeds)
            walls[way].append(time.perf_counter() - t0)
            starts[way] += [float(o["start_s"] or 0.0) for o in got[way]]
            speed[way] += [float(o["summary"]["metrics"]["throughput"]) for o in got[way]]
            bad = [o for o in got[way] if o["outcome"] != "complete"]
            if bad:
                sys.exit(f"a probe did not complete: {bad[0]['outcome']} {bad[0].get('error')}")
        same &= all(
            loss_of(x["summary"]) == loss_of(y["summary"])
            for x, y in zip(got["fresh"], got["forked"], strict=True)
        )
        print(
            f"round {r + 1}: fresh {walls['fresh'][-1]:.1f} s, forked {walls['forked'][-1]:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    assert not zygotes._ZYGOTES  # none outlived the runs
    n = len(seeds) * len(arm_list)
    ratio = [f / s for f, s in zip(walls["forked"], walls["fresh"], strict=True)]
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average_start": load_start,
        "probes_per_way": n,
        "steps": arm_list[0][0].steps,
        "wall_s": walls,
        "threads": a.threads,
        "start_s_median": {k: statistics.median(v) for k, v in starts.items()},
        "throughput": speed,
        "throughput_median": {k: statistics.median(v) for k, v in speed.items()},
        "ratio_forked_over_fresh": ratio,
        "same_losses": same,
    }
    print(
        f"{n} probes of {out['steps']} steps, {a.threads} thread(s), {a.rounds} rounds: "
        f"fresh {statistics.mean(walls['fresh']):.1f} s, forked "
        f"{statistics.mean(walls['forked']):.1f} s, ratio {statistics.mean(ratio):.3f} "
        f"({min(ratio):.3f}-{max(ratio):.3f}); a probe's start (median) "
        f"{out['start_s_median']['fresh']:.2f} s fresh, {out['start_s_median']['forked']:.3f} s "
        f"forked; a probe's throughput (median) {out['throughput_median']['fresh']:.0f} fresh, "
        f"{out['throughput_median']['forked']:.0f} forked; same losses at every step: {same}"
    )
    if json_path is not None:
        json_path.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
