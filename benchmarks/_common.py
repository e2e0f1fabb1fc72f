"""Helpers shared by the search-quality benchmarks of this folder (not a benchmark itself).

These benchmarks measure the search and the probe, not the orchestration: probes run in this
process with `autotune.probe.run_probe` on one torch thread, and Optuna is driven directly with
an in-memory study, through the same helpers `autotune study` uses (`make_sampler`, `suggest`,
`trial_setup`, `complete_outcome`, `tell`: values, constraints and user attributes exactly as a
study stores them). No Ray, no MLflow, no probe processes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune import study as st
from autotune.probe import metrics, run_probe
from autotune.study import attrs as ua

PLOTS = Path(__file__).resolve().parent / "plots"
OBJECTIVE_METRICS = ("loss_cv", "final_loss", "spike_count", "throughput")
# Metrics that a prefix reproduces exactly (throughput, tokens_per_s and peak_mem_mb are timed
# or measured, not computed from the losses): the prefix self-checks compare these.
EXACT_METRICS = ("initial_loss", "final_loss", "loss_drop", "loss_cv", "loss_range", "spike_count")


def one_thread() -> None:
    """One torch thread, as a study gives each CPU trial on a 2-core machine."""
    import torch

    torch.set_num_threads(1)


def say(text: str) -> None:
    """Progress goes to stderr; stdout carries only the result."""
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------------


def probe(
    space: sp.Space,
    knobs: Mapping[str, Any],
    env: Mapping[str, Any] | None = None,
    *,
    seed: int | None = None,
    steps: int | None = None,
    stop_early: bool | None = None,
) -> dict[str, Any]:
    """One probe of `space` with `knobs`, in this process on one thread; a compact record."""
    cfg = sp.probe_config(space, knobs=knobs, env=env or {}, seed=seed)
    changes: dict[str, Any] = {"threads": 1}
    if steps is not None:
        changes["steps"] = steps
    if stop_early is not None:
        changes["divergence"] = {**cfg.divergence, "stop_early": stop_early}
    cfg = dataclasses.replace(cfg, **changes)
    t0 = time.perf_counter()
    summary = run_probe(cfg)
    wall = time.perf_counter() - t0
    summary.pop("series", None)  # the step series: not needed here, and large
    return {
        "status": summary["status"],
        "cause": summary.get("divergence_cause"),
        "diverged_at_step": summary.get("diverged_at_step"),
        "steps_run": summary["steps_run"],
        "steps_planned": summary["steps_planned"],
        "wall_s": wall,
        "metrics": summary.get("metrics") or {},
        "knobs": summary.get("knobs") or dict(knobs),
        "summary": summary,
    }


def long_probe(
    space: sp.Space,
    knobs: Mapping[str, Any],
    env: Mapping[str, Any] | None = None,
    *,
    steps: int,
    seed: int | None = None,
) -> dict[str, Any]:
    """The probe's whole summary, step series included (`probe` drops them): one thread."""
    cfg = sp.probe_config(space, knobs=knobs, env=env or {}, seed=seed)
    return run_probe(dataclasses.replace(cfg, threads=1, steps=steps))


def prefix_summary(run: Mapping[str, Any], n: int) -> dict[str, Any]:
    """What an n-step probe reports, read off the first n steps of the longer `run` (a
    `long_probe` summary): exact on the CPU when the schedule ignores the run length (the
    probe is deterministic for a seed, its data order does not depend on the length and its
    divergence check is causal). A run that diverged at step d (0-based) is diverged for every
    prefix longer than d (its metrics then cover steps 0..d)."""
    series = run["series"]
    have = len(series["loss"])
    d = run["diverged_at_step"]
    if run["status"] == "diverged" and d is not None and n > d:
        status, cut = "diverged", d + 1  # it diverges within the first n steps, at step d
    elif n <= have:
        status, cut = "ok", n
    else:  # the long run stopped short for another reason (oom): so would this one
        status, cut = run["status"], have
    values: dict[str, Any] = {}
    if cut:
        values = metrics.summarize(
            {name: s[:cut] for name, s in series.items()},
            samples_per_step=run["samples_per_step"],
            tokens_per_step=run["tokens_per_step"],
            precision=run["precision"],
            reference=run["metrics"].get("initial_loss"),  # held-out: the same at every length
        )
    values = {
        k: (v if math.isfinite(v) else None) if isinstance(v, float) else v
        for k, v in values.items()
    }
    values["peak_mem_mb"] = run["metrics"].get("peak_mem_mb")  # the long run's
    return {
        "status": status,
        "cause": run["divergence_cause"] if status == "diverged" else None,
        "diverged_at_step": d if status == "diverged" else None,
        "steps_run": cut,
        "steps_planned": n,
        "metrics": values,
    }


def prefix_problems(alone: Mapping[str, Any], run: Mapping[str, Any], n: int) -> list[str]:
    """How the n-step probe `alone` differs from the n-step prefix of `run` (both `long_probe`
    summaries): loss series, status, divergence step, loss metrics. Empty when bit for bit."""
    want = prefix_summary(run, n)
    k = want["steps_run"]  # the steps both must have, equal: n, or up to the divergent step
    a, b = alone["series"]["loss"], run["series"]["loss"]
    problems = []
    if len(a) < k or a[:k] != b[:k]:
        first = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        problems.append(f"loss series differ from step {first} ({len(a)} vs {len(b)} steps)")
    if (alone["status"], alone["diverged_at_step"]) != (want["status"], want["diverged_at_step"]):
        problems.append(
            f"status {alone['status']} (diverged at {alone['diverged_at_step']}) on its own, "
            f"{want['status']} (at {want['diverged_at_step']}) as a prefix"
        )
    if want["status"] == "ok":
        for name in EXACT_METRICS:
            if alone["metrics"].get(name) != want["metrics"].get(name):
                problems.append(
                    f"{name} {alone['metrics'].get(name)!r} on its own, "
                    f"{want['metrics'].get(name)!r} as a prefix"
                )
    return problems


def outcome_name(status: str) -> str:
    """The study's outcome for a probe status (as `autotune.process.launcher.outcome_of`
    maps it)."""
    return {"ok": "complete"}.get(status, status)


# ---------------------------------------------------------------------------------------------
# An in-memory study driven like `autotune study` drives its storage-backed one
# ---------------------------------------------------------------------------------------------


class Search:
    """One Optuna study in memory: trial 0 is the baseline, then the sampler's suggestions.

    `step()` runs one trial: ask, `suggest`, `trial_setup`, the probe, `complete_outcome`, `tell`
    (so constraints, user attributes and values are exactly those of a real study, and
    `autotune.pick.candidates(search.study)` works on it). `cache` maps a configuration to its
    probe record: a configuration already probed (the probe is deterministic on the CPU for a
    given seed) is not run again, and its earlier record, throughput included, is reused.
    `runner(knobs, env)` replaces the probe (a record shaped as `probe`'s).
    """

    def __init__(
        self,
        space: sp.Space,
        *,
        baseline: bool = True,
        cache: dict[str, dict[str, Any]] | None = None,
        on_trial: Callable[[Search, dict[str, Any]], None] | None = None,
        runner: Callable[[dict[str, Any], dict[str, str]], dict[str, Any]] | None = None,
    ):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space
        self.searched = space.searched()
        self.study = optuna.create_study(
            directions=list(st.directions(space)),  # type: ignore[arg-type]
            sampler=st.make_sampler(space, self.searched),
        )
        if baseline:
            self.study.enqueue_trial({}, user_attrs={ua.BASELINE: True})
        self.cache = cache if cache is not None else {}
        self.on_trial = on_trial
        self.runner = runner or (lambda knobs, env: probe(self.space, knobs, env))
        self.records: list[dict[str, Any]] = []
        self.sampler_s = 0.0  # time spent in ask + suggest (the sampler's own cost)

    def step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        trial = self.study.ask()
        is_base = ua.is_baseline(trial)
        params = {} if is_base else st.suggest(trial, self.space, self.searched)
        self.sampler_s += time.perf_counter() - t0
        knobs, env = st.trial_setup(self.space, params, is_base)
        trial.set_user_attr(ua.KNOBS, knobs)
        trial.set_user_attr(ua.ENV, env)
        key = json.dumps({"knobs": knobs, "env": env}, sort_keys=True, default=str)
        cached = key in self.cache
        if not cached:
            self.cache[key] = self.runner(knobs, env)
        rec = self.cache[key]
        frozen = self.study._storage.get_trial(trial._trial_id)
        result = {"outcome": outcome_name(rec["status"]), "cause": rec["cause"]}
        result["summary"] = rec["summary"]
        outcome = st.complete_outcome(self.space, frozen, result)
        st.tell(self.study, frozen, outcome)
        row = {
            "number": trial.number,
            "baseline": is_base,
            "params": params,
            "outcome": outcome["outcome"],
            "cause": rec["cause"],
            "feasible": bool(outcome["feasible"]),
            "values": outcome["values"],
            "metrics": dict(rec["metrics"]),
            "steps_run": rec["steps_run"],
            "wall_s": rec["wall_s"],
            "cached": cached,
        }
        self.records.append(row)
        if self.on_trial is not None:
            self.on_trial(self, row)
        return row

    def run(self, trials: int) -> list[dict[str, Any]]:
        for _ in range(trials):
            self.step()
        return self.records


def objectives_of(space: sp.Space) -> list[dict[str, Any]]:
    return [o.model_dump() for o in space.objectives]


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """The machine, its versions, the date and the load average (the machines are shared)."""
    import importlib.metadata as md

    import torch

    from autotune import fingerprint

    fp = fingerprint.collect()
    host, versions = fp.get("host") or {}, dict(fp.get("versions") or {})
    for name in ("scipy", "matplotlib"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    gpus = [d.get("name") for d in fp.get("devices") or []]
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": fp.get("platform"),
        "cpu": host.get("cpu_model"),
        "cpus": host.get("cpu_count"),
        "ram_gb": host.get("ram_gb"),
        "gpus": gpus,
        "torch_threads": torch.get_num_threads(),
        "versions": {k: v for k, v in versions.items() if v is not None},
        "fingerprint_hash": fp.get("hash"),
        "loadavg_start": _loadavg(),
    }


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_line(m: Mapping[str, Any]) -> str:
    v = m["versions"]
    gpu = ", ".join(g for g in m["gpus"] if g) or "no GPU"
    names = ("python", "torch", "optuna", "numpy", "scipy", "matplotlib")
    vers = ", ".join(f"{k} {v[k]}" for k in names if k in v)
    load = m.get("loadavg_start"), m.get("loadavg_end")
    return (
        f"Machine: {m['cpu']}, {m['cpus']} cores, {m['ram_gb']} GiB, {gpu} ({m['platform']}), "
        f"{m['torch_threads']} torch thread(s); {vers}; fingerprint {m['fingerprint_hash']}; "
        f"{m['date']}; load average (1/5/15 min) at start {load[0]}, at end {load[1]}."
    )


def footer(m: Mapping[str, Any]) -> str:
    """The report's last lines: the wall time and the machine."""
    return f"\nWall {m['wall_s']:.0f} s.\n\n" + machine_line(m)


def finish_machine(m: dict[str, Any], started: float) -> dict[str, Any]:
    m["loadavg_end"] = _loadavg()
    m["wall_s"] = round(time.perf_counter() - started, 1)
    return m


def close_report(
    path: str | Path | None, m: dict[str, Any], started: float, results: Any, text: str
) -> None:
    """A case-by-case benchmark's end: its table `text` printed, the machine's wall time and
    load recorded, {"machine", "results"} written to `path`, the footer printed."""
    print(text)
    m = finish_machine(m, started)
    write_json(path, {"machine": m, "results": results})
    print(footer(m))


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "n/a"
        return f"{x:.{digits}g}"
    return str(x)


def run_cases(
    run_case: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], jobs: int
) -> list[Any]:
    """`run_case(*task)` for each task, in order: in this process, or in `jobs` spawned
    processes (`run_case` must then be a module-level function of a benchmark script)."""
    if jobs <= 1:
        return [run_case(*t) for t in tasks]
    import concurrent.futures as cf
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        return list(pool.map(run_case, *zip(*tasks, strict=True)))


def write_json(path: str | Path | None, data: Any) -> None:
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    say(f"wrote {target}")


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def figure(width: float, height: float, rows: int = 1, cols: int = 1) -> tuple[Any, Any]:
    """A matplotlib Figure on the Agg canvas (pyplot never imported) and its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def save_figure(fig: Any, path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target)
    say(f"wrote {target}")
    return target


def judged_pair(xs: Sequence[float | None], ys: Sequence[float | None]) -> dict[str, Any]:
    """x against y over the same seeds for a metric that is minimised, judged as the tool
    judges it (`autotune.recipe.paired`): a positive metric by the per-seed log ratio x / y
    (its 95% interval mapped back: `ratio`), else by the difference x - y; `worse` when the
    whole interval says x is higher. `diff` (the raw difference and its interval) is kept for
    reading."""
    from autotune.recipe.paired import paired_ratio
    from autotune.recipe.seeds import paired

    d = paired(xs, ys)
    diff = {k: d.get(k) for k in ("mean", "low", "high", "n")}
    ratio = paired_ratio(xs, ys)
    low = diff["low"] if ratio is None else ratio["low"]
    worse = low is not None and low > (0.0 if ratio is None else 1.0)
    return {"diff": diff, "ratio": ratio, "worse": worse}
