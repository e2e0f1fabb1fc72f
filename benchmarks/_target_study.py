"""The study of `target_length.py`, in this process: screen, rungs, verification and picks
through the study's own functions, on probes read off one run at the target (not a benchmark)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import _common as c

from autotune import space as sp
from autotune import study as st
from autotune.probe import resolve_knobs
from autotune.recipe import verify as vf
from autotune.study import attrs as ua
from autotune.study import pick as pk
from autotune.study import rung_phase as rp
from autotune.study import rungs as rg
from autotune.study.objectives import constraints_of, feasible, reference

# ---------------------------------------------------------------------------------------------
# Probes: one run at the target per configuration and seed, read by prefixes
# ---------------------------------------------------------------------------------------------


class Runs:
    """Probe records at any length, from one run at the target per configuration and seed (or,
    with `prefixes` off, one run per length)."""

    def __init__(self, space: sp.Space, target: int):
        self.space, self.target = space, target
        self.prefixes, self.why = True, "prefixes of one run at the target"
        self.cache: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.wall_s = 0.0

    @staticmethod
    def key(knobs: Mapping[str, Any], env: Mapping[str, Any], seed: int, steps: int) -> Any:
        return (repr(sorted(knobs.items())), repr(sorted(env.items())), seed, steps)

    def at(
        self, knobs: Mapping[str, Any], env: Mapping[str, Any], seed: int, steps: int
    ) -> dict[str, Any]:
        """The record of a probe of `steps` steps (status, metrics, steps_run, samples...)."""
        length = self.target if self.prefixes else steps
        key = self.key(knobs, env, seed, length)
        if key not in self.cache:
            t0 = time.perf_counter()
            self.cache[key] = c.long_probe(self.space, knobs, env, steps=length, seed=seed)
            self.wall_s += time.perf_counter() - t0
        run = self.cache[key]
        rec = c.prefix_summary(run, steps)
        rec.update(knobs=run["knobs"], samples=rec["steps_run"] * run["samples_per_step"])
        return rec

    def check(self, knobs: Mapping[str, Any], env: Mapping[str, Any], n: int) -> dict[str, Any]:
        """One prefix against a probe of n steps run on its own; prefixes off when they differ."""
        for kn in (knobs, self.space.fixed_knobs()):
            searched = "schedule" in self.space.searched()
            if searched or resolve_knobs(dict(kn), math.nan)["schedule"] != "constant":
                self.prefixes, self.why = False, "separate runs: the schedule stretches"
                return {"passed": None, "why": self.why}
        seed = self.space.probe.seed
        self.at(knobs, env, seed, n)
        run = self.cache[self.key(knobs, env, seed, self.target)]
        alone = c.long_probe(self.space, knobs, env, steps=n, seed=seed)
        problems = c.prefix_problems(alone, run, n)
        if problems:
            self.prefixes, self.why = False, "separate runs: " + "; ".join(problems)
            self.cache.clear()
        return {"passed": not problems, "steps": n, "prefix_of": self.target, "why": self.why}


# ---------------------------------------------------------------------------------------------
# The study, in this process
# ---------------------------------------------------------------------------------------------


class Case:
    """One study (a space and a sampler seed): its trials, screened, promoted, verified."""

    def __init__(self, label: str, space: sp.Space):
        self.label, self.space = label, space
        self.objectives = c.objectives_of(space)
        self.stability = self.objectives[rg.stability_objective(self.objectives)]["metric"]
        self.L0, self.T, self.plan = space.probe.steps, rp.target_of(space), rp.plan(space)
        self.runs = Runs(space, self.T)
        self.seed = space.probe.seed
        self.trials: dict[int, dict[str, Any]] = {}  # number -> knobs, env, baseline
        self.search: c.Search | None = None  # the screen's Optuna study, once screened

    def base(self) -> int:
        return next(n for n, t in self.trials.items() if t["baseline"])

    def rec(self, number: int, steps: int, seed: int | None = None) -> dict[str, Any]:
        t = self.trials[number]
        return self.runs.at(t["knobs"], t["env"], self.seed if seed is None else seed, steps)

    def reference(self, steps: int, seed: int | None = None) -> dict[str, Any] | None:
        """The baseline's metrics at `steps` (and seed): the relative constraints' reference,
        as the study takes it (`objectives.reference`: only from a run that completed; None,
        vacuous, when the baseline diverged or failed there)."""
        b = self.rec(self.base(), steps, seed)
        return reference(c.outcome_name(b["status"]), b["metrics"])

    def judge(self, number: int, steps: int, seed: int | None = None) -> rg.RungResult:
        """The trial at `steps` (and seed) as the study judges a rung probe
        (`rung_phase.judge`): values and feasibility, the relative constraint against the
        baseline at the same steps and seed."""
        r = self.rec(number, steps, seed)
        record = {"outcome": c.outcome_name(r["status"]), "summary": {"metrics": r["metrics"]}}
        rp.judge(self.space, record, self.reference(steps, seed))
        return rg.RungResult(
            number=number,
            steps=steps,
            baseline=self.trials[number]["baseline"],
            outcome=record["outcome"],
            values=record["values"],
            feasible=record["feasible"],
            metrics=dict(r["metrics"]),
        )

    def screen(self) -> list[dict[str, Any]]:
        def runner(knobs: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
            r = self.runs.at(knobs, env, self.seed, self.L0)
            return {**r, "wall_s": 0.0, "summary": {"metrics": r["metrics"], "knobs": r["knobs"]}}

        search = c.Search(self.space, runner=runner)
        base = self.space.baseline_knobs(), self.space.baseline_env()
        self.prefix_check = self.runs.check(base[0], base[1], self.L0)
        search.run(self.space.budget.trials)
        self.search = search
        for t in search.study.get_trials(deepcopy=False):
            baseline = ua.is_baseline(t)
            # The knobs the screen's probe was given, the key of its run: the stored
            # autotune.knobs are those it ran with (batch resolved), which would run it again.
            knobs, env = st.trial_setup(self.space, t.params, baseline)
            self.trials[t.number] = {
                "knobs": knobs,
                "env": env,
                "baseline": baseline,
                "params": dict(t.params),
            }
        return search.records

    def rung_phase(self) -> dict[str, Any]:
        """The rungs as `rung_phase` decides them."""
        r = self.space.rungs
        assert self.search is not None, "screen() first"
        prev = rp.screen_results(self.search.study, self.space)  # as the study reads its screen
        table: list[dict[str, Any]] = []
        decided: dict[str, Any] = {"steps": self.L0, "rung": 0, "reason": "", "tau": None}
        numbers = sorted(self.trials)
        for k, steps in enumerate(self.plan[1:], 1):
            promoted = rg.promote(prev, self.objectives, eta=r.eta, min_promote=r.min_promote)
            if not [n for n in promoted if not self.trials[n]["baseline"]]:
                decided["reason"] = "no feasible configuration to promote"
                break
            cur = [self.judge(n, steps) for n in promoted]
            ag = rg.agreement(prev, cur, self.objectives)
            table.append({"rung": k, "steps": steps, "numbers": promoted, "agreement": ag})
            grow, why = rg.should_grow(
                [row["agreement"] for row in table],
                threshold=r.agreement,
                min_n=r.min_agreement_n,
                grow=r.grow,
                at_target=steps == self.plan[-1],
                pairs=r.agree_rungs,
            )
            decided = {"steps": steps, "rung": k, "reason": why, "tau": ag.get("tau")}
            numbers = promoted
            if not grow:
                break
            prev = cur
        return {"rungs": table, "decided": decided, "numbers": numbers}

    def candidates(self, numbers: Sequence[int], steps: int) -> list[pk.Candidate]:
        """The candidates at `steps` by the study's rule (`pick.is_candidate`): above the
        screen, feasible at `steps` whatever the screen said; at the screen, the screen's."""
        out = []
        for n in numbers:
            res = self.judge(n, steps)
            row = {"feasible": res.feasible, "values": res.values}
            screened = self.judge(n, self.L0).feasible
            if pk.is_candidate(screened, row, above_screen=steps != self.L0):
                t = self.trials[n]
                out.append(
                    pk.Candidate(
                        number=n,
                        values=list(res.values or []),
                        metrics=res.metrics,
                        knobs=t["knobs"],
                        env=t["env"],
                        params=t["params"],
                        baseline=t["baseline"],
                        steps=steps,
                    )
                )
        return out

    def baseline_refs(self, steps: int, seeds: Sequence[int], verified: bool) -> list[Any]:
        """Per verification seed, the baseline's metrics it is judged against, by the rule of
        `verification.baseline_references` (which reads the study's storage and folder, so it
        is mirrored here): the baseline's verified run at that seed and length when the
        baseline was verified there, else its run at that length (`improvement.baseline_at`:
        its screen, or its record at that rung; the probe's seed)."""
        if verified:
            return [self.reference(steps, s) for s in seeds]
        return [self.reference(steps)] * len(seeds)

    def verified(self, number: int, steps: int, base_verified: bool) -> dict[str, Any]:
        """`verify.seeds` seeds at `steps`, summarised and judged as verification does
        (`verification.judge_seeds`); `base_verified`: the baseline is verified there too."""
        seeds = vf.seeds_for(self.seed, self.space.verify.seeds)
        runs: list[dict[str, Any]] = []
        for seed in seeds:
            r = self.rec(number, steps, seed)
            runs.append({"seed": seed, "outcome": c.outcome_name(r["status"]), "summary": r})
        metrics = list(dict.fromkeys([*(o["metric"] for o in self.objectives), *vf.REPORTED]))
        res = vf.summarize_seeds(runs, metrics)
        res["steps"] = steps
        names = st.constraint_names(self.space)
        refs = self.baseline_refs(steps, seeds, base_verified)
        for r, row, ref in zip(runs, res["runs"], refs, strict=True):
            m = r["summary"]["metrics"]
            cons = constraints_of(self.space, "complete", m, ref)
            row["broken"] = [n for n, v in zip(names, cons, strict=True) if v > 0]
            done = r["outcome"] == "complete"
            row["feasible"] = done and feasible(self.space, "complete", m, ref)
        res["all_feasible"] = all(row["feasible"] for row in res["runs"])
        res["samples"] = sum(r["summary"]["samples"] for r in runs)
        return res

    def choose(self, numbers: Sequence[int], steps: int, verify: bool) -> dict[str, Any]:
        """The pick at `steps` among `numbers`: as the study picks (the top_k verified) when
        `verify`, else by the same rule on the values at `steps` alone."""
        cands = self.candidates(numbers, steps)
        samples, top, base_verified = 0, [], False
        seeds: dict[int, list[dict[str, Any]]] = {}
        if verify and self.space.verify.top_k > 0:
            top = [x.number for x in pk.ranked(cands, self.objectives)[: self.space.verify.top_k]]
            base_verified = self.base() in top
            for cand in cands:
                if cand.number in top:
                    cand.verified = self.verified(cand.number, steps, base_verified)
                    samples += cand.verified["samples"]
                    seeds[cand.number] = [
                        {k: row[k] for k in ("seed", "outcome", "broken")}
                        for row in cand.verified["runs"]
                    ]
        try:
            number, why = pk.pick(cands, self.objectives, "balanced").number, ""
        except pk.RecipeError as e:  # none feasible, or none held on every seed
            number, why = None, str(e)
        return {
            "number": number,
            "why": why,
            "steps": steps,
            "verified": top,
            "baseline_verified": base_verified,  # seeds judged against its runs at each seed
            "samples": samples,
            "seeds": seeds,
        }

    def fresh(self, number: int | None, seeds: Sequence[int]) -> dict[str, Any] | None:
        if number is None:
            return None
        recs = [self.rec(number, self.T, s) for s in seeds]
        ok = [r for r in recs if r["status"] == "ok"]
        feasible = [self.judge(number, self.T, s).feasible for s in seeds]
        out: dict[str, Any] = {
            "n": len(recs),
            "diverged": sum(r["status"] == "diverged" for r in recs),
            "infeasible": feasible.count(False),  # diverged, or a constraint broken
        }
        for m in dict.fromkeys((self.stability, "final_loss", "loss_cv")):
            scale = "log" if m in sp.POSITIVE_METRICS else "linear"
            out[m] = vf.interval([r["metrics"].get(m) for r in ok], scale=scale)
        return out


def tau(case: Case, numbers: Sequence[int], a: int, b: int, gated: bool = True) -> dict[str, Any]:
    """tau-b between the lengths `a` and `b` over `numbers`, as the study measures agreement
    (`rungs.agreement`: the stability objective, infeasible tied last); `gated` off: every
    configuration by its value, feasible or not (a failed one, without values, still last)."""

    def at(steps: int) -> list[rg.RungResult]:
        out = [case.judge(n, steps) for n in numbers]
        return out if gated else [dataclasses.replace(r, feasible=True) for r in out]

    ag = rg.agreement(at(a), at(b), case.objectives)
    return {"tau": ag["tau"], "n": ag["n"], "metric": ag["metric"], "from": a, "to": b}
