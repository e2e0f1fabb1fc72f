"""Compute at the scale users train: the study's default ladder against full-length evaluation
and against a short screen plus top-K, on the same trials and seeds (issue 27 item 1).

Per built-in workload (at its unstable learning rate, the space of `target_length.py`: objectives
noise_per_drop and throughput, constraints loss_drop >= 0.05 and final_loss <= 1.05 x baseline,
verify top 2 x 3 seeds) one Optuna study screens N trials (48 by default) at the probe length L0
(TPE ask/tell through the study's own functions: `_common.Search`), and three strategies decide
from those same trials:

- (a) full: every trial at the target T, then the same verification (top_k x seeds at T) and the
  same pick rule: what a plain Optuna study of N trials at T costs;
- (b) screen + top-K: the screen, then the best K feasible configurations and the baseline at T
  (no intermediate rungs), then the same verification at T. This is the study itself with
  `rungs: {max_rungs: 1, eta: 10, min_promote: K}` (one rung, at the target), run by the same
  `rung_phase` functions;
- (c) the default ladder: the space's rungs as `study/rung_phase.py` decides them (`promote`,
  `agreement`, `should_grow`), verification at the decided rung.

Per strategy: samples spent (the screen, the probes above it continued from the rung below as a
study on one node does, the verification), single-worker wall time (per probe: its configuration's
run at T less its steps at the measured throughput, the fixed cost, plus the probe's steps at that
throughput: `probe_seconds`), the pick, and the
pick at T over fresh seeds 11-15 paired against (a)'s pick (per seed: final_loss and the
stability objective, the pick over (a)'s; diverged and infeasible counts). "As good as (a)":
the same configuration, or no more infeasible fresh seeds than (a)'s pick and neither metric
measurably worse as the tool judges it (`_common.judged_pair`: the 95% interval of the per-seed
ratio entirely above 1).

Probes are read off one run at T per configuration and seed (`_target_study.Runs`: exact on the
CPU, checked bit for bit once per case). Wall time is thus the study's, estimated, not this
benchmark's.

    nice python benchmarks/compute_at_scale.py --jobs 2     # mlp + resnet, 48 trials, 20x
    python benchmarks/compute_at_scale.py --quick            # smoke run: ~20 s
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import _common as c
from _target_study import Case, tau
from target_length import FRESH_SEEDS, workload_space

from autotune.recipe.seeds import seeds_for
from autotune.study import rung_phase as rp

STRATEGIES = ("full", "screen_topk", "ladder")


def topk_sets(k: int) -> list[str]:
    """The space settings that make the study's rungs a screen plus its top K at the target."""
    return ["rungs.max_rungs=1", "rungs.eta=10", f"rungs.min_promote={k}"]


def probe_seconds(run: Mapping[str, Any], steps: int) -> float:
    """One worker's seconds for a probe of `steps` steps of the configuration of `run` (a run
    at the target): its fixed cost (the run's wall time less its steps at the measured
    throughput: process-level setup, the model, the data, the reference loss) plus `steps`
    steps at that throughput. On a loaded machine the waiting the load added to the run lands in
    its fixed part, charged again to every probe of that configuration: an overestimate that
    grows with the number of probes (see RESULTS.md)."""
    tput = (run.get("metrics") or {}).get("throughput")
    n = len(run["series"]["loss"])
    if not tput or not n:
        return float(run["wall_s"]) * steps / max(1, n)
    step_s = run["samples_per_step"] / tput
    fixed = max(0.0, run["wall_s"] - n * step_s)
    return fixed + steps * step_s


class Spend:
    """Samples and single-worker seconds of a strategy's probes, from the runs at the target."""

    def __init__(self, case: Case):
        self.case = case
        self.samples = {"screen": 0, "above_screen": 0, "verification": 0}
        self.wall_s = 0.0
        self.steps_by: dict[
            int, int
        ] = {}  # per configuration: steps of the search (no verification)

    def _run(self, number: int, seed: int) -> dict[str, Any]:
        t = self.case.trials[number]
        self.case.rec(number, self.case.T, seed)  # runs it once if not yet
        runs = self.case.runs
        return runs.cache[runs.key(t["knobs"], t["env"], seed, self.case.T)]

    def probe(self, part: str, number: int, steps: int, *, seed: int | None = None, frm: int = 0):
        """A probe of `steps` steps; `frm` > 0: continued from its probe of `frm` steps (when
        that one ran its whole length, as the study keeps a state only then)."""
        seed = self.case.seed if seed is None else seed
        rec = self.case.rec(number, steps, seed)
        start = 0
        if frm:
            below = self.case.rec(number, frm, seed)
            start = below["steps_run"] if below["status"] == "ok" else 0
        ran = max(0, rec["steps_run"] - start)
        run = self._run(number, seed)
        if part != "verification":
            self.steps_by[number] = self.steps_by.get(number, 0) + ran
        self.samples[part] += ran * run["samples_per_step"]
        self.wall_s += probe_seconds(run, ran)

    def verification(self, chosen: Mapping[str, Any]) -> None:
        seeds = seeds_for(self.case.seed, self.case.space.verify.seeds)
        for n in chosen["verified"]:
            for s in seeds:
                self.probe("verification", n, chosen["steps"], seed=s)

    def out(self) -> dict[str, Any]:
        return {
            **self.samples,
            "total": sum(self.samples.values()),
            "wall_s": self.wall_s,
            "search_steps_by": {str(n): s for n, s in sorted(self.steps_by.items())},
        }


def strategy_full(case: Case, every: list[int]) -> dict[str, Any]:
    spend = Spend(case)
    for n in every:
        spend.probe("above_screen", n, case.T)
    chosen = case.choose(every, case.T, verify=True)
    spend.verification(chosen)
    return {"pick": chosen, "spend": spend.out(), "decided": {"steps": case.T}, "rungs": []}


def strategy_rungs(case: Case, every: list[int]) -> dict[str, Any]:
    """The study's rungs as the case's space sets them (the ladder, or one rung: top-K)."""
    spend = Spend(case)
    for n in every:
        spend.probe("screen", n, case.L0)
    phase = case.rung_phase()
    for r in phase["rungs"]:
        below = case.plan[r["rung"] - 1]
        for n in r["numbers"]:
            spend.probe("above_screen", n, r["steps"], frm=below)
    dec = phase["decided"]["steps"]
    chosen = case.choose(phase["numbers"], dec, verify=True)
    spend.verification(chosen)
    reached = phase["numbers"] if dec == case.T else []
    return {
        "pick": chosen,
        "spend": spend.out(),
        "decided": phase["decided"],
        "rungs": [
            {"steps": r["steps"], "promoted": len(r["numbers"]), "tau": r["agreement"].get("tau")}
            for r in phase["rungs"]
        ],
        "reached_target": len(reached),
    }


WORSE_THAN_BEST, STUCK = 1.5, 0.9  # the divergence calibration's truth (RESULTS.md)


def truly_divergent(case: Case, every: Sequence[int]) -> dict[str, Any]:
    """Which configurations truly diverge at the target, judged on their run at T (the study's
    seed) as the divergence calibration judges a run carried on: a non-finite loss, or a final
    held-out loss above 1.5x the best of the set, or at least 0.9x its initial loss. A run the
    monitor stopped for another cause is listed apart (`stopped`): its end is not known."""
    runs = {n: case.rec(n, case.T) for n in every}
    causes = {n: Spend(case)._run(n, case.seed).get("divergence_cause") for n in every}
    finals = {
        n: r["metrics"].get("final_loss")
        for n, r in runs.items()
        if r["status"] == "ok" and r["metrics"].get("final_loss") is not None
    }
    best = min(finals.values()) if finals else None
    out: dict[str, Any] = {"divergent": [], "stopped": [], "recovered": [], "best_final": best}
    for n, r in runs.items():
        init = r["metrics"].get("initial_loss")
        fin = finals.get(n)
        if r["status"] != "ok":
            nonfinite = causes[n] == "nonfinite_loss"
            out["divergent" if nonfinite else "stopped"].append(n)
        elif fin is None or (best is not None and fin > WORSE_THAN_BEST * best):
            out["divergent"].append(n)  # ends far above the best of the set
        elif init and fin >= STUCK * init:
            out["divergent"].append(n)  # ends where it started
        else:
            out["recovered"].append(n)
    return out


def steps_saved(truth: Mapping[str, Any], res: Mapping[str, Any], case: Case) -> dict:
    """Per strategy, the share of the truly divergent configurations' steps at the target that
    its search (the screen and the probes above it, the monitor's stops included) did not spend
    on them. The baseline is left out: it runs the whole length by design (the yardstick). The
    verification's probes are counted apart: a truly divergent configuration verified is a
    wrong candidate, not a saving."""
    base = case.base()
    numbers = [n for n in list(truth["divergent"]) + list(truth["stopped"]) if n != base]
    out: dict[str, Any] = {"n": len(numbers), "baseline_divergent": base in truth["divergent"]}
    if not numbers:
        return {**out, "why": "no searched configuration truly diverges at the target"}
    whole = len(numbers) * case.T
    for s, r in res.items():
        searched = sum(int(r["spend"]["search_steps_by"].get(str(n), 0)) for n in numbers)
        verified = [n for n in numbers if n in r["pick"]["verified"]]
        out[s] = {
            "spent": searched,
            "of": whole,
            "saved": 1 - searched / whole,
            "verified": verified,
        }
    return out


def quality(case: Case, number: int | None, seeds: Sequence[int]) -> dict[str, Any] | None:
    """The pick at the target over `seeds`: per seed final_loss, the stability objective,
    outcome and feasibility."""
    if number is None:
        return None
    rows = []
    for s in seeds:
        r = case.rec(number, case.T, s)
        m = r["metrics"] if r["status"] == "ok" else {}
        rows.append(
            {
                "seed": s,
                "status": r["status"],
                "feasible": case.judge(number, case.T, s).feasible,
                "final_loss": m.get("final_loss"),
                case.stability: m.get(case.stability),
            }
        )
    return {
        "number": number,
        "seeds": rows,
        "diverged": sum(r["status"] == "diverged" for r in rows),
        "infeasible": sum(not r["feasible"] for r in rows),
        "final_loss_mean": _mean([r["final_loss"] for r in rows]),
        "stability_mean": _mean([r[case.stability] for r in rows]),
    }


def _mean(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def against(q: Mapping[str, Any] | None, ref: Mapping[str, Any] | None, stab: str) -> dict:
    """`q` paired against the full-length pick `ref` over the same fresh seeds."""
    if q is None or ref is None:
        return {"as_good": q is not None or ref is None, "why": "no pick to compare"}
    if q["number"] == ref["number"]:
        return {"as_good": True, "same_config": True}
    out: dict[str, Any] = {"same_config": False}
    worse = False
    for m in ("final_loss", stab):
        j = c.judged_pair([r[m] for r in q["seeds"]], [r[m] for r in ref["seeds"]])
        out[m] = {**j["diff"], "ratio": j["ratio"]}
        worse = worse or j["worse"]
    out["as_good"] = q["infeasible"] <= ref["infeasible"] and not worse
    return out


def run_case(name: str, trials: int, factor: int, k: int, quick: bool, fresh_n: int) -> dict:
    c.one_thread()
    t0 = time.perf_counter()
    space = workload_space(name, 0, quick, trials, factor)
    label = f"{name} at lr {space.knobs['lr']}"
    c.say(f"{label}: screen {space.budget.trials} trials at {space.probe.steps} steps")
    case = Case(label, space)
    case.screen()
    every = sorted(case.trials)
    c.say(f"{label}: full length ({len(every)} x {case.T} steps)")
    res = {"full": strategy_full(case, every)}
    c.say(f"{label}: the default ladder {case.plan}")
    res["ladder"] = strategy_rungs(case, every)
    topk = copy.copy(case)  # the same trials, runs and seeds; only the rungs differ
    topk.space = workload_space(name, 0, quick, trials, factor, topk_sets(k))
    topk.plan = rp.plan(topk.space)
    c.say(f"{label}: screen + top {k} {topk.plan}")
    res["screen_topk"] = strategy_rungs(topk, every)
    seeds = list(FRESH_SEEDS[:fresh_n])
    c.say(f"{label}: the picks over fresh seeds {seeds}")
    qual = {s: quality(case, r["pick"]["number"], seeds) for s, r in res.items()}
    for s, r in res.items():
        r["fresh"] = qual[s]
        r["vs_full"] = against(qual[s], qual["full"], case.stability)
        r["samples_vs_full"] = r["spend"]["total"] / res["full"]["spend"]["total"]
        r["pick"] = {x: r["pick"][x] for x in ("number", "why", "steps", "verified")}
    dec = res["ladder"]["decided"]["steps"]
    truth = truly_divergent(case, every)
    return {
        "case": label,
        "workload": name,
        "trials": len(every),
        "probe_steps": case.L0,
        "target_steps": case.T,
        "plan": case.plan,
        "top_k": k,
        "stability": case.stability,
        "prefix_check": case.prefix_check,
        "fresh_seeds": seeds,
        "strategies": res,
        "truth": truth,
        "divergent_steps_saved": steps_saved(truth, res, case),
        "tau_screen_to_target": tau(case, every, case.L0, case.T),
        "tau_decided_to_target": tau(case, every, dec, case.T),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def _pair_text(m: str, d: Mapping[str, Any]) -> str:
    """`final_loss x1.03 [x0.97, x1.09] (+0.001)`: the ratio the verdict is judged by (results
    written before it was recorded show the difference and its interval)."""
    ratio = d.get("ratio")
    if ratio and ratio.get("low") is not None:
        return (
            f"{m} x{ratio['mean']:.3g} [x{ratio['low']:.3g}, x{ratio['high']:.3g}] "
            f"({d['mean']:+.3g})"
        )
    return f"{m} {d['mean']:+.3g} [{c.fmt(d['low'])}, {c.fmt(d['high'])}]"


def report(r: Mapping[str, Any]) -> str:
    rows = []
    for s in STRATEGIES:
        x = r["strategies"][s]
        sp_, f, vs = x["spend"], x["fresh"], x["vs_full"]
        pick = "none" if f is None else f"trial {f['number']}"
        qual = (
            "-"
            if f is None
            else (
                f"{f['final_loss_mean']:.4g} / {f['stability_mean']:.3g} / "
                f"{f['diverged']}/{len(f['seeds'])} / {f['infeasible']}/{len(f['seeds'])}"
                if f["final_loss_mean"] is not None and f["stability_mean"] is not None
                else f"diverged {f['diverged']}/{len(f['seeds'])}"
            )
        )
        diff = (
            "same config"
            if vs.get("same_config")
            else "; ".join(
                _pair_text(m, vs[m])
                for m in ("final_loss", r["stability"])
                if isinstance(vs.get(m), dict) and vs[m].get("mean") is not None
            )
        )
        rows.append(
            [
                s,
                f"{sp_['total']:,}",
                f"{x['samples_vs_full']:.0%}",
                f"{sp_['wall_s']:.0f}",
                f"{x['decided']['steps']}",
                pick,
                qual,
                diff or vs.get("why", "-"),
                "yes" if vs["as_good"] else "no",
            ]
        )
    foot = ""
    sv = r.get("divergent_steps_saved") or {}
    if sv.get("n"):
        parts = [
            f"{s} {sv[s]['saved']:.0%} ({sv[s]['spent']:,} of {sv[s]['of']:,} steps"
            + (f"; verified {sv[s]['verified']}" if sv[s]["verified"] else "")
            + ")"
            for s in STRATEGIES
        ]
        foot = (
            f"\n\nTruly divergent at the target (baseline apart): {sv['n']} configurations; "
            "their steps saved by the search: " + ", ".join(parts) + "."
        )
    elif sv:
        foot = f"\n\nTruly divergent at the target: {sv.get('why')}."
    head = (
        f"### {r['case']}: {r['trials']} trials, {r['probe_steps']} -> {r['target_steps']} "
        f"steps, ladder {' -> '.join(map(str, r['plan']))}, top K = {r['top_k']}\n"
    )
    return (
        head
        + c.table(
            [
                "strategy",
                "samples",
                "vs full",
                "wall s (1 worker)",
                "decided at",
                "pick",
                "fresh: final_loss / stability / diverged / infeasible",
                "paired vs full's pick (mean [95%])",
                "as good",
            ],
            rows,
        )
        + foot
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workloads", default="mlp,resnet")
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--factor", type=int, default=20, help="target = factor x probe length")
    ap.add_argument("--top-k", type=int, default=5, help="(b): configurations taken to T")
    ap.add_argument("--fresh", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 trials, 10 -> 50 steps")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    bad = [w for w in names if w not in ("mlp", "tiny_gpt", "resnet")]
    if bad or args.trials < 2 or args.top_k < 1:
        print(
            "compute_at_scale.py: --workloads: mlp, tiny_gpt, resnet; --trials >= 2; --top-k >= 1",
            file=sys.stderr,
        )
        return 2
    fresh = max(1, min(args.fresh, len(FRESH_SEEDS)))
    if args.quick:
        names, fresh = names[:1], 2
    started = time.perf_counter()
    mach = c.machine()
    task = [(w, args.trials, args.factor, args.top_k, args.quick, fresh) for w in names]
    results = c.run_cases(run_case, task, args.jobs)
    c.finish_machine(mach, started)
    c.write_json(args.json, {"benchmark": "compute_at_scale", "results": results, "machine": mach})
    print("## Compute at scale: full length, screen + top-K, the default ladder\n")
    print("\n\n".join(report(r) for r in results))
    print(c.footer(mach))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
