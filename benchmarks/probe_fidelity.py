"""Probe fidelity: does a short probe rank configurations the way a five-times-longer run does?

Twelve fixed configurations of the stability knobs (clip_norm, warmup_steps, adam_eps), from
PyTorch's defaults to strongly damped, run on the shipped `gradclip` space (tiny_gpt, lr 0.5:
its unstable learning rate, where the defaults blow up), each at the probe length L (150, the
space's) and at the reference length R = 5 L. For every objective (loss_cv, final_loss,
spike_count: lower is better; throughput: higher is better) the configurations are ranked at L
and at R, and the two rankings are compared with Kendall's tau-b (ties allowed; scipy's
`kendalltau` when scipy is importable, else the implementation below, which checks itself on a
small example with ties whose tau-b is 0.4 by hand).

Infeasible runs rank last: a run that diverged, or that broke the study's constraints (for
gradclip: loss_drop >= 0.05, i.e. it did not learn), gets the worst value of every objective, tied
with the other infeasible runs, because a study never picks an infeasible trial
(`--infeasible diverged` ranks only diverged runs last and keeps the measured values of runs
that did not learn). Issue goal: tau >= 0.7 for loss_cv. When L falls short, longer probe
lengths (`--lengths`, default 2 L and 3 L) are run as well, each against the same reference R,
and the report names the shortest probe length that reaches the goal.

This measures the probe, not the orchestration: probes run in this process (`run_probe`, one
torch thread, the space's seed and data order), no Ray, no MLflow, no Optuna.

    python benchmarks/probe_fidelity.py                # default: tiny_gpt, L 150, R 750, ~4-7 min
    python benchmarks/probe_fidelity.py --quick        # smoke run on mlp (L 50, R 250), < 1 min
    python benchmarks/probe_fidelity.py --full         # L 150, R 1500, lengths 300,450,750
    python benchmarks/probe_fidelity.py --lengths 300,450 --json pf.json --plot pf.png
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)

from autotune import space as sp
from autotune import study as st
from autotune.workload import resolve

GOAL = 0.7
RANKED = (
    ("loss_cv", "minimize"),
    ("final_loss", "minimize"),
    ("spike_count", "minimize"),
    ("throughput", "maximize"),
)
# From PyTorch's defaults (no clipping, no warm-up, eps 1e-8) to strongly damped.
CONFIGS: tuple[dict[str, Any], ...] = (
    {},
    {"adam_eps": 1e-6},
    {"warmup_steps": 10},
    {"clip_norm": 5.0},
    {"clip_norm": 1.0},
    {"clip_norm": 0.25},
    {"warmup_steps": 40},
    {"clip_norm": 2.0, "warmup_steps": 10},
    {"clip_norm": 1.0, "warmup_steps": 40},
    {"clip_norm": 0.5, "warmup_steps": 30, "adam_eps": 1e-6},
    {"clip_norm": 0.1, "warmup_steps": 100},
    {"clip_norm": 0.25, "warmup_steps": 60, "adam_eps": 1e-5},
)
EXTRA_CONFIGS: tuple[dict[str, Any], ...] = (  # --full: twelve more
    {"clip_norm": 3.0, "warmup_steps": 20},
    {"clip_norm": 0.05},
    {"warmup_steps": 80},
    {"adam_eps": 1e-5, "warmup_steps": 20},
    {"clip_norm": 0.5},
    {"clip_norm": 1.0, "warmup_steps": 20, "adam_eps": 1e-10},
    {"clip_norm": 0.1, "warmup_steps": 10},
    {"clip_norm": 5.0, "warmup_steps": 60},
    {"clip_norm": 0.25, "warmup_steps": 20},
    {"clip_norm": 2.0, "adam_eps": 1e-6},
    {"warmup_steps": 20, "adam_eps": 1e-7},
    {"clip_norm": 0.5, "warmup_steps": 100},
)


# ---------------------------------------------------------------------------------------------
# Kendall's tau-b
# ---------------------------------------------------------------------------------------------


def tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of two paired samples, O(n^2): (C - D) / sqrt((n0 - n1)(n0 - n2)).

    C and D count the concordant and discordant pairs (pairs tied in x or in y are neither),
    n0 = n(n-1)/2, n1 the pairs tied in x, n2 the pairs tied in y. NaN when x or y is constant.
    """
    n = len(x)
    if n != len(y):
        raise ValueError("x and y differ in length")
    conc = disc = tie_x = tie_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                tie_x += 1
            if dy == 0:
                tie_y += 1
            if dx != 0 and dy != 0:
                if (dx > 0) == (dy > 0):
                    conc += 1
                else:
                    disc += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - tie_x) * (n0 - tie_y))
    return (conc - disc) / denom if denom > 0 else math.nan


def _check_tau_b() -> None:
    """x = 1, 2, 2, 3 and y = 1, 3, 2, 2: pairs 01, 02, 03 concordant, 13 discordant, 12 tied in
    x, 23 tied in y; tau-b = (3 - 1) / sqrt((6 - 1)(6 - 1)) = 0.4. Reversed y: -1."""
    got = tau_b([1, 2, 2, 3], [1, 3, 2, 2])
    if abs(got - 0.4) > 1e-12 or tau_b([1, 2, 3], [3, 2, 1]) != -1.0:
        raise AssertionError(f"tau_b self-check failed: {got} (expected 0.4)")


def kendall(x: Sequence[float], y: Sequence[float]) -> tuple[float, str]:
    """tau-b and which implementation computed it."""
    if len(set(x)) < 2 or len(set(y)) < 2:
        return math.nan, "constant"
    try:
        from scipy.stats import kendalltau
    except ImportError:
        return tau_b(x, y), "own tau-b"
    return float(kendalltau(x, y).statistic), "scipy"


# ---------------------------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------------------------

WORST = 1e300  # the badness of an infeasible run: last, tied with the other infeasible runs


def badness(run: dict[str, Any], metric: str, direction: str, infeasible_last: str) -> float:
    """Lower is better; infeasible runs (as `infeasible_last` says) and missing values: WORST."""
    if run["status"] != "ok" or (infeasible_last == "all" and not run["feasible"]):
        return WORST
    v = run["metrics"].get(metric)
    if v is None or not math.isfinite(float(v)):
        return WORST
    return float(v) if direction == "minimize" else -float(v)


def ranks(values: Sequence[float]) -> list[float]:
    """Average ranks, 1 = best (ties share the mean of their positions)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def label(cfg: dict[str, Any]) -> str:
    if not cfg:
        return "defaults"
    names = {"clip_norm": "clip", "warmup_steps": "warmup", "adam_eps": "eps"}
    return " ".join(f"{names[k]} {v:g}" for k, v in cfg.items())


def run_one(space: sp.Space, cfg: dict[str, Any], steps: int) -> dict[str, Any]:
    knobs = {**space.baseline_knobs(), **cfg}
    rec = c.probe(space, knobs, steps=steps)
    outcome = c.outcome_name(rec["status"])
    cons = st.constraints_of(space, outcome, rec["metrics"])
    rec["feasible"] = all(v <= 0 for v in cons)
    rec.pop("summary", None)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--space", default="gradclip", help="a shipped space name or a YAML path")
    ap.add_argument("--workload", default=None, help="default: the space's (tiny_gpt)")
    ap.add_argument("--lr", type=float, default=None, help="default: the space's (0.5)")
    ap.add_argument("--length", type=int, default=150, help="the probe length L")
    ap.add_argument("--reference", type=int, default=None, help="R; default 5 L")
    ap.add_argument(
        "--lengths",
        default=None,
        help="longer probe lengths, each against R (default 2L,3L; run only when L falls "
        "short, or always when given)",
    )
    ap.add_argument("--infeasible", choices=["all", "diverged"], default="all")
    ap.add_argument("--quick", action="store_true", help="smoke run: mlp, L 50, R 250")
    ap.add_argument("--full", action="store_true", help="24 configs, R 10 L, lengths 2L,3L,5L")
    ap.add_argument("--json", metavar="FILE", help="write the result as JSON")
    ap.add_argument("--plot", default=str(c.PLOTS / "probe_fidelity.png"))
    args = ap.parse_args(argv)
    explicit_lengths = args.lengths is not None
    configs = list(CONFIGS)
    if args.quick:
        args.workload, args.length = "mlp", 50
        if args.lr is None:
            args.lr = resolve("mlp", "tiny").unstable_lr
    if args.full:
        configs += EXTRA_CONFIGS
        args.reference = args.reference or 10 * args.length
        if not explicit_lengths:
            args.lengths = f"{2 * args.length},{3 * args.length},{5 * args.length}"
            explicit_lengths = True
    L = args.length
    R = args.reference or 5 * L
    extra = (
        [int(x) for x in args.lengths.split(",") if x.strip()] if args.lengths else [2 * L, 3 * L]
    )
    extra = [x for x in extra if L < x < R]

    _check_tau_b()
    c.one_thread()
    started = time.perf_counter()
    mach = c.machine()
    overrides = ["probe.threads=1"]
    if args.workload:
        overrides.append(f"workload.name={args.workload}")
    if args.lr is not None:
        overrides.append(f"knobs.lr={args.lr}")
    space = sp.load(args.space, overrides=overrides)

    runs: dict[int, list[dict[str, Any]]] = {}

    def run_length(steps: int) -> None:
        runs[steps] = []
        for i, cfg in enumerate(configs):
            rec = run_one(space, cfg, steps)
            runs[steps].append(rec)
            c.say(
                f"  {steps:>5} steps, config {i + 1:>2}/{len(configs)} {label(cfg):<32} "
                f"{rec['status']:<8} loss_cv {c.fmt(rec['metrics'].get('loss_cv'))} "
                f"final {c.fmt(rec['metrics'].get('final_loss'))} "
                f"{'' if rec['feasible'] else '(infeasible) '}{rec['wall_s']:.1f} s"
            )

    run_length(R)
    run_length(L)

    def taus(steps: int) -> dict[str, dict[str, Any]]:
        out = {}
        for metric, direction in RANKED:
            a = [badness(r, metric, direction, args.infeasible) for r in runs[steps]]
            b = [badness(r, metric, direction, args.infeasible) for r in runs[R]]
            tau, how = kendall(a, b)
            out[metric] = {"tau": tau, "how": how, "ranks_probe": ranks(a), "ranks_ref": ranks(b)}
        # loss_cv among the configurations feasible at both lengths: does the probe also order
        # the good ones, or only tell them from the bad?
        both = [
            i
            for i, (x, y) in enumerate(
                zip(_feasible(runs[steps], "all"), _feasible(runs[R], "all"), strict=True)
            )
            if x and y
        ]
        a = [float(runs[steps][i]["metrics"]["loss_cv"]) for i in both]
        b = [float(runs[R][i]["metrics"]["loss_cv"]) for i in both]
        tau, how = kendall(a, b) if len(both) >= 3 else (math.nan, "too few")
        out["loss_cv_feasible_only"] = {"tau": tau, "how": how, "n": len(both)}
        return out

    results = {L: taus(L)}
    short = not (results[L]["loss_cv"]["tau"] >= GOAL)
    if short or explicit_lengths:
        for steps in extra:
            run_length(steps)
            results[steps] = taus(steps)
    holds = [s for s in sorted(results) if results[s]["loss_cv"]["tau"] >= GOAL]
    holds_at = holds[0] if holds else None

    c.finish_machine(mach, started)
    out = {
        "benchmark": "probe_fidelity",
        "space": args.space,
        "workload": f"{space.workload.name} ({space.workload.size})",
        "lr": space.knobs.get("lr"),
        "probe_length": L,
        "reference_length": R,
        "lengths": sorted(results),
        "infeasible_ranked_last": args.infeasible,
        "constraints": [x.model_dump() for x in space.constraints],
        "configs": [{**space.baseline_knobs(), **cfg} for cfg in configs],
        "config_labels": [label(cfg) for cfg in configs],
        "tau": {str(k): {m: v["tau"] for m, v in res.items()} for k, res in results.items()},
        "tau_detail": {str(k): res for k, res in results.items()},
        "goal": f"Kendall tau >= {GOAL} for loss_cv",
        "goal_met_at_probe_length": results[L]["loss_cv"]["tau"] >= GOAL,
        "shortest_length_meeting_goal": holds_at,
        "runs": {str(k): v for k, v in runs.items()},
        "machine": mach,
    }

    # The plot: rank at the probe length against rank at R, per objective.
    fig, axes = c.figure(11.0, 3.4, 1, len(RANKED))
    markers = ("o", "s", "^", "D", "v")
    for ax, (metric, _d) in zip(axes[0], RANKED, strict=True):
        for k, steps in enumerate(sorted(results)):
            res = results[steps][metric]
            ax.scatter(
                res["ranks_ref"],
                res["ranks_probe"],
                marker=markers[k % len(markers)],
                alpha=0.7,
                label=f"L={steps}: tau {c.fmt(res['tau'], 2)}",
            )
        n = len(configs)
        ax.plot([1, n], [1, n], color="#999999", lw=0.8, ls=":")
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel(f"rank at R={R} (1 = best)", fontsize=8)
        ax.set_ylabel("rank at the probe length", fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
    c.save_figure(fig, args.plot)
    out["plot"] = str(args.plot)
    c.write_json(args.json, out)

    print(
        f"## Probe fidelity: `{args.space}` on {out['workload']} at lr {out['lr']}, "
        f"{len(configs)} configurations, reference length R = {R}\n"
    )
    head = ["probe length", *[f"tau {m}" for m, _ in RANKED]]
    head += ["tau loss_cv, feasible at both (n)", "infeasible at L / at R"]
    rows = []
    n_bad_ref = sum(not ok for ok in _feasible(runs[R], args.infeasible))
    for steps in sorted(results):
        res = results[steps]
        n_bad = sum(not ok for ok in _feasible(runs[steps], args.infeasible))
        cells = [
            f"**{c.fmt(res[m]['tau'], 2)}**" if m == "loss_cv" else c.fmt(res[m]["tau"], 2)
            for m, _ in RANKED
        ]
        fo = res["loss_cv_feasible_only"]
        rows.append(
            [
                f"{steps}" + (" (L)" if steps == L else ""),
                *cells,
                f"{c.fmt(fo['tau'], 2)} ({fo['n']})",
                f"{n_bad} / {n_bad_ref}",
            ]
        )
    print(c.table(head, rows))
    how = results[L]["loss_cv"]["how"]
    verdict = (
        f"met at the probe length {L}"
        if results[L]["loss_cv"]["tau"] >= GOAL
        else (
            f"not met at {L}; holds from probe length **{holds_at}**"
            if holds_at
            else f"not met at any length tried ({', '.join(map(str, sorted(results)))})"
        )
    )
    print(f"\nGoal tau >= {GOAL} for loss_cv: **{verdict}** (Kendall tau-b by {how}).")
    what = "diverged or broke a constraint of the space" if args.infeasible == "all" else "diverged"
    print(f"Runs that {what} rank last on every objective, tied. A constant ranking gives n/a.\n")
    cfg_rows = []
    for i, cfg in enumerate(configs):
        cells = [label(cfg)]
        for steps in [L, R]:
            r = runs[steps][i]
            tag = r["status"] if r["status"] != "ok" else ("ok" if r["feasible"] else "infeasible")
            cells += [
                tag,
                c.fmt(r["metrics"].get("loss_cv")),
                c.fmt(r["metrics"].get("final_loss")),
            ]
        cells += [
            c.fmt(results[L]["loss_cv"]["ranks_probe"][i], 3),
            c.fmt(results[L]["loss_cv"]["ranks_ref"][i], 3),
        ]
        cfg_rows.append(cells)
    print(
        c.table(
            [
                "config",
                f"L={L}",
                "loss_cv",
                "final_loss",
                f"R={R}",
                "loss_cv",
                "final_loss",
                "loss_cv rank at L",
                "at R",
            ],
            cfg_rows,
        )
    )
    print(f"\nWall {mach['wall_s']:.0f} s.\n\n" + c.machine_line(mach))
    return 0


def _feasible(runs: list[dict[str, Any]], infeasible: str) -> list[bool]:
    return [r["status"] == "ok" and (infeasible == "diverged" or r["feasible"]) for r in runs]


if __name__ == "__main__":
    raise SystemExit(main())
