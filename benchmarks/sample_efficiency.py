"""Sample efficiency: the study's default sampler against random search, same trial budget.

The space is the shipped `defaults_hold` (gradclip's settings before 2026-12-02: clip_norm,
warmup_steps, adam_eps, accum_steps; objectives loss_cv down and throughput up; constraints: not
diverged, loss_drop >= 0.05) moved, by default, onto the fast `mlp` workload at its unstable
learning rate so that the 18 searches fit in a few minutes on 2 cores; `--full` keeps the shipped
space as it is (tiny_gpt at lr 0.5). Both sides run the same budget with the same sampler seeds (six
by default): the default sampler exactly as `autotune.study.make_sampler` builds it (TPE,
multivariate, constraints read from each trial, n_startup_trials from the space) and Optuna's
RandomSampler. Trial 0 of every search is the baseline (PyTorch's defaults for the searched knobs),
as in a study. With the same seed, TPE's random start-up trials are exactly random search's draws
(the report says how many are shared), so the two curves part where TPE starts to model.

Measured: after each trial, the dominated hypervolume of the feasible trials so far, computed by
Optuna's own `optuna._hypervolume.compute_hypervolume`. Objectives are put on one scale for all
runs: each is turned into a minimisation (throughput negated), then mapped linearly to [0, 1]
between the best (0) and worst (1) feasible value seen over all runs of both samplers; the
reference point is 1.1 on every axis (the worst feasible value seen, worsened by 10% of the
range), so every feasible trial counts. Reported: the mean (min-max over seeds) hypervolume per
trial for both samplers, and the trial at which the default sampler's mean curve reaches random
search's final mean hypervolume (issue goal: within a third of the budget). By default a third
arm runs the default sampler with 3 start-up trials instead of the space's 6 (`--also-startup
3`; `--also-startup ""` drops it): with a shipped budget of 12 trials, half of them random is a
lot, so the script checks whether fewer would do better.

This measures the search and the probe, not the orchestration: probes run in this process
(`run_probe`, one torch thread), Optuna is driven directly with ask/tell on an in-memory study
through the study's own helpers; no Ray, no MLflow. The searches advance in turns, one trial
each, so that machine noise (the throughput objective) hits both samplers alike. A configuration
probed before (by any search) is not probed again: its record is reused.

    python benchmarks/sample_efficiency.py          # mlp, 36 trials x 6 seeds x 3 arms, ~5 min
    python benchmarks/sample_efficiency.py --quick  # smoke run, < 1 min
    python benchmarks/sample_efficiency.py --full   # defaults_hold: tiny_gpt, 48 trials, >30 min
    python benchmarks/sample_efficiency.py --json se.json --plot se.png
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)
import numpy as np

from autotune import space as sp
from autotune.probe.workload import resolve

SAMPLERS = ("tpe", "random")
LABELS = {"tpe": "default (TPE, constrained)", "random": "random search"}
STARTUP_ARM = "tpe-startup-"  # an extra arm: the default sampler with another start-up count
MARGIN = 0.1  # the reference point: worst feasible value seen + 10% of the range


def arm_label(arm: str) -> str:
    if arm.startswith(STARTUP_ARM):
        return f"TPE, {arm[len(STARTUP_ARM) :]} start-up trials"
    return LABELS[arm]


def build_space(args: argparse.Namespace, arm: str, seed: int) -> sp.Space:
    lr = args.lr if args.lr is not None else resolve(args.workload, "tiny").unstable_lr
    sampler = "tpe" if arm.startswith(STARTUP_ARM) else arm
    overrides = [
        f"workload.name={args.workload}",
        f"knobs.lr={lr}",
        f"probe.steps={args.steps}",
        f"budget.trials={args.trials}",
        f"sampler.name={sampler}",
        f"sampler.seed={seed}",
        "probe.threads=1",
    ]
    if arm.startswith(STARTUP_ARM):
        overrides.append(f"sampler.n_startup_trials={arm[len(STARTUP_ARM) :]}")
    return sp.load(args.space, overrides=overrides)


def hypervolume_curves(
    runs: dict[tuple[str, int], list[dict[str, Any]]], directions: list[str]
) -> tuple[dict[tuple[str, int], list[float]], dict[str, Any]]:
    """Per run, the hypervolume after each trial, on the common normalised scale."""
    from optuna._hypervolume import compute_hypervolume

    signs = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    feas = [
        signs * np.asarray(r["values"], dtype=float)
        for rows in runs.values()
        for r in rows
        if r["feasible"]
    ]
    if not feas:
        return {k: [0.0] * len(v) for k, v in runs.items()}, {"feasible_points": 0}
    pts = np.vstack(feas)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    ref = np.full(len(directions), 1.0 + MARGIN)
    curves: dict[tuple[str, int], list[float]] = {}
    for key, rows in runs.items():
        seen: list[np.ndarray] = []
        curve = []
        for r in rows:
            if r["feasible"]:
                seen.append((signs * np.asarray(r["values"], dtype=float) - lo) / span)
            curve.append(float(compute_hypervolume(np.vstack(seen), ref)) if seen else 0.0)
        curves[key] = curve
    scale = {
        "minimised_best": lo.tolist(),
        "minimised_worst": hi.tolist(),
        "reference_point_normalised": ref.tolist(),
        "max_hypervolume": float(np.prod(ref)),
        "feasible_points": len(feas),
    }
    return curves, scale


def first_reaching(curve: list[float], target: float) -> int | None:
    """1-based trial count at which `curve` first reaches `target` (with a float tolerance)."""
    for i, v in enumerate(curve):
        if v >= target - 1e-12:
            return i + 1
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--space", default="defaults_hold", help="a shipped space name or a YAML path")
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--lr", type=float, default=None, help="default: the workload's unstable_lr")
    ap.add_argument("--steps", type=int, default=150, help="probe length")
    ap.add_argument("--trials", type=int, default=36, help="budget per search, baseline included")
    ap.add_argument("--seeds", default="0,1,2,3,4,5", help="sampler seeds, the same for every arm")
    ap.add_argument(
        "--also-startup",
        default="3",
        metavar="N[,M]",
        help="extra arms: the default sampler with N (M, ...) random start-up trials "
        "instead of the space's",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 10 trials of 60 steps")
    ap.add_argument(
        "--full", action="store_true", help="the shipped space unchanged (tiny_gpt), 48 trials"
    )
    ap.add_argument("--json", metavar="FILE", help="write the result as JSON")
    ap.add_argument("--plot", default=str(c.PLOTS / "sample_efficiency.png"))
    args = ap.parse_args(argv)
    if args.quick:
        args.trials, args.steps = 10, 60
    if args.full:
        args.workload, args.lr, args.trials, args.steps = "tiny_gpt", 0.5, 48, 150
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = [*SAMPLERS, *(f"{STARTUP_ARM}{int(n)}" for n in args.also_startup.split(",") if n)]

    c.one_thread()
    started = time.perf_counter()
    mach = c.machine()
    cache: dict[str, dict[str, Any]] = {}
    searches = {
        (name, seed): c.Search(build_space(args, name, seed), cache=cache)
        for name in arms
        for seed in seeds
    }
    space0 = next(iter(searches.values())).space
    for t in range(args.trials):
        for (name, seed), s in searches.items():
            row = s.step()
            c.say(
                f"  trial {t + 1:>3}/{args.trials} {name:>6} seed {seed}: {row['outcome']:<8} "
                f"values {[c.fmt(v) for v in row['values'] or []]}"
                + (" (cached)" if row["cached"] else f" {row['wall_s']:.2f} s")
            )
    runs = {k: s.records for k, s in searches.items()}
    dirs = list(space0.objectives)
    directions = [o.direction for o in dirs]
    curves, scale = hypervolume_curves(runs, directions)

    n = args.trials
    third = max(1, round(n / 3))
    per: dict[str, dict[str, Any]] = {}
    for name in arms:
        mat = np.array([curves[(name, s)] for s in seeds])
        rows = [r for s in seeds for r in runs[(name, s)]]
        per[name] = {
            "mean": mat.mean(axis=0).tolist(),
            "min": mat.min(axis=0).tolist(),
            "max": mat.max(axis=0).tolist(),
            "final_per_seed": mat[:, -1].tolist(),
            "feasible_share": sum(r["feasible"] for r in rows) / len(rows),
            "diverged_share": sum(r["outcome"] == "diverged" for r in rows) / len(rows),
            "sampler_s": sum(searches[(name, s)].sampler_s for s in seeds),
        }
    # With one seed, TPE's start-up trials are the random sampler's draws: the curves share them.
    shared = []
    for seed in seeds:
        k = 0
        for a, b in zip(runs[("tpe", seed)], runs[("random", seed)], strict=True):
            if a["params"] != b["params"]:
                break
            k += 1
        shared.append(k)
    target = per["random"]["mean"][-1]
    reach_mean = first_reaching(per["tpe"]["mean"], target)
    reach_seeds = [first_reaching(curves[("tpe", s)], target) for s in seeds]
    goal_met = reach_mean is not None and reach_mean <= n / 3
    for name in arms:
        per[name]["trials_to_reach_random_final_mean"] = first_reaching(per[name]["mean"], target)
        per[name]["trials_to_reach_per_seed"] = [
            first_reaching(curves[(name, s)], target) for s in seeds
        ]

    probes_run = len(cache)
    probe_s = sum(r["wall_s"] for r in cache.values())
    c.finish_machine(mach, started)
    out = {
        "benchmark": "sample_efficiency",
        "space": args.space,
        "workload": f"{space0.workload.name} ({space0.workload.size})",
        "lr": space0.knobs.get("lr"),
        "steps": args.steps,
        "searched": {k: v.to_dict() for k, v in space0.searched().items()},
        "objectives": [o.model_dump() for o in dirs],
        "constraints": [x.model_dump() for x in space0.constraints],
        "trials": n,
        "seeds": seeds,
        "n_startup_trials": space0.sampler.n_startup_trials,
        "arms": {name: arm_label(name) for name in arms},
        "normalisation": scale,
        "samplers": per,
        "target_random_final_mean": target,
        "tpe_trials_to_reach_target_mean_curve": reach_mean,
        "tpe_trials_to_reach_target_per_seed": reach_seeds,
        "goal": "default sampler reaches random's final mean hypervolume within a third of "
        "the budget",
        "goal_met": goal_met,
        "shared_leading_trials_per_seed": shared,
        "probes_run": probes_run,
        "probe_s": probe_s,
        "runs": {f"{k[0]}:{k[1]}": v for k, v in runs.items()},
        "machine": mach,
    }

    # The plot: mean hypervolume per trial, band min-max over the seeds.
    fig, axes = c.figure(7.0, 4.2)
    ax = axes[0][0]
    x = np.arange(1, n + 1)
    colors = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")
    for name, color in zip(arms, colors, strict=False):
        ax.plot(x, per[name]["mean"], color=color, label=f"{arm_label(name)} (mean)")
        ax.fill_between(x, per[name]["min"], per[name]["max"], color=color, alpha=0.2)
    ax.axhline(target, color="#555555", ls="--", lw=1, label="random's final mean")
    ax.axvline(n / 3, color="#999999", ls=":", lw=1, label="a third of the budget")
    if reach_mean is not None:
        ax.plot([reach_mean], [per["tpe"]["mean"][reach_mean - 1]], "o", color="#1f77b4")
    ax.set_xlabel("trials (trial 1 = the baseline)")
    ax.set_ylabel("hypervolume (normalised objectives)")
    ax.set_title(
        f"{out['workload']} lr {out['lr']}, {args.steps} steps: {len(seeds)} seeds, band = min-max",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="lower right")
    c.save_figure(fig, args.plot)
    out["plot"] = str(args.plot)
    c.write_json(args.json, out)

    # The report.
    print(
        f"## Sample efficiency: `{args.space}` on {out['workload']} at lr {out['lr']}, "
        f"{args.steps}-step probes, {n} trials x {len(seeds)} seeds per sampler\n"
    )
    print(
        "Searched: "
        + ", ".join(f"{k} {v.to_dict()}" for k, v in space0.searched().items())
        + f"; objectives {', '.join(f'{o.metric} ({o.direction})' for o in dirs)}.\n"
    )
    head = ["sampler", f"HV at trial {third}", f"HV at trial {n} (final)", "final per seed"]
    head += ["feasible", "diverged", "sampler time (s)"]
    head.append("trials to random's final")
    rows = []
    for name in arms:
        p = per[name]
        mid = [curves[(name, s)][third - 1] for s in seeds]
        rows.append(
            [
                arm_label(name),
                f"{statistics.fmean(mid):.3f} ({min(mid):.3f}-{max(mid):.3f})",
                f"**{p['mean'][-1]:.3f}** ({p['min'][-1]:.3f}-{p['max'][-1]:.3f})",
                ", ".join(f"{v:.3f}" for v in p["final_per_seed"]),
                f"{p['feasible_share']:.0%}",
                f"{p['diverged_share']:.0%}",
                f"{p['sampler_s']:.1f}",
                str(p["trials_to_reach_random_final_mean"] or "never")
                + " ("
                + ", ".join(str(v or "never") for v in p["trials_to_reach_per_seed"])
                + ")",
            ]
        )
    print(c.table(head, rows))
    reach = f"trial {reach_mean}" if reach_mean is not None else f"not within {n} trials"
    print(
        f"\nThe default sampler's mean hypervolume reaches random search's final mean "
        f"({target:.3f}) at **{reach}** of {n} (goal: <= {n / 3:.0f}, a third of the budget: "
        f"**{'met' if goal_met else 'not met'}**); per seed: "
        + ", ".join(str(v) if v is not None else "never" for v in reach_seeds)
        + "."
    )
    print(
        f"\nHV: objectives as minimisations (throughput negated), each scaled to [0, 1] between "
        f"the best and worst feasible value over all {len(arms) * len(seeds)} runs; reference "
        f"point {MARGIN + 1:g} per axis (max possible {scale.get('max_hypervolume', 0):.2f}). "
        f"Both samplers drew the same first {', '.join(map(str, shared))} trials (per seed: "
        f"the baseline and TPE's random start-up). {probes_run} distinct probes, "
        f"{probe_s:.0f} s of probing; wall {mach['wall_s']:.0f} s."
    )
    print("\n" + c.machine_line(mach))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
