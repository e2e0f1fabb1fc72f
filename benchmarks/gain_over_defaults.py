"""Gain over PyTorch's defaults: tune each built-in workload at its unstable learning rate, then
check over seeds, and at five times the probe length, that the picked configuration beats them.

For each built-in workload (mlp, tiny_gpt, resnet; size tiny) at its `unstable_lr`:
1. a small search, as a study runs it: clip_norm (0.05-5, log), warmup_steps (0 to about half
   the probe, step 10) and adam_eps (1e-10-1e-5, log); objectives loss_cv (down) and throughput
   (up), constraints not diverged and loss_drop >= 0.05; TPE as `make_sampler` builds it, seed
   0; trial 0 is the baseline (PyTorch's defaults for the three knobs at the same lr);
2. the balanced pick (`autotune.study.pick`: the knee of the Pareto front of the feasible trials);
3. the picked configuration and the baseline, each run with five other seeds (1-5: other
   initialisation and data order, as `autotune verify` does) at the probe length L and at 5 L.
Reported per workload, side by side: loss_cv, spike_count, final_loss and throughput as mean and
95% interval (`autotune.recipe.verify.interval`: Student's t over the seeds that did not diverge, as
verification reports them), the divergence rate, and how many runs broke the loss_drop constraint
(did not learn).

Probe lengths (default): mlp 150 steps (as the shipped spaces), tiny_gpt and resnet 100 (short,
to fit ~10 minutes on 2 cores; their steps cost 12-20 ms each). This measures the search and
the probe, not the orchestration: probes run in this process (`run_probe`, one torch thread),
Optuna is driven with ask/tell on an in-memory study through the study's own helpers; no Ray, no
MLflow. Whether the answer holds at the length you train (the study's rungs toward
`budget.target_steps`, fresh seeds at the target): `benchmarks/target_length.py`.

    python benchmarks/gain_over_defaults.py           # default: 12 trials, 5 seeds, ~5-8 min
    python benchmarks/gain_over_defaults.py --quick   # smoke run: 4 trials, 2 seeds, < 1 min
    python benchmarks/gain_over_defaults.py --full    # 24 trials, 10 seeds, L = 150 everywhere
    python benchmarks/gain_over_defaults.py --workloads tiny_gpt --json gain.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)

from autotune import space as sp
from autotune import study as st
from autotune.probe.workload import resolve
from autotune.recipe import verify as vf
from autotune.study import pick as pk

WORKLOADS = ("mlp", "tiny_gpt", "resnet")
LENGTHS = {"mlp": 150, "tiny_gpt": 100, "resnet": 100}
QUICK_LENGTHS = {"mlp": 50, "tiny_gpt": 20, "resnet": 20}
REPORTED = ("loss_cv", "spike_count", "final_loss", "throughput")
SPACE = """
name: gain_{workload}
workload: {{name: {workload}, size: tiny}}
probe: {{steps: {steps}, micro_batch: 16, precision: fp32, seed: 0, threads: 1}}
budget: {{trials: {trials}}}
sampler: {{name: tpe, seed: 0}}
knobs:
  lr: {lr}
  clip_norm: {{low: 0.05, high: 5.0, log: true}}
  warmup_steps: {{low: 0, high: {warmup_high}, step: 10}}
  adam_eps: {{low: 1.0e-10, high: 1.0e-5, log: true}}
"""


def build_space(workload: str, steps: int, trials: int) -> sp.Space:
    text = SPACE.format(
        workload=workload,
        steps=steps,
        trials=trials,
        lr=resolve(workload, "tiny").unstable_lr,
        warmup_high=max(10, (steps // 2) // 10 * 10),
    )
    return sp.loads(text, source="gain_over_defaults.py")


def summarize(space: sp.Space, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and 95% interval per metric over the seeds that did not diverge, as verify does."""
    ok = [r for r in runs if r["status"] == "ok"]
    infeasible = 0
    for r in runs:
        cons = st.constraints_of(space, c.outcome_name(r["status"]), r["metrics"])
        infeasible += any(v > 0 for v in cons[1:])  # a space constraint broken (not divergence)
    return {
        "n": len(runs),
        "diverged": sum(r["status"] == "diverged" for r in runs),
        "not_learning": infeasible,
        "metrics": {m: vf.interval([r["metrics"].get(m) for r in ok]) for m in REPORTED},
        "runs": [
            {
                "seed": r["seed"],
                "status": r["status"],
                "cause": r["cause"],
                "metrics": {m: r["metrics"].get(m) for m in (*REPORTED, "loss_drop")},
            }
            for r in runs
        ],
    }


def knobs_label(k: dict[str, Any]) -> str:
    return f"clip {k['clip_norm']:.3g}, warmup {k['warmup_steps']}, eps {k['adam_eps']:.2g}"


def one_workload(name: str, steps: int, trials: int, seeds: list[int]) -> dict[str, Any]:
    space = build_space(name, steps, trials)
    objectives = c.objectives_of(space)

    def on_trial(_s: c.Search, row: dict[str, Any]) -> None:
        c.say(
            f"  {name} search trial {row['number']:>2}/{trials}: {row['outcome']:<8} "
            f"{'feasible' if row['feasible'] else 'infeasible'} params "
            f"{ {k: float(f'{v:.3g}') for k, v in row['params'].items()} }"
        )

    search = c.Search(space, on_trial=on_trial)
    search.run(trials)
    cands = pk.candidates(search.study)
    picked = pk.pick(cands, objectives, "balanced") if cands else None
    base_knobs = space.baseline_knobs()
    configs = {"baseline": base_knobs}
    if picked is not None:
        configs["picked"] = {**base_knobs, **picked.knobs}

    result: dict[str, Any] = {
        "workload": name,
        "lr": space.knobs["lr"],
        "probe_length": steps,
        "trials": trials,
        "feasible_trials": len(cands),
        "diverged_trials": sum(r["outcome"] == "diverged" for r in search.records),
        "picked_trial": picked.number if picked is not None else None,
        "picked_knobs": {k: configs["picked"][k] for k in space.searched()} if picked else None,
        "baseline_knobs": {k: base_knobs[k] for k in space.searched()},
        "search": search.records,
        "lengths": {},
    }
    for length in (steps, 5 * steps):
        per: dict[str, list[dict[str, Any]]] = {k: [] for k in configs}
        for i, seed in enumerate(seeds):
            order = list(configs) if i % 2 == 0 else list(reversed(configs))
            for which in order:
                rec = c.probe(space, configs[which], seed=seed, steps=length)
                rec["seed"] = seed
                rec.pop("summary", None)
                per[which].append(rec)
                c.say(
                    f"  {name} {which:<8} {length:>4} steps seed {seed}: {rec['status']:<8} "
                    f"loss_cv {c.fmt(rec['metrics'].get('loss_cv'))} "
                    f"final {c.fmt(rec['metrics'].get('final_loss'))} {rec['wall_s']:.1f} s"
                )
        result["lengths"][str(length)] = {k: summarize(space, v) for k, v in per.items()}
    return result


def cell(s: dict[str, Any] | None, metric: str) -> str:
    if s is None:
        return "-"
    iv = s["metrics"][metric]
    if iv["mean"] is None:
        return "all diverged"
    if iv["low"] is None:
        return f"{iv['mean']:.3g} (1 seed)"
    return f"{iv['mean']:.3g} [{iv['low']:.3g}, {iv['high']:.3g}]"


def plot(results: list[dict[str, Any]], path: str) -> None:
    cols = (*REPORTED[:3], "diverged")
    fig, axes = c.figure(12.0, 2.8 * len(results), len(results), len(cols))
    colors = {"baseline": "#ff7f0e", "picked": "#1f77b4"}
    for row, res in zip(axes, results, strict=True):
        lengths = list(res["lengths"])
        for ax, metric in zip(row, cols, strict=True):
            for j, which in enumerate(("baseline", "picked")):
                xs, ys, lo, hi = [], [], [], []
                for k, length in enumerate(lengths):
                    s = res["lengths"][length].get(which)
                    if s is None:
                        continue
                    x = k + (j - 0.5) * 0.25
                    if metric == "diverged":
                        share = s["diverged"] / s["n"]
                        ax.bar(x, share, width=0.25, color=colors[which])
                        ax.text(x, share + 0.02, f"{s['diverged']}/{s['n']}", ha="center", size=7)
                        continue
                    iv = s["metrics"][metric]
                    if iv["mean"] is None:
                        continue
                    xs.append(x)
                    ys.append(iv["mean"])
                    lo.append(iv["mean"] - (iv["low"] if iv["low"] is not None else iv["mean"]))
                    hi.append((iv["high"] if iv["high"] is not None else iv["mean"]) - iv["mean"])
                if xs:
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", color=colors[which], capsize=3)
            ax.set_xticks(range(len(lengths)), [f"{x} steps" for x in lengths])
            ax.set_title(f"{res['workload']}: {metric}", fontsize=9)
            if metric == "diverged":
                ax.set_ylim(0, 1.05)
                ax.set_ylabel("share of seeds", fontsize=8)
            elif metric == "final_loss":
                ax.set_yscale("log")
        for which, color in colors.items():
            row[0].plot([], [], "o", color=color, label=which)
        row[0].legend(fontsize=7)
    c.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--trials", type=int, default=12, help="search budget, baseline included")
    ap.add_argument("--seeds", type=int, default=5, help="other seeds per configuration")
    ap.add_argument("--length", type=int, default=None, help="one probe length for all")
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 trials, 2 seeds, short")
    ap.add_argument("--full", action="store_true", help="24 trials, 10 seeds, L = 150")
    ap.add_argument("--json", metavar="FILE", help="write the result as JSON")
    ap.add_argument("--plot", default=str(c.PLOTS / "gain_over_defaults.png"))
    args = ap.parse_args(argv)
    lengths = dict(LENGTHS)
    if args.quick:
        args.trials, args.seeds, lengths = 4, 2, dict(QUICK_LENGTHS)
    if args.full:
        args.trials, args.seeds = 24, 10
        lengths = dict.fromkeys(WORKLOADS, 150)
    if args.length:
        lengths = dict.fromkeys(WORKLOADS, args.length)
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    seeds = vf.seeds_for(0, args.seeds)

    c.one_thread()
    started = time.perf_counter()
    mach = c.machine()
    results = [one_workload(w, lengths.get(w, 150), args.trials, seeds) for w in names]
    c.finish_machine(mach, started)
    out = {
        "benchmark": "gain_over_defaults",
        "trials": args.trials,
        "seeds": seeds,
        "results": results,
        "machine": mach,
    }
    plot(results, args.plot)
    out["plot"] = str(args.plot)
    c.write_json(args.json, out)

    print(
        f"## Gain over PyTorch's defaults at the unstable learning rate: {args.trials}-trial "
        f"search, balanced pick, {len(seeds)} seeds ({seeds[0]}-{seeds[-1]}) at L and 5 L\n"
    )
    rows = []
    for res in results:
        for length, s in res["lengths"].items():
            b, p = s["baseline"], s.get("picked")
            rows.append(
                [
                    f"{res['workload']} (lr {res['lr']:g})",
                    length,
                    cell(b, "loss_cv"),
                    cell(p, "loss_cv"),
                    f"{b['diverged']}/{b['n']}",
                    f"{p['diverged']}/{p['n']}" if p else "-",
                    f"{b['not_learning']}/{b['n']}",
                    f"{p['not_learning']}/{p['n']}" if p else "-",
                ]
            )
    head = ["workload", "steps", "loss_cv baseline", "loss_cv picked", "diverged b."]
    head += ["diverged p.", "not learning b.", "not learning p."]
    print(c.table(head, rows))
    for res in results:
        picked = res["picked_knobs"]
        print(
            f"\n### {res['workload']} at lr {res['lr']:g}, probe length {res['probe_length']}\n\n"
            f"Search: {res['trials']} trials, {res['feasible_trials']} feasible, "
            f"{res['diverged_trials']} diverged. Baseline: {knobs_label(res['baseline_knobs'])}. "
            + (
                f"Picked (balanced, trial {res['picked_trial']}): {knobs_label(picked)}.\n"
                if picked
                else "No feasible trial: nothing to pick.\n"
            )
        )
        lengths_ = list(res["lengths"])
        head = ["metric"]
        for length in lengths_:
            head += [f"baseline @ {length}", f"picked @ {length}"]
        rows = []
        for metric in REPORTED:
            row = [metric]
            for length in lengths_:
                s = res["lengths"][length]
                row += [cell(s["baseline"], metric), cell(s.get("picked"), metric)]
            rows.append(row)
        for key, what in (("diverged", "diverged (seeds)"), ("not_learning", "loss_drop < 0.05")):
            row = [what]
            for length in lengths_:
                s = res["lengths"][length]
                for which in ("baseline", "picked"):
                    x = s.get(which)
                    row.append(f"{x[key]}/{x['n']}" if x else "-")
            rows.append(row)
        print(c.table(head, rows))
    print(
        "\nCells: mean [95% interval] over the seeds that did not diverge (Student's t, "
        "autotune.recipe.verify.interval); 'all diverged' when none is left. The divergence "
        "rate counts every seed."
    )
    print(c.footer(mach))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
