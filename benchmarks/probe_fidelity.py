"""Probe fidelity: does a short probe rank configurations the way a five-times-longer run does?

Twelve fixed configurations of the stability knobs (clip_norm, warmup_steps, adam_eps), from
PyTorch's defaults to strongly damped, on the shipped `defaults_hold` space (gradclip's settings
before 2026-12-02: tiny_gpt, lr 0.5: its unstable learning rate, where the defaults blow up early).
For each probe length L of `--lengths` (default 100 to 450 by 50; 150 is the space's) the
configurations are ranked at L and at its own reference length `--factor` x L (5 L: 500 to 2250) on
every objective (loss_cv, final_loss, spike_count: lower is better; throughput: higher is better),
and the two rankings are compared with Kendall's tau-b (ties allowed; scipy's `kendalltau` when
scipy is importable, else the implementation below, which checks itself on a small example with ties
whose tau-b is 0.4 by hand). Issue goal: tau >= 0.7 for loss_cv; the report names the shortest L
that reaches it.

Infeasible runs rank last: a run that diverged, or that broke the space's constraints (for
defaults_hold: loss_drop >= 0.05, i.e. it did not learn), gets the worst value of every objective,
tied with the other infeasible runs, because a study never picks an infeasible trial
(`--infeasible diverged` ranks only diverged runs last and keeps the measured values of runs
that did not learn). Feasibility is the study's: the outcome and `study.constraints_of`.

Prefixes: each configuration is trained once, for factor x max(lengths) steps (2250), and every
length needed (each L and each factor x L) is read off the first steps of that run: the metrics
are `metrics.summarize` of the series' first n steps. This is exact, not an approximation,
because on the CPU the probe is deterministic for a seed, its data order does not depend on the
run length, its divergence check is causal (a step's verdict depends only on the steps up to it)
and, with a learning-rate schedule that ignores the run length (`schedule: constant`, with or
without warm-up), the first n steps of a longer run are an n-step run. A run that diverged at
step d (0-based) is diverged for every prefix longer than d (its metrics then cover steps 0..d)
and a normal n-step run for n <= d. Each invocation checks this on its machine: the first
configuration (and, when that one diverges within the shortest length, also the first that does
not) is run on its own at the shortest length, and its loss series, status and loss metrics must
equal the prefix's, bit for bit (an AssertionError otherwise). When some configuration's
schedule is not constant (linear or cosine decay stretch with the run length), or with
`--separate`, every length is run on its own instead: the sum of the lengths per configuration
(the way to check the prefixes end to end). Two things the prefixes do not reproduce: throughput
at L and at 5 L share the step times of the first L steps (their tau is not two independent
measurements), and peak_mem_mb is the long run's.

This measures the probe, not the orchestration: probes run in this process (`run_probe`, one
torch thread, the space's seed and data order), no Ray, no MLflow, no Optuna.

    python benchmarks/probe_fidelity.py             # tiny_gpt, L 100-450 (by 50) vs 5 L:
                                                    #   12 configs x 2250 steps, ~8-10 min (1 core)
    python benchmarks/probe_fidelity.py --quick     # smoke run: mlp, L 50,100 vs 5 L, < 1 min
    python benchmarks/probe_fidelity.py --full      # 24 configs, L 50..750 (8 lengths) vs 5 L:
                                                    #   24 configs x 3750 steps, ~30-35 min
    python benchmarks/probe_fidelity.py --lengths 100,150,200 --json pf.json --plot pf.png
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
from autotune.probe import resolve_knobs
from autotune.probe.workload import resolve

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
    return " ".join(
        f"{names.get(k, k)} {v:g}" if isinstance(v, float | int) else f"{names.get(k, k)} {v}"
        for k, v in cfg.items()
    )


# ---------------------------------------------------------------------------------------------
# Runs: one long run per configuration read by prefixes, or (fallback) one run per length
# ---------------------------------------------------------------------------------------------

# What the JSON keeps of each configuration's long run (its knobs: every knob, resolved).
FULL_RUN_KEYS = (
    "status",
    "divergence_cause",
    "diverged_at_step",
    "steps_run",
    "steps_planned",
    "wall_s",
    "metrics",
    "knobs",
)
EXACT_METRICS = c.EXACT_METRICS


def knobs_of(space: sp.Space, cfg: dict[str, Any]) -> dict[str, Any]:
    """The knobs a configuration's probe gets: the space's baseline, then the configuration."""
    return {**space.baseline_knobs(), **cfg}


def length_free(space: sp.Space, configs: Sequence[dict[str, Any]]) -> tuple[bool, str]:
    """Whether every configuration's learning-rate schedule ignores the run length, and why not.

    `constant` (with or without warm-up) does; linear and cosine decay over the whole run do not.
    The knobs checked are those the probe resolves (unset ones at PyTorch's default).
    """
    for cfg in configs:
        # resolve_knobs reads the default lr only when lr is unset; the schedule ignores it
        schedule = resolve_knobs(knobs_of(space, cfg), math.nan)["schedule"]
        if schedule != "constant":
            return False, f"config {label(cfg)!r} has schedule {schedule!r}"
    return True, "schedule constant in every configuration"


def feasible(space: sp.Space, status: str, values: dict[str, Any]) -> bool:
    """Feasible as the study judges it: the outcome, then the space's constraints."""
    return all(v <= 0 for v in st.constraints_of(space, c.outcome_name(status), values))


def long_run(space: sp.Space, cfg: dict[str, Any], steps: int) -> dict[str, Any]:
    """The probe's whole summary, step series included (`c.probe` drops them): one thread, the
    space's seed, as `c.probe` runs it."""
    return c.long_probe(space, knobs_of(space, cfg), steps=steps)


def prefix(space: sp.Space, run: dict[str, Any], n: int) -> dict[str, Any]:
    """The record of an n-step probe, read off the first n steps of the longer `run`."""
    rec = c.prefix_summary(run, n)
    rec.update(
        feasible=feasible(space, rec["status"], rec["metrics"]),
        wall_s=None,
        prefix_of=run["steps_planned"],
    )
    return rec


def separate_run(space: sp.Space, cfg: dict[str, Any], steps: int) -> dict[str, Any]:
    """One probe of `steps` steps on its own (the fallback, and today's way)."""
    rec = c.probe(space, knobs_of(space, cfg), steps=steps)
    rec["feasible"] = feasible(space, rec["status"], rec["metrics"])
    for key in ("summary", "knobs"):  # the configurations are listed once, in "configs"
        rec.pop(key, None)
    rec["prefix_of"] = None
    return rec


def check_prefix(
    space: sp.Space, cfg: dict[str, Any], run: dict[str, Any], n: int
) -> dict[str, Any]:
    """Run `cfg` on its own for n steps; its loss series, status, divergence step and loss
    metrics must equal the prefix of `run` (AssertionError otherwise)."""
    alone = long_run(space, cfg, n)
    want = prefix(space, run, n)
    k = want["steps_run"]  # the steps both must have, equal: n, or up to the divergent step
    problems = c.prefix_problems(alone, run, n)
    if problems:
        raise AssertionError(
            f"prefix self-check FAILED for {label(cfg)!r} at {n} steps (prefix of "
            f"{run['steps_planned']}): " + "; ".join(problems)
        )
    return {
        "config": label(cfg),
        "steps": n,
        "prefix_of": run["steps_planned"],
        "status": want["status"],
        "steps_compared": k,
        "metrics_compared": list(EXACT_METRICS) if want["status"] == "ok" else [],
        "passed": True,
        "wall_s": round(float(alone["wall_s"]), 2),
    }


def _loss_cv_cell(r: dict[str, Any]) -> str:
    if r["status"] == "diverged":
        return f"div (step {r['diverged_at_step']})"
    if r["status"] != "ok":
        return r["status"]
    return c.fmt(r["metrics"].get("loss_cv")) + ("" if r["feasible"] else "*")


def _int_list(text: str) -> list[int]:
    out = sorted({int(x) for x in text.split(",") if x.strip()})
    if not out or out[0] < 1:
        raise SystemExit(f"--lengths: positive step counts, comma-separated (got {text!r})")
    return out


# ---------------------------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--space", default="defaults_hold", help="a shipped space name or a YAML path")
    ap.add_argument("--workload", default=None, help="default: the space's (tiny_gpt)")
    ap.add_argument("--lr", type=float, default=None, help="default: the space's (0.5)")
    ap.add_argument(
        "--lengths",
        default=None,
        help="probe lengths L, each compared with factor x L (default 100 to 450 by 50; "
        "--quick 50,100; --full 50,100,150,200,300,450,600,750)",
    )
    ap.add_argument("--factor", type=int, default=5, help="reference length = factor x L")
    ap.add_argument("--infeasible", choices=["all", "diverged"], default="all")
    ap.add_argument(
        "--separate",
        action="store_true",
        help="run every length on its own, as when a schedule depends on the run length "
        "(to check the prefixes; costs the sum of the lengths per config)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: mlp, lengths 50,100")
    ap.add_argument("--full", action="store_true", help="24 configs, lengths 50..750")
    ap.add_argument("--json", metavar="FILE", help="write the result as JSON")
    ap.add_argument("--plot", default=str(c.PLOTS / "probe_fidelity.png"))
    args = ap.parse_args(argv)
    if args.factor < 2:
        ap.error("--factor must be at least 2")
    configs = list(CONFIGS)
    default_lengths = "100,150,200,250,300,350,400,450"
    if args.quick:
        args.workload, default_lengths = "mlp", "50,100"
        if args.lr is None:
            args.lr = resolve("mlp", "tiny").unstable_lr
    if args.full:
        configs += EXTRA_CONFIGS
        default_lengths = "50,100,150,200,300,450,600,750"
    lengths = _int_list(args.lengths or default_lengths)
    factor = args.factor
    ref = {L: factor * L for L in lengths}
    needed = sorted(set(lengths) | set(ref.values()))
    L0 = lengths[0]  # the probe length of the per-configuration table (150 by default)

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
    use_prefix, why = length_free(space, configs)
    if args.separate:
        use_prefix, why = False, "--separate"
    longest = needed[-1]

    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in needed}
    full_runs: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    if use_prefix:
        c.say(f"prefix mode ({why}): each config runs {longest} steps once")
        for i, cfg in enumerate(configs):
            run = long_run(space, cfg, longest)
            for n in needed:
                runs[n].append(prefix(space, run, n))
            # The prefix argument, checked on this machine once per invocation: the first
            # configuration, and if its probe diverges within L0 steps (few steps to compare)
            # also the first one that runs all L0.
            ok_at_L0 = runs[L0][i]["status"] == "ok"
            if i == 0 or (ok_at_L0 and not any(x["status"] == "ok" for x in checks)):
                checks.append(check_prefix(space, cfg, run, L0))
                c.say(
                    f"  prefix self-check passed: {label(cfg)} run alone for {L0} steps equals "
                    f"the first {L0} steps of its {longest}-step run "
                    f"({checks[-1]['status']}, {checks[-1]['steps_compared']} steps compared)"
                )
            full_runs.append({k: run.get(k) for k in FULL_RUN_KEYS})  # no series: large
            c.say(
                f"  config {i + 1:>2}/{len(configs)} {label(cfg):<32} {run['status']:<8}"
                + (f" at step {run['diverged_at_step']}" if run["status"] == "diverged" else "")
                + " loss_cv "
                + ", ".join(f"{n}: {_loss_cv_cell(runs[n][i])}" for n in needed)
                + f"  {run['wall_s']:.1f} s"
            )
    else:
        c.say(f"separate runs ({why}): {len(needed)} lengths x {len(configs)} configs")
        for n in needed:
            for i, cfg in enumerate(configs):
                rec = separate_run(space, cfg, n)
                runs[n].append(rec)
                c.say(
                    f"  {n:>5} steps, config {i + 1:>2}/{len(configs)} {label(cfg):<32} "
                    f"{rec['status']:<8} loss_cv {_loss_cv_cell(rec)} "
                    f"final {c.fmt(rec['metrics'].get('final_loss'))} {rec['wall_s']:.1f} s"
                )

    def taus(L: int) -> dict[str, Any]:
        probe_runs, ref_runs = runs[L], runs[ref[L]]
        out: dict[str, Any] = {}
        for metric, direction in RANKED:
            a = [badness(r, metric, direction, args.infeasible) for r in probe_runs]
            b = [badness(r, metric, direction, args.infeasible) for r in ref_runs]
            tau, how = kendall(a, b)
            out[metric] = {"tau": tau, "how": how, "ranks_probe": ranks(a), "ranks_ref": ranks(b)}
        # loss_cv among the configurations feasible at both lengths: does the probe also order
        # the good ones, or only tell them from the bad?
        both = [
            i
            for i, (x, y) in enumerate(
                zip(_feasible(probe_runs, "all"), _feasible(ref_runs, "all"), strict=True)
            )
            if x and y
        ]
        a = [float(probe_runs[i]["metrics"]["loss_cv"]) for i in both]
        b = [float(ref_runs[i]["metrics"]["loss_cv"]) for i in both]
        tau, how = kendall(a, b) if len(both) >= 3 else (math.nan, "too few")
        out["loss_cv_feasible_only"] = {"tau": tau, "how": how, "n": len(both)}
        return out

    results = {L: taus(L) for L in lengths}
    holds = [L for L in lengths if results[L]["loss_cv"]["tau"] >= GOAL]
    holds_at = holds[0] if holds else None

    c.finish_machine(mach, started)
    out = {
        "benchmark": "probe_fidelity",
        "space": args.space,
        "workload": f"{space.workload.name} ({space.workload.size})",
        "lr": space.knobs.get("lr"),
        "lengths": lengths,
        "factor": factor,
        "reference_lengths": {str(L): R for L, R in ref.items()},
        "probe_length": L0,
        "mode": "prefix" if use_prefix else "separate",
        "mode_reason": why,
        "steps_per_config": longest if use_prefix else sum(needed),
        "prefix_checks": checks,
        "infeasible_ranked_last": args.infeasible,
        "constraints": [x.model_dump() for x in space.constraints],
        "configs": [knobs_of(space, cfg) for cfg in configs],
        "config_labels": [label(cfg) for cfg in configs],
        "tau": {str(L): {m: v["tau"] for m, v in res.items()} for L, res in results.items()},
        "tau_detail": {str(L): res for L, res in results.items()},
        "goal": f"Kendall tau >= {GOAL} for loss_cv between L and {factor} L",
        "goal_met_at_probe_length": results[L0]["loss_cv"]["tau"] >= GOAL,
        "shortest_length_meeting_goal": holds_at,
        "runs": {str(n): v for n, v in runs.items()},
        "full_runs": full_runs,
        "machine": mach,
    }

    plot(args.plot, configs, lengths, needed, factor, results, runs)
    out["plot"] = str(args.plot)
    c.write_json(args.json, out)

    how_run = (
        f"each run once for {longest} steps, every length read off its first steps"
        "; prefix self-check passed: "
        + ", ".join(
            f"{x['config']} alone for {L0} steps ({x['status']}, {x['steps_compared']} steps equal)"
            for x in checks
        )
        if use_prefix
        else f"a separate run per length ({why})"
    )
    print(
        f"## Probe fidelity: `{args.space}` on {out['workload']} at lr {out['lr']}, "
        f"{len(configs)} configurations, each probe length L against {factor} L\n\n"
        f"Configurations: {how_run}.\n"
    )
    head = ["L", f"{factor} L", *[f"tau {m}" for m, _ in RANKED]]
    head += ["tau loss_cv, feasible at both (n)", f"infeasible at L / at {factor} L"]
    rows = []
    for L in lengths:
        res = results[L]
        cells = [
            f"**{c.fmt(res[m]['tau'], 2)}**" if m == "loss_cv" else c.fmt(res[m]["tau"], 2)
            for m, _ in RANKED
        ]
        fo = res["loss_cv_feasible_only"]
        n_bad = sum(not ok for ok in _feasible(runs[L], args.infeasible))
        n_bad_ref = sum(not ok for ok in _feasible(runs[ref[L]], args.infeasible))
        rows.append(
            [
                str(L),
                str(ref[L]),
                *cells,
                f"{c.fmt(fo['tau'], 2)} ({fo['n']})",
                f"{n_bad} / {n_bad_ref}",
            ]
        )
    print(c.table(head, rows))
    how = results[L0]["loss_cv"]["how"]
    verdict = (
        f"met at the probe length {L0}"
        if results[L0]["loss_cv"]["tau"] >= GOAL
        else (
            f"not met at {L0}; the shortest probe length that meets it is **{holds_at}**"
            if holds_at
            else f"not met at any length tried ({', '.join(map(str, lengths))})"
        )
    )
    print(f"\nGoal tau >= {GOAL} for loss_cv: **{verdict}** (Kendall tau-b by {how}).")
    what = "diverged or broke a constraint of the space" if args.infeasible == "all" else "diverged"
    print(f"Runs that {what} rank last on every objective, tied. A constant ranking gives n/a.")
    if use_prefix:
        print(
            f"Prefixes: throughput at L and at {factor} L share the step times of the first L "
            "steps, so their tau is not two independent measurements.\n"
        )
    else:
        print()

    R0 = ref[L0]
    cfg_rows = []
    for i, cfg in enumerate(configs):
        cells = [label(cfg)]
        for n in (L0, R0):
            r = runs[n][i]
            tag = r["status"] if r["status"] != "ok" else ("ok" if r["feasible"] else "infeasible")
            cells += [
                tag,
                c.fmt(r["metrics"].get("loss_cv")),
                c.fmt(r["metrics"].get("final_loss")),
            ]
        cells += [
            c.fmt(results[L0]["loss_cv"]["ranks_probe"][i], 3),
            c.fmt(results[L0]["loss_cv"]["ranks_ref"][i], 3),
        ]
        cfg_rows.append(cells)
    print(
        c.table(
            [
                "config",
                f"L={L0}",
                "loss_cv",
                "final_loss",
                f"{factor} L={R0}",
                "loss_cv",
                "final_loss",
                "loss_cv rank at L",
                f"at {factor} L",
            ],
            cfg_rows,
        )
    )

    def length_head(n: int) -> str:  # "750 (5x150)" for a reference length
        of = [f"{factor}x{L}" for L in lengths if ref[L] == n]
        return f"{n} ({', '.join(of)})" if of else str(n)

    print("\nloss_cv of each configuration at every length (* broke a constraint of the space):\n")
    print(
        c.table(
            ["config", *[length_head(n) for n in needed]],
            [
                [label(cfg), *[_loss_cv_cell(runs[n][i]) for n in needed]]
                for i, cfg in enumerate(configs)
            ],
        )
    )
    print(c.footer(mach))
    return 0


def plot(
    path: str,
    configs: Sequence[dict[str, Any]],
    lengths: Sequence[int],
    needed: Sequence[int],
    factor: int,
    results: dict[int, dict[str, Any]],
    runs: dict[int, list[dict[str, Any]]],
) -> None:
    """Tau against L, one panel per objective (the goal line on loss_cv's), and loss_cv of every
    configuration against the run length (hollow: infeasible; crosses: diverged)."""
    fig, axes = c.figure(15.0, 3.4, 1, len(RANKED) + 1)
    for ax, (metric, _d) in zip(axes[0][: len(RANKED)], RANKED, strict=True):
        taus = [results[L][metric]["tau"] for L in lengths]
        ax.plot(lengths, taus, marker="o", label=f"all {len(configs)}, infeasible last")
        if metric == "loss_cv":
            fo = [results[L]["loss_cv_feasible_only"]["tau"] for L in lengths]
            ax.plot(lengths, fo, marker="s", ls="--", alpha=0.8, label="feasible at both")
            ax.axhline(GOAL, color="#c0392b", lw=0.9, ls=":", label=f"goal {GOAL}")
            ax.legend(fontsize=7, loc="lower right")
        ax.axhline(0.0, color="#999999", lw=0.6)
        ax.set_ylim(-1.05, 1.05)
        ax.set_xticks(list(lengths))
        ax.tick_params(labelsize=7)
        ax.set_title(f"{metric}: L vs {factor} L", fontsize=9)
        ax.set_xlabel("probe length L (steps)", fontsize=8)
        ax.set_ylabel("Kendall tau-b", fontsize=8)
    ax = axes[0][-1]
    from matplotlib import colormaps

    cmap = colormaps["tab20"].resampled(max(len(configs), 2))
    for i, cfg in enumerate(configs):
        color = cmap(i)
        xs = [n for n in needed if runs[n][i]["status"] == "ok"]
        ys = [runs[n][i]["metrics"].get("loss_cv") for n in xs]
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), color=color, lw=0.8, alpha=0.8, label=label(cfg))
        for n in needed:
            r = runs[n][i]
            v = r["metrics"].get("loss_cv")
            if r["status"] == "ok" and v is not None:
                ax.scatter(
                    [n], [v], s=14, color=color, facecolors=color if r["feasible"] else "none"
                )
    div = [(n, i) for n in needed for i in range(len(configs)) if runs[n][i]["status"] != "ok"]
    ax.set_xscale("log")
    ticks: list[int] = []
    for n in sorted(needed):  # labels that do not overlap on the log axis
        if not ticks or n >= 1.5 * ticks[-1]:
            ticks.append(n)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(n) for n in ticks], fontsize=6)
    ax.minorticks_off()
    ax.tick_params(labelsize=7)
    ax.set_title("loss_cv of each configuration", fontsize=9)
    ax.set_xlabel("run length (steps); hollow: infeasible", fontsize=8)
    ax.set_ylabel("loss_cv", fontsize=8)
    ax.legend(fontsize=5, ncol=2, title=f"{len(div)} diverged runs not shown", title_fontsize=6)
    c.save_figure(fig, path)


def _feasible(runs: list[dict[str, Any]], infeasible: str) -> list[bool]:
    return [r["status"] == "ok" and (infeasible == "diverged" or r["feasible"]) for r in runs]


if __name__ == "__main__":
    raise SystemExit(main())
