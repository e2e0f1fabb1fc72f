"""The quick start's case: do PyTorch's defaults truly fail where a configuration from the space's
range holds, over fresh seeds, run to the target length with no early stopping?

Runs the space's baseline (trial 0: every searched knob at PyTorch's default, at the space's
fixed learning rate) and a few configurations from the space's range, each over fresh seeds
(default 1-5: other initialisation and data order than the study's seed 0), for
`budget.target_steps` steps at `probe.batch`, with `divergence.stop_early` off: a curve is
judged whole, not by the divergence monitor. A run "fails" when its loss goes non-finite (the
probe ends there), or when it ends above `--fail-factor` (default 1.5) times the best
configuration's median final loss, or it never learns (`loss_drop` < 0.05, the spaces'
constraint). Prints, per configuration and seed: the final loss (mean of the last 10% of the
steps' training losses), the largest loss over the initial one, whether the monitor would have
called it diverged (and at which step), non-finite, failed; then per configuration the count of
failures and the steps per second (one torch thread, in this process; relative on a shared
machine), which sizes the study's run time.

    python benchmarks/quickstart_case.py                        # the shipped gradclip space
    python benchmarks/quickstart_case.py --space defaults_hold   # where the defaults are right
    python benchmarks/quickstart_case.py --set knobs.lr=0.3 --seeds 1,2 --steps 300
    python benchmarks/quickstart_case.py --config 'clip_norm=1,warmup_steps=40' --json out.json

Probes run in this process with `autotune.probe.run_probe` on one torch thread: no Ray, no
MLflow, no probe processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)
import numpy as np

from autotune import space as sp
from autotune.probe import run_probe

# Configurations from gradclip's range (clip_norm 0.05-5, warm-up 0-100, eps 1e-10-1e-5,
# accumulation 1/2/4), next to the baseline. Knobs not named keep the baseline's values.
CANDIDATES = (
    "clip_norm=1.0,warmup_steps=40",
    "clip_norm=0.5,warmup_steps=80",
    "clip_norm=0.2,warmup_steps=30,adam_eps=1e-6,accum_steps=4",
)


def parse_config(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if not value:
            raise SystemExit(f"--config {text!r}: {part!r} is not KNOB=VALUE")
        out[key.strip()] = float(value) if any(ch in value for ch in ".e") else int(value)
    return out


def run_arm(
    space: sp.Space, name: str, knobs: dict[str, Any], seeds: list[int], steps: int
) -> list[dict[str, Any]]:
    runs = []
    for seed in seeds:
        cfg = sp.probe_config(space, knobs=knobs, seed=seed, steps=steps)
        divergence = {**cfg.divergence, "stop_early": False}
        cfg = dataclasses.replace(cfg, threads=1, divergence=divergence)
        t0 = time.perf_counter()
        s = run_probe(cfg)
        wall = time.perf_counter() - t0
        m, losses = s.get("metrics") or {}, np.asarray(s["series"]["loss"], dtype=float)
        finite = losses[np.isfinite(losses)]
        peak = float(finite.max()) if len(finite) else None  # the largest finite loss
        r = {
            "status": s["status"],
            "cause": s.get("divergence_cause"),
            "diverged_at_step": s.get("diverged_at_step"),
            "steps_run": s["steps_run"],
            "steps_planned": s["steps_planned"],
            "wall_s": wall,
        }
        initial = m.get("initial_loss")
        runs.append(
            {
                "config": name,
                "seed": seed,
                "status": r["status"],
                "cause": r["cause"],
                "flagged_at": r["diverged_at_step"],
                "steps_run": r["steps_run"],
                "steps_planned": r["steps_planned"],
                "nonfinite": bool(
                    r["steps_run"] < r["steps_planned"] or not np.isfinite(losses).all()
                ),
                "final_loss": m.get("final_loss"),
                "initial_loss": m.get("initial_loss"),
                "loss_drop": m.get("loss_drop"),
                "peak_x": peak / initial if peak is not None and initial else None,
                "wall_s": r["wall_s"],
            }
        )
        c.say(
            f"{name} seed {seed}: {r['status']} ({r['cause']}), final "
            f"{c.fmt(m.get('final_loss'))}, {r['steps_run']}/{r['steps_planned']} steps, "
            f"{r['wall_s']:.1f} s"
        )
    return runs


def judge(runs: list[dict[str, Any]], fail_factor: float) -> float:
    """Mark each run failed or not; return the reference (the best arm's median final loss)."""
    by_arm: dict[str, list[float]] = {}
    for r in runs:
        f = r["final_loss"]
        ok = not r["nonfinite"] and f is not None and f == f
        by_arm.setdefault(r["config"], []).append(f if ok else float("inf"))
    best = min(statistics.median(v) for v in by_arm.values())
    for r in runs:
        f = r["final_loss"]
        r["failed"] = bool(
            r["nonfinite"]
            or f is None
            or f != f
            or f > fail_factor * best
            or (r["loss_drop"] is not None and r["loss_drop"] < 0.05)
        )
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="gradclip")
    ap.add_argument("--set", action="append", default=[], help="a space override, key.path=value")
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--steps", type=int, help="default: the space's budget.target_steps")
    ap.add_argument("--config", action="append", help="KNOB=VALUE,...; default: three from range")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--fail-factor", type=float, default=1.5)
    ap.add_argument("--json")
    args = ap.parse_args()

    c.one_thread()
    started = time.perf_counter()
    machine = c.machine()
    space = sp.load(args.space, args.set)
    steps = args.steps or space.budget.target_steps or space.probe.steps
    seeds = [int(s) for s in args.seeds.split(",")]
    base = dict(space.baseline_knobs())
    arms: list[tuple[str, dict[str, Any]]] = [] if args.no_baseline else [("defaults", base)]
    for text in args.config or CANDIDATES:
        arms.append((text, {**base, **parse_config(text)}))

    runs: list[dict[str, Any]] = []
    for name, knobs in arms:
        runs += run_arm(space, name, knobs, seeds, steps)
    best = judge(runs, args.fail_factor)

    print(
        f"Space {args.space} {' '.join(args.set)}: {space.workload.name} {space.workload.size}, "
        f"lr {base.get('lr')}, batch {space.probe.samples_per_step}, {steps} steps, seeds "
        f"{args.seeds}, no early stop. Failed: non-finite, final > {args.fail_factor} x "
        f"{best:.3g} (the best configuration's median), or loss_drop < 0.05.\n"
    )
    header = ["config", "seed", "final loss", "peak/initial", "monitor", "non-finite", "steps"]
    header.append("failed")
    rows = [
        [
            r["config"],
            r["seed"],
            c.fmt(r["final_loss"]),
            c.fmt(r["peak_x"]),
            f"{r['cause']} @ {r['flagged_at']}" if r["cause"] else "-",
            "yes" if r["nonfinite"] else "no",
            f"{r['steps_run']}/{r['steps_planned']}",
            "FAILED" if r["failed"] else "held",
        ]
        for r in runs
    ]
    print(c.table(header, rows))
    print()
    summary = []
    for name, _ in arms:
        mine = [r for r in runs if r["config"] == name]
        finals = [r["final_loss"] for r in mine if not r["nonfinite"]]
        steps_s = sum(r["steps_run"] for r in mine) / sum(r["wall_s"] for r in mine)
        summary.append(
            [
                name,
                f"{sum(r['failed'] for r in mine)}/{len(mine)}",
                f"{sum(r['nonfinite'] for r in mine)}/{len(mine)}",
                c.fmt(statistics.median(finals)) if finals else "n/a",
                f"{steps_s:.0f} ({steps_s * space.probe.samples_per_step:.0f} samples/s)",
            ]
        )
    print(c.table(["config", "failed", "non-finite", "median final", "steps/s"], summary))
    machine = c.finish_machine(machine, started)
    print(c.footer(machine))
    c.write_json(args.json, {"machine": machine, "steps": steps, "best": best, "runs": runs})


if __name__ == "__main__":
    main()
