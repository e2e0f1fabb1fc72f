"""False divergences: of the runs the divergence monitor labels diverged, how many end well when
carried on to the target, and what early stopping saves on the ones that truly diverge.

Each workload (the built-ins mlp, tiny_gpt and resnet; heavy_tail and gru_lm of
benchmarks/workloads/) runs a fixed set of configurations (CONFIGS: PyTorch's defaults at the
workload's unstable_lr; clipping 1.0, warm-up 50, and clipping 0.3 with warm-up 50 at the same
rate, from the ranges of search_spaces/gradclip.yaml; the defaults at default_lr) to its target
length (WORKLOADS) WITHOUT early stopping (`divergence.stop_early: false`), fp32, micro-batch
16, one torch thread per run, over seeds 1-5. The examples/ are training scripts
(`autotune.trial()`), not Workloads, so they are not in this benchmark.

Each run's per-step series (loss, grad_norm, scale, skipped) and what the monitor needs
(precision, initial loss, clipping) are saved, as soon as the run ends, to
SERIES_DIR/<workload>-<config>-s<seed>.npz (the rest as a JSON string under `meta`).

Then, offline, each run is labelled by a fresh `autotune.probe.divergence.DivergenceMonitor`
fed its whole series (its default thresholds, or --threshold KEY=VALUE), and per workload the
table gives:

* labelled diverged: runs the monitor labels diverged;
* false: of those, the ones whose final loss (mean of the last 10% of steps, as the probe's
  `final_loss`; infinite if one of those steps is not finite) is within 10% of the best final
  loss of their group: `study best` = the runs of that workload at the same seed and learning
  rate (what one study compares: the configurations at unstable_lr, with one initialisation
  and data order; the defaults at default_lr are a group of their own), `workload best` = every
  run of that workload (any seed, any rate; the stricter yardstick). Issue 23's goal: under 5%;
* truly divergent: labelled and not false (by the study group); steps saved: their mean share of
  the target that stopping at the verdict step saves, (target - step) / target. Goal: >= 35%;
* missed: runs NOT labelled whose final loss is still >= 90% of their initial (held-out) loss.

    python benchmarks/false_divergence.py --jobs 2        # train, then label (~20 min, 2 cores)
    python benchmarks/false_divergence.py --from-cache    # re-label the saved series (seconds)
    python benchmarks/false_divergence.py --from-cache --threshold loss_explosion_factor=20
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)
import numpy as np

HERE = Path(__file__).resolve().parent
SERIES_DIR = Path(__file__).resolve().parent / "results" / "false_divergence_series"
RESULTS = HERE / "results" / "false_divergence.json"
SEEDS = (1, 2, 3, 4, 5)
WITHIN = 0.10  # "ends well": final loss within 10% of its group's best
MISSED = 0.9  # "missed": not labelled, yet the final loss is >= 90% of the initial one
MICRO_BATCH = 16

# name -> (workload ref, size, target steps). Targets: long enough for a spike to be followed
# by recovery (or not), short enough for 2 shared cores (steps of 1 ms to ~20 ms).
WORKLOADS: dict[str, tuple[str, str, int]] = {
    "mlp": ("mlp", "tiny", 1000),
    "heavy_tail": (str(HERE / "workloads" / "heavy_tail.py") + ":make", "tiny", 1000),
    "tiny_gpt": ("tiny_gpt", "tiny", 500),
    "resnet": ("resnet", "tiny", 400),
    "gru_lm": (str(HERE / "workloads" / "gru_lm.py") + ":make", "tiny", 500),
}

Knobs = dict[str, Any]
# name -> the knobs, given (default_lr, unstable_lr). Unset knobs take PyTorch's defaults.
CONFIGS: dict[str, Callable[[float, float], Knobs]] = {
    "defaults": lambda d, u: {"lr": u},
    "clip1": lambda d, u: {"lr": u, "clip_norm": 1.0},
    "warmup50": lambda d, u: {"lr": u, "warmup_steps": 50},
    "clip0.3_warmup50": lambda d, u: {"lr": u, "clip_norm": 0.3, "warmup_steps": 50},
    "default_lr": lambda d, u: {"lr": d},
}


# ---------------------------------------------------------------------------------------------
# Training: one run, saved at once
# ---------------------------------------------------------------------------------------------


def series_path(series_dir: Path, workload: str, config: str, seed: int) -> Path:
    return series_dir / f"{workload}-{config}-s{seed}.npz"


def train_one(job: tuple[str, str, int, int, str]) -> dict[str, Any]:
    """Run one configuration to its target without early stopping; save its series; a record."""
    import torch

    from autotune.probe import ProbeConfig, run_probe
    from autotune.probe.workload import resolve

    workload, config, seed, target, series_dir = job
    torch.set_num_threads(1)
    ref, size, _ = WORKLOADS[workload]
    wl = resolve(ref, size)
    knobs = CONFIGS[config](wl.default_lr, wl.unstable_lr)
    cfg = ProbeConfig(
        workload=ref,
        size=size,
        steps=target,
        micro_batch=MICRO_BATCH,
        precision="fp32",
        seed=seed,
        threads=1,
        divergence={"stop_early": False},
        knobs=knobs,
    )
    t0 = time.perf_counter()
    summary = run_probe(cfg)
    wall = time.perf_counter() - t0
    series = summary["series"]
    resolved = summary["knobs"]
    meta = {
        "workload": workload,
        "ref": ref,
        "size": size,
        "config": config,
        "seed": seed,
        "target": target,
        "steps_run": summary["steps_run"],
        "precision": summary["precision"],
        "initial_loss": summary["initial_reference"]["loss"],
        "clipping": float(resolved["clip_norm"]) > 0,
        "knobs": {k: knobs[k] for k in sorted(knobs)},
        "probe_cause": summary["divergence_cause"],  # the online monitor's, at training time
        "probe_step": summary["diverged_at_step"],
        "wall_s": round(wall, 2),
    }
    path = series_path(Path(series_dir), workload, config, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {
        name: np.asarray(series[name], dtype=np.float64)
        for name in ("loss", "grad_norm", "scale", "skipped")
        if name in series
    }
    tmp = path.with_suffix(".tmp.npz")
    with open(tmp, "wb") as fh:
        np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]
    os.replace(tmp, path)
    return meta


def jobs_to_run(
    series_dir: Path, names: Sequence[str], seeds: Sequence[int], scale: float, resume: bool
) -> list[tuple[Any, ...]]:
    """The runs to train: (workload, config, seed, target, series_dir), seed by seed (an
    interrupted run leaves whole seeds behind)."""
    out = []
    for seed in seeds:
        for name in names:
            target = max(20, round(WORKLOADS[name][2] * scale))
            for config in CONFIGS:
                path = series_path(series_dir, name, config, seed)
                if resume and path.exists() and load(path)[0]["target"] == target:
                    continue
                out.append((name, config, seed, target, str(series_dir)))
    return out


def train(series_dir: Path, names: Sequence[str], seeds: Sequence[int], args: Any) -> float:
    jobs, scale, resume = args.jobs, args.scale, args.resume
    todo = jobs_to_run(series_dir, names, seeds, scale, resume)
    c.say(f"training {len(todo)} runs on {jobs} process(es) -> {series_dir}")
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for i, meta in enumerate(pool.map(train_one, todo), 1):
            label = f"{meta['workload']}-{meta['config']}-s{meta['seed']}"
            cause = meta["probe_cause"] or "ok"
            c.say(f"  [{i}/{len(todo)}] {label:<34} {cause:<15} {meta['wall_s']:6.1f} s")
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# Labelling, offline
# ---------------------------------------------------------------------------------------------


def load(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        arrays = {k: np.array(data[k]) for k in data.files if k != "meta"}
    return meta, arrays


def final_of(loss: np.ndarray) -> float:
    """The probe's final_loss (mean of the last 10% of steps); inf when one of them is not
    finite (a run that ends in NaN did not end well, whatever its finite steps say)."""
    from autotune.probe import metrics

    k = max(1, math.ceil(round(len(loss) * 0.10, 9)))
    if not np.isfinite(loss[-k:]).all():
        return math.inf
    return float(metrics.final_loss(loss))


def label(meta: dict[str, Any], arrays: dict[str, np.ndarray], thresholds: Any) -> dict[str, Any]:
    """Feed the whole series to a fresh DivergenceMonitor; its verdict and the run's final."""
    from autotune.probe.divergence import DivergenceMonitor

    monitor = DivergenceMonitor(
        meta["precision"],
        initial_loss=meta["initial_loss"],
        thresholds=thresholds,
        clipping=bool(meta["clipping"]),
    )
    monitor.update(
        arrays["loss"], arrays.get("grad_norm"), arrays.get("scale"), arrays.get("skipped")
    )
    return {
        **{k: meta[k] for k in ("workload", "config", "seed", "target", "knobs", "wall_s")},
        "probe_cause": meta["probe_cause"],
        "probe_step": meta["probe_step"],
        "cause": monitor.cause,
        "step": monitor.step,
        "initial_loss": meta["initial_loss"],
        "final_loss": final_of(arrays["loss"]),
    }


def judge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload: labelled diverged, false divergences (by study group and by workload) and
    the steps saved on the truly divergent ones."""
    best_study: dict[tuple[str, int, float], float] = {}
    best_all: dict[str, float] = {}
    for r in runs:
        key = study_of(r)
        best_study[key] = min(best_study.get(key, math.inf), r["final_loss"])
        best_all[r["workload"]] = min(best_all.get(r["workload"], math.inf), r["final_loss"])
    for r in runs:
        f, labelled = r["final_loss"], r["cause"] is not None
        r["false_study"] = labelled and f <= (1 + WITHIN) * best_study[study_of(r)]
        r["false_all"] = labelled and f <= (1 + WITHIN) * best_all[r["workload"]]
    table: dict[str, Any] = {}
    for name in [*dict.fromkeys(r["workload"] for r in runs), "all"]:
        rs = [r for r in runs if name in ("all", r["workload"])]
        div = [r for r in rs if r["cause"] is not None]
        true = [r for r in div if not r["false_study"]]
        saved = [(r["target"] - r["step"]) / r["target"] for r in true]
        # not labelled, yet at the target hardly better than the untrained model
        missed = [
            r
            for r in rs
            if r["cause"] is None
            and r["initial_loss"] is not None
            and not r["final_loss"] < MISSED * r["initial_loss"]
        ]
        table[name] = {
            "runs": len(rs),
            "diverged": len(div),
            "false_study": sum(r["false_study"] for r in div),
            "false_all": sum(r["false_all"] for r in div),
            "truly": len(true),
            "saved": float(np.mean(saved)) if saved else None,
            "missed": len(missed),
            "causes": dict(sorted(_count(r["cause"] for r in div).items())),
            "by_config": {
                cfg: f"{sum(r['cause'] is not None for r in rs if r['config'] == cfg)}/"
                f"{sum(r['config'] == cfg for r in rs)}"
                for cfg in CONFIGS
                if any(r["config"] == cfg for r in rs)
            },
        }
    return table


def study_of(run: dict[str, Any]) -> tuple[str, int, float]:
    """The runs one study would compare: one workload, seed and learning rate."""
    return run["workload"], run["seed"], float(run["knobs"]["lr"])


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def share(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f}%)" if n else "0/0"


def render(table: dict[str, Any]) -> str:
    header = (
        "workload",
        "runs",
        "labelled diverged",
        "false (study best)",
        "false (workload best)",
        "truly divergent",
        "steps saved (truly)",
        "missed",
        "diverged per config",
    )
    rows = []
    for name, t in table.items():
        saved = "n/a" if t["saved"] is None else f"{100 * t['saved']:.0f}%"
        per_cfg = ", ".join(f"{k} {v}" for k, v in t["by_config"].items()) if name != "all" else ""
        rows.append(
            (
                f"**{name}**" if name == "all" else name,
                t["runs"],
                t["diverged"],
                share(t["false_study"], t["diverged"]),
                share(t["false_all"], t["diverged"]),
                t["truly"],
                saved,
                t["missed"],
                per_cfg,
            )
        )
    return c.table(header, rows)


def parse_thresholds(items: Sequence[str]) -> Any:
    """`key=value` pairs into the monitor's thresholds (None: its defaults)."""
    if not items:
        return None
    from autotune.probe.divergence import DivergenceThresholds

    values: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--threshold {item!r}: expected key=value")
        values[key] = json.loads(value)
    return DivergenceThresholds(**values)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--from-cache", action="store_true", help="re-label the saved series only")
    ap.add_argument("--series-dir", type=Path, default=SERIES_DIR)
    ap.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--jobs", type=int, default=1, help="training processes (1 thread each)")
    ap.add_argument("--resume", action="store_true", help="keep the saved runs at this target")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--scale", type=float, default=1.0, help="targets x this (a smoke run: 0.1)")
    ap.add_argument("--threshold", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", default=str(RESULTS), help="the compact results ('' for none)")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    mach = c.machine()
    train_s = None
    if not args.from_cache:
        train_s = train(args.series_dir, args.workloads, args.seeds, args)
    thresholds = parse_thresholds(args.threshold)
    runs = []
    for name in args.workloads:
        for config in CONFIGS:
            for seed in args.seeds:
                path = series_path(args.series_dir, name, config, seed)
                if not path.exists():
                    c.say(f"missing: {path}")
                    continue
                runs.append(label(*load(path), thresholds))
    if not runs:
        raise SystemExit(f"no saved series under {args.series_dir}")
    table = judge(runs)
    mismatch = [r for r in runs if (r["cause"], r["step"]) != (r["probe_cause"], r["probe_step"])]
    print(render(table))
    print(
        f"\nOffline labels that differ from the probe's own (online, at training time): "
        f"{len(mismatch)} of {len(runs)} runs."
    )
    if train_s is not None:
        print(f"Training: {train_s:.0f} s on {args.jobs} process(es).")
    mach = c.finish_machine(mach, started)
    print(c.footer(mach))
    record = {
        "machine": mach,
        "training_s": train_s,
        "thresholds": args.threshold,
        "table": table,
        "runs": [
            {**r, "final_loss": r["final_loss"] if math.isfinite(r["final_loss"]) else None}
            for r in runs
        ],
    }
    if args.json:
        c.write_json(args.json, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
