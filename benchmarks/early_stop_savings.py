"""Early-stop savings: what stopping a diverged probe at once saves a search, and what it costs.

The space: the `mlp` workload searched at and above its unstable learning rate (lr log-uniform
from unstable_lr to 10 x unstable_lr, i.e. 0.3-3.0 for tiny), with clip_norm from {0 (off), 0.3,
1, 3} and warm-up 0-40 steps, 150-step probes, the default objectives (loss_cv down, throughput
up) and constraint (loss_drop >= 0.05). A good share of such configurations diverge: without
warm-up, or at the top of the lr range, the loss explodes within the first steps.

One fixed sequence of configurations (the baseline: PyTorch's defaults at unstable_lr; then
the suggestions of one seeded RandomSampler, drawn with the study's own `make_sampler` and
`suggest`) is probed twice, with `probe.divergence.stop_early` true and false, alternating the
order per configuration so that machine noise hits both alike. Compared: the total optimizer
steps and the total probe wall time; that every configuration gets the same outcome both ways
and that the runs that did not diverge are identical (loss_cv, final_loss); and that the best
configuration is the same, by the pick rules of `autotune.study.pick` (balanced: the knee of the
Pareto front; stablest: the lowest loss_cv) over the feasible runs. Issue 23's goal: >= 35%
of the steps of the truly divergent runs (judged on the run carried to the end) saved.

This measures the probe, not the orchestration: probes run in this process (`run_probe`, one
torch thread); no Ray, no MLflow, no probe processes. Saved time in a study is larger by the
per-trial overhead it does not touch.

    python benchmarks/early_stop_savings.py           # default: 100 configs x 150 steps, ~1-2 min
    python benchmarks/early_stop_savings.py --quick   # smoke run, < 1 min
    python benchmarks/early_stop_savings.py --full    # mlp small, 120 configs x 300 steps
    python benchmarks/early_stop_savings.py --configs 100 --steps 300 --json es.json
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)
import numpy as np

from autotune import space as sp
from autotune import study as st
from autotune.probe import metrics
from autotune.probe.workload import resolve
from autotune.study import pick as pk

SPACE = """
name: early_stop_savings
workload: {{name: {workload}, size: {size}}}
probe: {{steps: {steps}, micro_batch: 16, precision: fp32, seed: 0, threads: 1}}
budget: {{trials: {configs}}}
sampler: {{name: random, seed: {seed}}}
knobs:
  lr: {{low: {lr_low}, high: {lr_high}, log: true, default: {lr_low}}}
  clip_norm: {{choices: [0.0, 0.3, 1.0, 3.0]}}
  warmup_steps: {{low: 0, high: 40, step: 10}}
"""


def build_space(args: argparse.Namespace) -> sp.Space:
    unstable = resolve(args.workload, args.size).unstable_lr
    text = SPACE.format(
        workload=args.workload,
        size=args.size,
        steps=args.steps,
        configs=args.configs,
        seed=args.seed,
        lr_low=unstable,
        lr_high=10 * unstable,
    )
    return sp.loads(text, source="early_stop_savings.py")


def sequence(space: sp.Space, n: int) -> list[dict[str, Any]]:
    """The baseline, then n - 1 configurations of one seeded random sampler (knob dicts)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    searched = space.searched()
    study = optuna.create_study(
        directions=list(st.directions(space)),  # type: ignore[arg-type]
        sampler=st.make_sampler(space, searched),
    )
    out = [st.trial_setup(space, {}, baseline=True)[0]]
    for _ in range(n - 1):
        trial = study.ask()
        out.append(st.trial_setup(space, st.suggest(trial, space, searched), baseline=False)[0])
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # the draw needs no values
    return out


def best(space: sp.Space, runs: list[dict[str, Any]], how: str) -> int | None:
    """The index of the configuration `autotune.study.pick` picks among the feasible runs."""
    objectives = c.objectives_of(space)
    cands = []
    for i, r in enumerate(runs):
        outcome = c.outcome_name(r["status"])
        if not all(v <= 0 for v in st.constraints_of(space, outcome, r["metrics"])):
            continue
        cands.append(
            pk.Candidate(
                number=i,
                values=st.values_of(space, r["metrics"]),
                metrics=dict(r["metrics"]),
                knobs=dict(r["knobs"]),
                env={},
                params={},
            )
        )
    if not cands:
        return None
    return pk.pick(cands, objectives, how).number


def truly_diverged(run: dict[str, Any], runs: list[dict[str, Any]]) -> bool:
    """A run carried to the end that truly diverged: non-finite, far above the best, or flat."""
    final = run["metrics"].get("final_loss")
    # carried on (stop_early false), only a non-finite loss ends a run before its length
    if run["steps_run"] < run["steps_planned"] or final is None or not math.isfinite(final):
        return True
    finals = [r["metrics"].get("final_loss") for r in runs]
    best = min(f for f in finals if f is not None and math.isfinite(f))
    initial = run["metrics"].get("initial_loss")
    return bool(final > 1.5 * best or (initial is not None and final >= 0.9 * initial))


def knob_label(k: dict[str, Any]) -> str:
    return f"lr {k['lr']:.3g}, clip {k['clip_norm']:g}, warmup {k['warmup_steps']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--steps", type=int, default=150, help="probe length")
    ap.add_argument("--configs", type=int, default=100, help="configurations, baseline included")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random sampler")
    ap.add_argument("--quick", action="store_true", help="smoke run: 12 configs x 100 steps")
    ap.add_argument("--full", action="store_true", help="mlp small, 120 configs x 300 steps")
    ap.add_argument("--json", metavar="FILE", help="write the result as JSON")
    ap.add_argument("--plot", default=str(c.PLOTS / "early_stop_savings.png"))
    args = ap.parse_args(argv)
    if args.quick:
        args.configs, args.steps = 12, 100
    if args.full:
        args.size, args.configs, args.steps = "small", 120, 300

    c.one_thread()
    started = time.perf_counter()
    mach = c.machine()
    space = build_space(args)
    configs = sequence(space, args.configs)
    # Warm up (imports, allocator, the workload's data) so that the first timed probe is fair.
    c.probe(space, space.baseline_knobs(), steps=20, stop_early=False)
    on: list[dict[str, Any]] = []
    off: list[dict[str, Any]] = []
    for i, knobs in enumerate(configs):
        order = [(True, on), (False, off)] if i % 2 == 0 else [(False, off), (True, on)]
        for stop, sink in order:
            rec = c.probe(space, knobs, stop_early=stop)
            rec.pop("summary", None)
            sink.append(rec)
        c.say(
            f"  config #{i:<3} of {len(configs)} {knob_label(knobs):<38} {on[-1]['status']:<8} "
            f"steps {on[-1]['steps_run']:>4} vs {off[-1]['steps_run']:>4}, "
            f"{on[-1]['wall_s']:.2f} s vs {off[-1]['wall_s']:.2f} s"
        )

    steps_on = sum(r["steps_run"] for r in on)
    steps_off = sum(r["steps_run"] for r in off)
    wall_on = sum(r["wall_s"] for r in on)
    wall_off = sum(r["wall_s"] for r in off)
    diverged = [i for i, r in enumerate(off) if r["status"] == "diverged"]
    same_outcomes = all(a["status"] == b["status"] for a, b in zip(on, off, strict=True))
    same_ok_runs = all(
        a["metrics"].get(m) == b["metrics"].get(m)
        for a, b in zip(on, off, strict=True)
        if a["status"] == "ok" and b["status"] == "ok"
        for m in ("loss_cv", "final_loss", "loss_drop", "spike_count")
    )
    stop_at = [on[i]["steps_run"] for i in diverged]
    picks = {
        how: {"stop_early": best(space, on, how), "run_on": best(space, off, how)}
        for how in ("balanced", "stablest")
    }
    saved_steps = 1 - steps_on / steps_off
    saved_wall = 1 - wall_on / wall_off
    # Issue 23: the runs that truly diverge, judged on the run carried to the end (a non-finite
    # loss, a final loss above 1.5x the best of the set, or one that never learned: at least
    # 0.9x its initial loss); how much of their steps stopping early saved, and which stopped
    # runs were not truly divergent (false divergences).
    truly = [i for i, r in enumerate(off) if truly_diverged(r, off)]
    steps_truly = sum(off[i]["steps_run"] for i in truly)
    saved_truly = (
        sum(off[i]["steps_run"] - on[i]["steps_run"] for i in truly) / steps_truly
        if steps_truly
        else None
    )
    false_div = [i for i, r in enumerate(on) if r["status"] == "diverged" and i not in truly]
    c.finish_machine(mach, started)

    out = {
        "benchmark": "early_stop_savings",
        "workload": f"{args.workload} ({args.size})",
        "steps": args.steps,
        "searched": {k: v.to_dict() for k, v in space.searched().items()},
        "configs": configs,
        "diverged": len(diverged),
        "diverged_share": len(diverged) / len(configs),
        "mean_stop_step": float(np.mean(stop_at)) if stop_at else None,
        "median_stop_step": float(np.median(stop_at)) if stop_at else None,
        # stopping every diverged run after its first step: the most stop_early can save here
        "saved_steps_bound": sum(off[i]["steps_run"] - 1 for i in diverged) / steps_off
        if steps_off
        else None,
        "steps_stop_early": steps_on,
        "steps_run_on": steps_off,
        "wall_s_stop_early": wall_on,
        "wall_s_run_on": wall_off,
        "saved_steps": saved_steps,
        "saved_wall": saved_wall,
        "same_outcomes": same_outcomes,
        "identical_non_diverged_runs": same_ok_runs,
        "picks": picks,
        "same_best": {how: p["stop_early"] == p["run_on"] for how, p in picks.items()},
        "truly_diverged": truly,
        "saved_steps_of_truly_diverged": saved_truly,
        "false_divergences": false_div,
        "goal": ">= 35% of the steps of truly divergent runs saved (issue 23)",
        "goal_met": saved_truly is not None and saved_truly >= 0.35,
        "runs_stop_early": on,
        "runs_run_on": off,
        "machine": mach,
    }

    fig, axes = c.figure(10.0, 3.6, 1, 2)
    x = np.arange(1, len(configs) + 1)
    for ax, key, what in (
        (axes[0][0], "steps_run", "optimizer steps"),
        (axes[0][1], "wall_s", "s"),
    ):
        ax.plot(x, np.cumsum([r[key] for r in off]), label="stop_early: false", color="#ff7f0e")
        ax.plot(x, np.cumsum([r[key] for r in on]), label="stop_early: true", color="#1f77b4")
        for i in diverged:
            ax.axvline(i + 1, color="#d62728", alpha=0.12, lw=2)
        ax.set_xlabel("configurations (red: diverged)")
        ax.set_ylabel(f"cumulative {what}")
        ax.legend(fontsize=8, loc="upper left")
    axes[0][0].set_title(f"steps saved: {saved_steps:.0%}", fontsize=9)
    axes[0][1].set_title(f"probe wall time saved: {saved_wall:.0%}", fontsize=9)
    c.save_figure(fig, args.plot)
    out["plot"] = str(args.plot)
    c.write_json(args.json, out)

    lr = space.searched()["lr"]
    print(
        f"## Early-stop savings: {out['workload']}, lr {lr.low:g}-{lr.high:g} (log), clip_norm "
        f"{{0, 0.3, 1, 3}}, warm-up 0-40; {len(configs)} configurations x {args.steps} steps\n"
    )
    rows = [
        ["optimizer steps", f"{steps_off}", f"{steps_on}", f"**{saved_steps:.0%}**"],
        ["probe wall time (s)", f"{wall_off:.1f}", f"{wall_on:.1f}", f"**{saved_wall:.0%}**"],
    ]
    print(c.table(["", "stop_early: false", "stop_early: true", "saved"], rows))
    mean_stop = f"{out['mean_stop_step']:.0f}" if stop_at else "n/a"
    median_stop = f"{out['median_stop_step']:.0f}" if stop_at else "n/a"
    bound = out["saved_steps_bound"]
    print(
        f"\n{len(diverged)} of {len(configs)} configurations diverged "
        f"({out['diverged_share']:.0%}); with stop_early they stopped after {mean_stop} steps "
        f"on average (median {median_stop}; the probe checks every step while throughput is "
        f"not yet measured, the first {metrics.throughput_warmup_steps(args.steps)} here, then "
        f"every {space.probe.telemetry_every}). Stopping every diverged run after its first "
        f"step would save at most {bound:.0%} on this set"
        "."
    )
    share = f"{saved_truly:.0%}" if saved_truly is not None else "n/a"
    print(
        f"\n{len(truly)} configurations truly diverged (carried to the end: a non-finite loss, a "
        f"final loss above 1.5x the best of the set, or >= 0.9x its initial loss); stopping "
        f"early saved **{share}** of their steps; {len(false_div)} stopped configurations were "
        f"not truly divergent{': ' + ', '.join(f'#{i}' for i in false_div) if false_div else ''}"
        f". Goal (issue 23) >= 35% of the truly divergent runs' steps saved: "
        f"**{'met' if out['goal_met'] else 'not met'}**."
    )
    pick_rows = []
    for how, p in picks.items():
        a, b = p["stop_early"], p["run_on"]
        pick_rows.append(
            [
                how,
                f"#{a} ({knob_label(configs[a])})" if a is not None else "none",
                f"#{b} ({knob_label(configs[b])})" if b is not None else "none",
                "yes" if a == b else "**no**",
            ]
        )
    print()
    print(c.table(["pick", "stop_early: true", "stop_early: false", "same"], pick_rows))
    print(
        f"\nSame outcome for every configuration both ways: {'yes' if same_outcomes else 'NO'}; "
        f"runs that did not diverge identical (loss_cv, final_loss, loss_drop, spike_count): "
        f"{'yes' if same_ok_runs else 'NO'}. The balanced pick also weighs throughput, "
        "measured separately in each mode: on a noisy machine it can differ for that reason "
        "alone; the stablest pick depends on loss_cv only."
    )
    print(c.footer(mach))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
