"""What the script path costs per trial: a built-in workload vs a training script of the same
model, both run as a study runs a trial.

A = the built-in `tiny_gpt` workload run by the probe's loop; B = `assets/tiny_gpt_script.py`, a
user-style loop around the same workload's model and data that reports through
`autotune.trial()`. Same seed, knobs (lr 3e-3, clip_norm 1, warm-up 10), steps, micro-batch and
one torch thread. Each trial goes through `autotune.process.launcher.run_trial_process(...,
spare=True)`: forked by the zygote for the trial's environment (one zygote serves both sides),
exactly as a study's Ray worker runs it. That zygote preloads what a script study's does
(`AUTOTUNE_PRELOAD=autotune.recipe.trial`, `study.workers.SCRIPT_PRELOAD`); the built-in side
never imports that module, so sharing the zygote costs it nothing. One warm-up trial of each,
then `--pairs` pairs in alternating order (AB, BA, ...). Reported: the median trial wall time
(fork to exit) of each side and their ratio B/A (goal <= 1.10), start time, steady step
throughput, and whether the two loss curves agree (if they did not, the ratio would compare
different training).

    python benchmarks/script_overhead.py                # the run recorded in RESULTS.md
    python benchmarks/script_overhead.py --pairs 3 --steps 50 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _common as c

from autotune.probe import ProbeConfig

SCRIPT = Path(__file__).resolve().parent / "assets" / "tiny_gpt_script.py"
KNOBS = {"lr": 3e-3, "clip_norm": 1.0, "warmup_steps": 10}


def config(kind: str, size: str, steps: int) -> dict[str, Any]:
    common: dict[str, Any] = {"steps": steps, "micro_batch": 16, "threads": 1, "knobs": KNOBS}
    if kind == "builtin":
        return ProbeConfig(workload="tiny_gpt", size=size, **common).to_dict()
    return ProbeConfig(
        workload=f"script:{SCRIPT.name}", script=str(SCRIPT), args=[size], **common
    ).to_dict()


def trial(kind: str, size: str, steps: int) -> dict[str, Any]:
    from autotune.process.launcher import run_trial_process
    from autotune.process.zygote import PRELOAD_ENV
    from autotune.study.workers import SCRIPT_PRELOAD

    out = run_trial_process(
        config(kind, size, steps),
        {},
        timeout_s=300,
        threads=1,
        spare=True,
        extra_env={PRELOAD_ENV: ",".join(SCRIPT_PRELOAD)},  # as a script study's zygote
    )
    s = out.get("summary") or {}
    if out.get("outcome") != "complete":
        raise SystemExit(
            f"{kind} trial: {out.get('outcome')} {out.get('cause')}: "
            f"{out.get('error')}\n" + "\n".join(out.get("log_tail") or [])
        )
    return {
        "kind": kind,
        "wall_s": out["wall_s"],
        "start_s": out.get("start_s"),
        "spare": out.get("spare"),
        "throughput": (s.get("metrics") or {}).get("throughput"),
        "loss": (s.get("series") or {}).get("loss"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    started = time.perf_counter()
    c.one_thread()
    m = c.machine()
    for kind in ("builtin", "script"):  # warm-up: the zygote starts, the first imports
        c.say(f"warm-up {kind}: {trial(kind, a.size, a.steps)['wall_s']:.2f} s")
    runs: list[dict[str, Any]] = []
    for i in range(a.pairs):
        order = ("builtin", "script") if i % 2 == 0 else ("script", "builtin")
        for kind in order:
            runs.append(trial(kind, a.size, a.steps))
            c.say(f"pair {i} {kind}: {runs[-1]['wall_s']:.2f} s")
    sides = {k: [r for r in runs if r["kind"] == k] for k in ("builtin", "script")}
    med = {
        k: {f: statistics.median(r[f] for r in v) for f in ("wall_s", "start_s", "throughput")}
        for k, v in sides.items()
    }
    ratios = [
        s["wall_s"] / b["wall_s"] for b, s in zip(sides["builtin"], sides["script"], strict=True)
    ]
    ref = sides["builtin"][0]["loss"]  # every trial of both sides against the first
    same_length = all(len(r["loss"]) == len(ref) for r in runs)
    gap = max(
        abs(x - y) / max(abs(x), 1e-12) for r in runs for x, y in zip(ref, r["loss"], strict=False)
    )
    result = {
        "median": med,
        "ratio_wall": med["script"]["wall_s"] / med["builtin"]["wall_s"],
        "pair_ratios": ratios,
        "loss_max_rel_diff": gap,
        "losses_agree": same_length and gap <= 1e-6,
        "all_spare": all(r["spare"] for r in runs),
        "machine": c.finish_machine(m, started),
        "command": " ".join(["python", *sys.argv]),
    }
    if a.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    rows = [
        [k, c.fmt(v["wall_s"]), c.fmt(v["start_s"]), c.fmt(v["throughput"])] for k, v in med.items()
    ]
    print(c.table(["side", "trial wall s (median)", "start s", "samples/s"], rows))
    print(
        f"\nratio script/builtin (median wall): {result['ratio_wall']:.3f} "
        f"(pairs {min(ratios):.3f}-{max(ratios):.3f}); loss curves agree: "
        f"{result['losses_agree']} (max rel diff {gap:.2e}); every trial forked by a spare "
        f"zygote: {result['all_spare']}"
    )
    print(c.footer(result["machine"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
