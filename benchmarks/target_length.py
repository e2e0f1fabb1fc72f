"""Target length: does the study's answer hold at the length you train, and what does it cost?

Issue 14's done-when, in one run. Per case (the shipped defaults_hold space, which holds
gradclip's settings before 2026-12-02, per sampler seed, and each built-in workload at its
unstable learning rate) the study runs as `autotune study` runs it,
in this process: N trials screened at the probe length L0 by Optuna ask/tell (TPE from
`make_sampler`, `suggest`, `trial_setup`, `complete_outcome`, `tell`: `_common.Search`), then the
rungs toward `budget.target_steps` T exactly as `study/rung_phase.py` decides them (`promote`,
`agreement`, `should_grow` of `study/rungs.py`), verification of the top `verify.top_k`
candidates (`pick.is_candidate`) at the decided rung over `seeds_for(...)` seeds, and the pick
(`study/pick.py`, balanced: only verified candidates that held on every seed). Beside it:
- the old flow: the pick among the screen's values, verified at L0 (no rungs);
- the full-length pick: the same pick rule on every trial's values at T (not verified).
Then the pick, the defaults (trial 0), the old pick and the full-length pick each run with the
fresh seeds 11-15 at T (the verification seeds chose the pick: reusing them would flatter it).

Feasibility everywhere is the study's own: the screen as `rung_phase.screen_results` reads it
from the Optuna study, a probe at another length as `rung_phase.judge` judges a rung record, with
the relative constraint `final_loss <= 1.05 x baseline` (when the space has it) against the
baseline's run at the same steps and seed (`objectives.reference`: only a completed run is a
reference). A verification seed is judged as `verification.baseline_references` says: against the
baseline's verified run at that seed when the baseline was verified too, else against its run at
that length (probe seed). Kendall tau-b compares two lengths as the study's growth test does
(`rungs.agreement`): by the stability objective (noise_per_drop in these spaces), infeasible
tied last; reported from the decided rung to the target over the configurations at that rung.

Prefixes: every configuration and seed is trained once, at T, and each shorter length is read off
its first steps (`_common.prefix_summary`): exact on the CPU because the probe is deterministic,
its divergence check causal and the schedule constant (the knobs of these spaces leave it so).
Each case checks one prefix bit for bit against a probe run on its own; when that check fails, or
a schedule stretches with the run length, every length runs on its own (as the study runs it).
Compute is counted as the study would spend it (optimizer steps run x samples per step), not as
this benchmark spends it, with the rungs two ways: continued (a promoted probe continues the same
trial's probe at the previous rung: r_k - r_{k-1} steps; what the study spends on one node) and
restarted (from step 0: r_k steps; the fallback when the checkpoint is not on the probe's node).
On the CPU a continued probe is bit for bit the fresh one, so only the accounting differs.

    python benchmarks/target_length.py           # defaults_hold (sampler seed 0) + mlp,
                                                 #   tiny_gpt, resnet: 26 min of cases (12,
                                                 #   tiny_gpt 10); --jobs 2: 14 min on 2 cores
    python benchmarks/target_length.py --quick   # smoke run: 4 trials, 10 -> 50 steps, 2
                                                 #   seeds, defaults_hold + mlp: ~25 s
    python benchmarks/target_length.py --seeds 0,1,2 --workloads '' --json tl.json
    python benchmarks/target_length.py --space '' --workloads mlp --trials 48 --factor 20  # scale
    python benchmarks/target_length.py --workloads '' --seeds 0,1 --trials 36 --jobs 2  # tau
    python benchmarks/target_length.py --set rungs.eta=2   # --set: any space key, every case
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)
from _target_study import Case, tau

from autotune import space as sp
from autotune.errors import AutotuneError
from autotune.probe.workload import resolve
from autotune.recipe import verify as vf

WORKLOADS = ("mlp", "tiny_gpt", "resnet")
LENGTHS = {"mlp": 150, "tiny_gpt": 100, "resnet": 100}  # as gain_over_defaults.py
FRESH_SEEDS = (11, 12, 13, 14, 15)
QUICK = {"steps": 10, "target": 50, "trials": 4, "seeds": 2}
COMPARED = ("pick", "old pick", "full-length pick")
SPACE = """
name: target_{workload}
workload: {{name: {workload}, size: tiny}}
probe: {{steps: {steps}, batch: 16, precision: fp32, seed: 0, threads: 1}}
objectives:
  - {{metric: noise_per_drop, direction: minimize}}
  - {{metric: throughput, direction: maximize}}
constraints:
  - {{metric: loss_drop, op: ">=", value: 0.05}}
  - {{metric: final_loss, op: "<=", value: 1.05, relative_to: baseline}}
budget: {{trials: {trials}, target_steps: {target}}}
sampler: {{name: tpe, seed: {seed}}}
verify: {{top_k: 2, seeds: {verify_seeds}}}
knobs:
  lr: {lr}
  clip_norm: {{low: 0.05, high: 5.0, log: true}}
  warmup_steps: {{low: 0, high: {warmup_high}, step: 10}}
  adam_eps: {{low: 1.0e-10, high: 1.0e-5, log: true}}
"""


def workload_space(
    name: str, seed: int, quick: bool, trials: int, factor: int = 5, sets: Sequence[str] = ()
) -> sp.Space:
    steps = QUICK["steps"] if quick else LENGTHS[name]
    text = SPACE.format(
        workload=name,
        steps=steps,
        target=QUICK["target"] if quick else factor * steps,
        trials=QUICK["trials"] if quick else trials,
        seed=seed,
        verify_seeds=QUICK["seeds"] if quick else 3,
        lr=resolve(name, "tiny").unstable_lr,
        warmup_high=max(10, (steps // 2) // 10 * 10),
    )
    return sp.loads(text, source="target_length.py", overrides=sets)


def file_space(
    path: str, seed: int, quick: bool, trials: int | None, sets: Sequence[str] = ()
) -> sp.Space:
    user = list(sets)  # --set: last, so it wins
    sets = [f"sampler.seed={seed}"] + ([f"budget.trials={trials}"] if trials else [])
    if quick:
        sets += [f"probe.steps={QUICK['steps']}", f"budget.target_steps={QUICK['target']}"]
        sets += [f"budget.trials={QUICK['trials']}", f"verify.seeds={QUICK['seeds']}"]
    return sp.load(path, overrides=[*sets, *user])


def beats(p: Mapping[str, Any] | None, d: Mapping[str, Any] | None, metric: str) -> bool:
    """Matches or beats the defaults on `metric`: feasible on every seed (none diverged, every
    constraint met), and either the defaults were not (they diverged or did not learn on some
    seed: nothing to match) or the mean is at most the defaults' upper 95% bound."""
    if p is None or d is None or p["infeasible"]:
        return False
    pm, dm = p[metric]["mean"], d[metric]
    if d["infeasible"] or dm["mean"] is None:
        return True
    return pm is not None and bool(pm <= (dm["high"] if dm["high"] is not None else dm["mean"]))


def run_case(
    kind: str,
    name: str,
    seed: int,
    quick: bool,
    trials: int | None,
    fresh_n: int,
    factor: int = 5,
    sets: Sequence[str] = (),
):
    """One case, start to end (also a worker's job with --jobs)."""
    c.one_thread()
    t0 = time.perf_counter()
    if kind == "space":
        space, label = file_space(name, seed, quick, trials, sets), f"{name} (sampler seed {seed})"
    else:
        space = workload_space(name, seed, quick, trials or 12, factor, sets)
        label = f"{name} at lr {space.knobs['lr']} (sampler seed {seed})"
    c.say(f"{label}: screen {space.budget.trials} trials at {space.probe.steps} steps")
    case = Case(label, space)
    screen = case.screen()
    every = sorted(case.trials)
    phase = case.rung_phase()
    dec = phase["decided"]["steps"]
    c.say(f"{label}: decided at {dec} of {case.T} steps ({phase['decided']['reason']})")
    picks = {
        "pick": case.choose(phase["numbers"], dec, verify=True),
        "old pick": case.choose(every, case.L0, verify=True),
        "full-length pick": case.choose(every, case.T, verify=False),
    }
    seeds = list(FRESH_SEEDS[:fresh_n])
    fresh = {"defaults": case.fresh(case.base(), seeds)}
    fresh.update({k: case.fresh(v["number"], seeds) for k, v in picks.items()})
    for k in COMPARED:
        f = fresh[k]
        if f is not None:
            f["beats_defaults"] = all(
                beats(f, fresh["defaults"], m) for m in (case.stability, "final_loss")
            )
    taus = {
        "decided_to_target": tau(case, phase["numbers"], dec, case.T),
        "decided_to_target_all": tau(case, every, dec, case.T),
        "screen_to_target_all": tau(case, every, case.L0, case.T),
        "screen_to_target_all_ungated": tau(case, every, case.L0, case.T, gated=False),
    }
    return {
        "case": label,
        "kind": kind,
        "sampler_seed": seed,
        "probe_steps": case.L0,
        "target_steps": case.T,
        "plan": case.plan,
        "sets": list(sets),
        "rungs_config": space.rungs.model_dump(),
        "stability": case.stability,
        "relative_constraint": [x.label for x in space.constraints if x.relative_to],
        "prefix_check": case.prefix_check,
        "screen": screen,
        "rungs": phase["rungs"],
        "decided": phase["decided"],
        "taus": taus,
        "picks": picks,
        "fresh_seeds": seeds,
        "fresh": fresh,
        "compute": compute(case, phase, picks),
        "points": points(case),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def compute(case: Case, phase: Mapping[str, Any], picks: Mapping[str, Any]) -> dict[str, Any]:
    """Samples as the study spends them: the screen, the rungs, the verification. The rungs two
    ways: `continued` (the headline: a promoted probe continues the same trial's probe at the
    previous rung, the screen for rung 1, so it adds the samples between the two lengths; one
    that did not run its whole length there, a diverged baseline, left no state: it starts
    over, as in the study) and `restarted` (the fallback when the checkpoint is not on the
    probe's node: from step 0). Each with its total and ratios against today (the screen +
    verifying the top_k at the probe length), every trial at the target, and that + the same
    verification."""
    every = sorted(case.trials)
    screen = sum(case.rec(n, case.L0)["samples"] for n in every)
    verification = picks["pick"]["samples"]
    today = screen + picks["old pick"]["samples"]
    full = sum(case.rec(n, case.T)["samples"] for n in every)
    v = case.space.verify
    full_verify = full + v.top_k * v.seeds * case.T * case.space.probe.samples_per_step
    restarted = continued = 0
    for r in phase["rungs"]:
        before = case.plan[r["rung"] - 1]  # the previous rung's length (the screen for rung 1)
        for n in r["numbers"]:
            spent, below = case.rec(n, r["steps"]), case.rec(n, before)
            restarted += spent["samples"]
            # the study keeps a state only for a probe that ran its whole length (status ok)
            continued += spent["samples"] - (below["samples"] if below["status"] == "ok" else 0)
    out: dict[str, Any] = {
        "screen": screen,
        "verification": verification,
        "today": today,
        "full_length": full,
        "full_length_verified": full_verify,
    }
    for name, rungs in (("continued", continued), ("restarted", restarted)):
        total = screen + rungs + verification
        out[name] = {
            "rungs": rungs,
            "total": total,
            "x_today": total / today if today else None,
            "saved_vs_full": 1 - total / full if full else None,
            "saved_vs_full_verified": 1 - total / full_verify if full_verify else None,
        }
    return out


def points(case: Case) -> list[dict[str, Any]]:
    """Per trial: the stability metric at the screen and at the target, feasibility at T."""
    out = []
    for n in sorted(case.trials):
        a, b = case.judge(n, case.L0), case.judge(n, case.T)
        out.append(
            {
                "number": n,
                "baseline": a.baseline,
                "screen": a.metrics.get(case.stability),
                "target": b.metrics.get(case.stability),
                "feasible_screen": a.feasible,
                "feasible_target": b.feasible,
                "outcome_target": b.outcome,
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def iv_cell(iv: Mapping[str, Any] | None) -> str:
    return vf.format_interval(iv, digits=3, empty="no value (diverged, or did not learn)")


def tau_cell(t: Mapping[str, Any]) -> str:
    shown = "n/a" if t["tau"] is None else f"{t['tau']:+.2f}"
    return f"{shown} (n {t['n']})"


def broken(p: Mapping[str, Any]) -> str:
    """Why no verified candidate held: each one's seeds and the constraints they broke."""
    out = [
        f"trial {n} seed {row['seed']}: {row['outcome']}"
        + (f" ({', '.join(row['broken'])})" if row["broken"] else "")
        for n, rows in p.get("seeds", {}).items()
        for row in rows
        if row["broken"] or row["outcome"] != "complete"
    ]
    return "; ".join(out) or (p.get("why") or "")[:120]


def report(res: Mapping[str, Any]) -> str:
    d, t, cp = res["decided"], res["taus"], res["compute"]
    seen = ", ".join(
        f"{r['agreement']['vs_steps']}->{r['steps']} {tau_cell(r['agreement'])}"
        for r in res["rungs"]
    )
    lines = [
        f"### {res['case']}\n",
        f"Rungs {' -> '.join(map(str, res['plan']))}; tau-b the study decided on (on "
        f"{res['stability']}, infeasible tied last): {seen or 'no rung'}; "
        f"decided at {d['steps']} of {res['target_steps']} steps ({d['reason']}). "
        f"Relative constraint: {', '.join(res['relative_constraint']) or 'none'}. "
        f"Probes: {res['prefix_check'].get('why')}.\n",
        c.table(
            ["tau-b to the target", "decided rung's configs", "all trials"],
            [
                [
                    f"from the decided rung ({d['steps']})",
                    ("decided at the target: " if d["steps"] == res["target_steps"] else "")
                    + tau_cell(t["decided_to_target"]),
                    tau_cell(t["decided_to_target_all"]),
                ],
                [
                    f"from the screen ({res['probe_steps']}, old flow)",
                    "-",
                    tau_cell(t["screen_to_target_all"]),
                ],
                [
                    f"from the screen, plain {res['stability']}",
                    "-",
                    tau_cell(t["screen_to_target_all_ungated"]),
                ],
            ],
        ),
        "",
    ]
    rows = []
    for which in ("defaults", *COMPARED):
        f = res["fresh"].get(which)
        p = res["picks"].get(which, {})
        trial = 0 if which == "defaults" else p.get("number")
        if f is None:
            rows.append([which, "none: " + broken(p), "-", "-", "-", "-", "-", "-"])
            continue
        won = "-" if which == "defaults" else ("yes" if f.get("beats_defaults") else "no")
        rows.append(
            [
                which,
                f"trial {trial}",
                iv_cell(f[res["stability"]]),
                iv_cell(f["final_loss"]),
                iv_cell(f["loss_cv"]) if res["stability"] != "loss_cv" else "",
                f"{f['diverged']}/{f['n']}",
                f"{f['infeasible']}/{f['n']}",
                won,
            ]
        )
    lines.append(
        c.table(
            [
                "at the target, fresh seeds",
                "config",
                res["stability"],
                "final_loss",
                "loss_cv (for reference)" if res["stability"] != "loss_cv" else "",
                "diverged",
                "infeasible",
                "matches/beats defaults",
            ],
            rows,
        )
    )
    k = lambda x: f"{x:,}"  # noqa: E731
    lines += [
        "",
        c.table(
            [
                "samples, rungs",
                "screen",
                "rungs",
                "verification",
                "total",
                "today",
                "full (N x T)",
                "full + verify",
                "total/today",
                "saved vs full",
                "saved vs full+verify",
            ],
            [
                [
                    how,
                    k(cp["screen"]),
                    k(cp[key]["rungs"]),
                    k(cp["verification"]),
                    k(cp[key]["total"]),
                    k(cp["today"]),
                    k(cp["full_length"]),
                    k(cp["full_length_verified"]),
                    f"{cp[key]['x_today']:.2f}x",
                    f"{cp[key]['saved_vs_full']:.0%}",
                    f"{cp[key]['saved_vs_full_verified']:.0%}",
                ]
                for key, how in (("continued", "continued"), ("restarted", "restarted (fallback)"))
            ],
        ),
    ]
    return "\n".join(lines)


def plot(results: Sequence[Mapping[str, Any]], path: str) -> None:
    from matplotlib.ticker import NullFormatter

    fig, axes = c.figure(4.2 * len(results), 3.8, 1, len(results))
    marks = {
        "defaults": ("s", "#ff7f0e"),
        "pick": ("*", "#d62728"),
        "old pick": ("^", "#2ca02c"),
        "full-length pick": ("D", "#9467bd"),
    }
    for ax, res in zip(axes[0], results, strict=True):
        pts = {p["number"]: p for p in res["points"]}
        top = max([p["target"] or 0 for p in pts.values()] + [1e-9]) * 1.5
        for p in pts.values():
            y = p["target"] if p["feasible_target"] and p["target"] else top
            ax.plot(p["screen"] or top, y, "o" if p["feasible_target"] else "x", color="#777")
        for which, (m, col) in marks.items():
            n = 0 if which == "defaults" else res["picks"][which]["number"]
            if n is not None and n in pts:
                p = pts[n]
                y = p["target"] if p["feasible_target"] and p["target"] else top
                ax.plot(p["screen"] or top, y, m, color=col, ms=9, mfc="none", label=which)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(NullFormatter())
        st = res["stability"]
        ax.set_xlabel(f"{st} at the screen ({res['probe_steps']} steps)", fontsize=8)
        ax.set_ylabel(f"{st} at the target ({res['target_steps']}; x: infeasible)", fontsize=8)
        ax.set_title(res["case"], fontsize=8)
        ax.legend(fontsize=6)
    c.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--space", default="search_spaces/defaults_hold.yaml", help="'' to skip")
    ap.add_argument("--seeds", default="0", help="the space's sampler seeds, e.g. 0,1,2")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="'' to skip")
    ap.add_argument("--trials", type=int, default=None, help="default: the space's, 12")
    ap.add_argument("--fresh", type=int, default=5, help="fresh seeds (11...) at the target")
    ap.add_argument(
        "--factor", type=int, default=5, help="workload cases: target = factor x probe length"
    )
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a space key in every case, e.g. rungs.min_promote=6 (repeatable)",
    )
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (processes)")
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 4 trials, 10->50 steps, 2 seeds"
    )
    ap.add_argument("--json", metavar="FILE", help="write every number as JSON")
    ap.add_argument("--plot", default=str(c.PLOTS / "target_length.png"))
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        print(
            f"target_length.py: --seeds: integers, comma-separated (got {args.seeds!r})",
            file=sys.stderr,
        )
        return 2
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        print(
            f"target_length.py: --workloads: unknown {', '.join(unknown)}; "
            f"built-in: {', '.join(WORKLOADS)}",
            file=sys.stderr,
        )
        return 2
    if args.quick:
        args.fresh, names = QUICK["seeds"], names[:1]
    fresh = max(1, min(args.fresh, len(FRESH_SEEDS)))
    jobs = [("space", args.space, s) for s in seeds if args.space]
    jobs += [("workload", w, 0) for w in names]
    try:  # bad input: one line, exit 2, before anything runs
        for kind, name, s in jobs:
            if kind == "space":
                file_space(name, s, args.quick, args.trials, args.sets)
            else:
                workload_space(name, s, args.quick, args.trials or 12, args.factor, args.sets)
    except AutotuneError as e:
        print(f"target_length.py: {e}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    c.one_thread()
    mach = c.machine()
    task = [(k, n, s, args.quick, args.trials, fresh, args.factor, args.sets) for k, n, s in jobs]
    results = c.run_cases(run_case, task, args.jobs)
    c.finish_machine(mach, started)
    plot(results, args.plot)
    c.write_json(
        args.json,
        {"benchmark": "target_length", "results": results, "plot": args.plot, "machine": mach},
    )
    print(
        "## Target length: the study's pick (screen, rungs, verification at the decided rung) "
        "against the defaults, the old flow's pick and the full-length pick, over fresh seeds "
        f"{fresh and FRESH_SEEDS[0]}-{FRESH_SEEDS[fresh - 1]} at the target\n"
    )
    print("\n\n".join(report(r) for r in results))
    print(
        "\nmatches/beats defaults: feasible on every seed (none diverged, every constraint met, "
        "the relative one against the defaults at the same seed), and either the defaults were "
        "not (diverged or did not learn on a seed) or the mean stability objective and final_loss "
        "are at most the defaults' upper 95% bound (autotune.recipe.verify.interval, geometric "
        "for these positive metrics). Samples: optimizer steps run x samples per step; rungs "
        "continued: a promoted probe continues the same trial's probe at the previous rung (the "
        "screen for rung 1); restarted: from step 0 (the fallback when the checkpoint is not on "
        "the probe's node); today = the screen + verification of the top_k at the probe length; "
        "full = every trial at the target."
    )
    print(c.footer(mach))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
