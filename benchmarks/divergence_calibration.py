"""Divergence calibration: choose the divergence monitor's persistence k, recovery window W and
recovery factor F from runs carried to the end without stopping.

Runs: the built-in workloads `mlp`, `tiny_gpt`, `resnet` (tiny) and the heavy-tailed Student-t
regression of `benchmarks/workloads/student_t.py`, each at its default_lr, its unstable_lr and
3x and 10x that, with clip_norm 0 (PyTorch's default) or 1, in fp32 and fp16, over seeds, all
with `probe.divergence.stop_early: false` (every run goes to the end). PyTorch's other defaults
(no warm-up, constant rate). Each run's step series (loss, grad_norm, scale, skipped) is kept.
Long-run series carried to their target length without stopping (`results/false_divergence_series/`
and `results/divergence_series_extra/`, committed: mlp, tiny_gpt, resnet, a heavy-tailed
regression and a GRU language model, 200-1000 steps) are added.

Truth (a run's label, from its whole series): *diverged* when its loss went non-finite, or its
final loss (median of the last 10% of steps) is above 1.5x the best final loss of its group
(same workload, precision and seed), or it never learned (final >= 0.9x its initial reference);
*recovered* otherwise.

Then every (k, W, F) of a grid is replayed on the recorded series with the real
`DivergenceMonitor` (the same code the probe runs): a recovered run it flags is a false
divergence, a diverged run it flags is caught (and the steps after its verdict are what an
early stop saves). The chosen parameters: no false divergence, then the most caught, then the
earliest verdicts, then the largest k, W and F (the most tolerant among equals).

    # the measurement of RESULTS.md (about 20 min on one busy CPU thread):
    python benchmarks/divergence_calibration.py --workloads mlp,student_t --steps 400 \
        --seeds 2 --series-out light.json.gz
    python benchmarks/divergence_calibration.py --workloads tiny_gpt,resnet --steps 300 \
        --seeds 1 --series-out heavy.json.gz
    python benchmarks/divergence_calibration.py --replay light.json.gz heavy.json.gz --json cal.json
    python benchmarks/divergence_calibration.py --quick         # smoke run
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from autotune.probe import ProbeConfig, run_probe
from autotune.probe.divergence import DivergenceMonitor, DivergenceThresholds
from autotune.probe.workload import resolve

HERE = Path(__file__).resolve().parent
STUDENT_T = f"{HERE / 'workloads' / 'student_t.py'}:make"
WORKLOADS = ("mlp", "tiny_gpt", "resnet", STUDENT_T)
SERIES_DIRS = (
    HERE / "results" / "false_divergence_series",
    HERE / "results" / "divergence_series_extra",
)
GRID_K = (1, 5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300)
GRID_W = (30, 50, 100, 150, 200, 300)
GRID_F = (2.0, 3.0, 5.0)
GRID_R = (0.0, 1.5, 2.0, 3.0)  # recovery_descent; 0: a loss coming back is not deferred
SERIES = ("loss", "grad_norm", "scale", "skipped")
WORSE = 1.5  # final loss above this multiple of its group's best: diverged
NEVER_LEARNED = 0.9  # final loss at least this multiple of the initial reference: diverged


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def short(workload: str) -> str:
    return "student_t" if workload == STUDENT_T else workload


def run_all(
    workloads: list[str], steps: int, seeds: list[int], precisions: list[str], out: Path
) -> list[dict[str, Any]]:
    """Run every configuration to the end; the series are written to `out` after each run."""
    import torch

    torch.set_num_threads(1)
    runs = []
    for wl in workloads:
        w = resolve(wl, "tiny")
        lrs = (w.default_lr, w.unstable_lr, 3 * w.unstable_lr, 10 * w.unstable_lr)
        for prec, seed, lr, clip in itertools.product(precisions, seeds, lrs, (0.0, 1.0)):
            cfg = ProbeConfig(
                workload=wl,
                steps=steps,
                micro_batch=16,
                precision=prec,
                seed=seed,
                threads=1,
                divergence={"stop_early": False},
                knobs={"lr": lr, "clip_norm": clip},
            )
            t0 = time.perf_counter()
            try:
                r = run_probe(cfg)
            except Exception as e:  # a run that cannot run is reported, not fatal
                say(f"  {short(wl)} {prec} seed {seed} lr {lr:g} clip {clip:g}: failed: {e}")
                continue
            s = r["series"]
            runs.append(
                {
                    "workload": short(wl),
                    "precision": prec,
                    "seed": seed,
                    "lr": lr,
                    "clip": clip,
                    "initial_loss": r["initial_reference"]["loss"]
                    if isinstance(r.get("initial_reference"), dict)
                    else None,
                    "steps_run": r["steps_run"],
                    **{k: [float(v) for v in s[k]] for k in SERIES},
                }
            )
            write_series(out, runs)
            say(
                f"  {short(wl):<9} {prec} seed {seed} lr {lr:<7g} clip {clip:g}: "
                f"{r['status']:<8} spikes {r['divergence_spike_count']:>3} "
                f"({time.perf_counter() - t0:.1f} s)"
            )
    return runs


def write_series(path: Path, runs: list[dict[str, Any]]) -> None:
    """The runs with their series, as JSON (gzip-compressed when the name ends in .gz)."""
    text = json.dumps(runs)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)


def read_series(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    runs: list[dict[str, Any]] = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    return runs


def external_runs() -> list[dict[str, Any]]:
    """Series another measurement carried to its target without stopping (npz: `loss`,
    `grad_norm`, `scale`, `skipped` and a JSON `meta` with workload, config, seed, precision,
    initial_loss, clipping, knobs), labelled here by the same rule as ours."""
    out = []
    paths = [p for d in SERIES_DIRS if d.is_dir() for p in sorted(d.glob("*.npz"))]
    for path in paths:
        try:
            z = np.load(path, allow_pickle=False)
            meta = json.loads(str(z["meta"]))
            loss = np.asarray(z["loss"], dtype=float)
            series = {k: np.asarray(z[k], dtype=float).tolist() for k in SERIES[1:]}
        except Exception as e:  # a file we cannot read is skipped, and said
            say(f"  skipped {path}: {e}")
            continue
        out.append(
            {
                "workload": f"ext:{meta['workload']}",
                "config": meta.get("config"),
                "precision": str(meta.get("precision", "fp32")),
                "seed": int(meta.get("seed", 0)),
                "lr": float((meta.get("knobs") or {}).get("lr", math.nan)),
                "clip": float((meta.get("knobs") or {}).get("clip_norm", 0.0)),
                "initial_loss": float(meta["initial_loss"]),
                "steps_run": len(loss),
                "loss": loss.tolist(),
                **series,
            }
        )
    # the same configuration may be in both folders: keep one
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in out:
        seen.setdefault((r["workload"], r["config"], r["seed"], r["precision"]), r)
    return list(seen.values())


def final_of(loss: np.ndarray) -> float:
    n = max(1, len(loss) // 10)
    tail = loss[-n:]
    return float(np.median(tail)) if np.isfinite(tail).all() else math.inf


def label(runs: list[dict[str, Any]]) -> None:
    """Each run's truth: diverged or recovered (see the module docstring)."""
    best: dict[tuple[Any, ...], float] = {}
    for r in runs:
        loss = np.asarray(r["loss"])
        r["final"] = final_of(loss)
        r["nonfinite"] = not bool(np.isfinite(loss).all())
        key = (r["workload"], r["precision"], r["seed"])
        best[key] = min(best.get(key, math.inf), r["final"])
    for r in runs:
        l0 = r["initial_loss"]
        worse = r["final"] > WORSE * best[(r["workload"], r["precision"], r["seed"])]
        never = l0 is not None and r["final"] >= NEVER_LEARNED * l0
        r["truth"] = bool(r["nonfinite"] or worse or never)


def thresholds(k: int, w: int, f: float, d: float) -> DivergenceThresholds:
    """The monitor's thresholds at one grid point (the others at their defaults)."""
    return DivergenceThresholds(
        persist_steps=k, recovery_window=w, recovery_factor=f, recovery_descent=d
    )


def verdict(
    r: dict[str, Any], thr: DivergenceThresholds, at_end: bool = False, carried: bool = False
) -> tuple[str | None, int | None]:
    """The monitor's verdict on a recorded run; `at_end`: also the verdict at its end
    (`DivergenceMonitor.at_end`: the run ran to the end of its schedule); `carried`: and a
    trend verdict withdrawn when the loss came back by then (`recovered_at_end`, as a probe
    with `stop_early: false` does; the recorded series has no held-out loss to check)."""
    mon = DivergenceMonitor(
        r["precision"], initial_loss=r["initial_loss"], thresholds=thr, clipping=r["clip"] > 0
    )
    mon.update(r["loss"], r["grad_norm"], r["scale"], r["skipped"])
    if at_end and mon.cause is None:
        mon.at_end()
    elif carried:
        mon.recovered_at_end()
    return mon.cause, mon.step


def judge(
    runs: list[dict[str, Any]],
    thr: DivergenceThresholds,
    at_end: bool = False,
    carried: bool = False,
) -> dict[str, Any]:
    fp, caught, saved, total, missed = [], 0, 0, 0, 0
    for r in runs:
        cause, step = verdict(r, thr, at_end, carried)
        if r["truth"]:
            total += r["steps_run"]
            if cause is not None and step is not None:
                caught += 1
                saved += r["steps_run"] - (step + 1)
            else:
                missed += 1
        elif cause is not None:
            fp.append(
                f"{r['workload']} {r['precision']} s{r['seed']} lr {r['lr']:g} "
                f"clip {r['clip']:g}: {cause}@{step}"
            )
    return {
        "false": len(fp),
        "false_runs": fp,
        "caught": caught,
        "missed": missed,
        "saved_share": saved / total if total else 0.0,
    }


def robust(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The grid points with no false divergence whose less tolerant neighbours have none
    either: k - 1 and k - 2 (same W, F), the next smaller W and the next smaller F (same k);
    a point without them (the grid's edge) is not one. A margin: a point next to the false
    divergences is one unlucky run from them."""
    at = {(r["k"], r["W"], r["F"], r["R"]): r for r in rows}

    def prev(grid: tuple[Any, ...], v: Any, n: int = 1) -> Any:
        i = grid.index(v) - n
        return grid[i] if i >= 0 else None

    out = []
    for r in rows:
        k, w, f, d = r["k"], r["W"], r["F"], r["R"]
        near = [(prev(GRID_K, k), w, f, d), (prev(GRID_K, k, 2), w, f, d)]
        near += [(k, prev(GRID_W, w), f, d), (k, w, prev(GRID_F, f), d), (k, w, f, prev(GRID_R, d))]
        if r["false"] == 0 and all(n in at and at[n]["false"] == 0 for n in near):
            out.append(r)
    return out


def calibrate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    label(runs)
    rows = []
    for k, w, f, d in itertools.product(GRID_K, GRID_W, GRID_F, GRID_R):
        thr = thresholds(k, w, f, d)
        rows.append({"k": k, "W": w, "F": f, "R": d, **judge(runs, thr)})
    # the old rule: one spike was a verdict (k = 1); recovery never judged (W beyond any run)
    old = judge(runs, DivergenceThresholds(persist_steps=1, recovery_window=10**6))
    chosen = min(
        robust(rows) or rows,
        key=lambda r: (
            r["false"],
            -r["caught"],
            -r["saved_share"],
            -r["k"],
            -r["W"],
            -r["F"],
            -r["R"],
        ),
    )
    diverged = [r for r in runs if r["truth"]]
    return {
        "runs": len(runs),
        "truly_diverged": len(diverged),
        "recovered": len(runs) - len(diverged),
        "one_step_rule": old,
        "chosen": chosen,
        "zero_false": [r for r in rows if r["false"] == 0],
        "robust": robust(rows),
        "grid": rows,
        "per_run": [
            {k: r[k] for k in ("workload", "precision", "seed", "lr", "clip", "final", "truth")}
            | {"old": verdict(r, DivergenceThresholds(persist_steps=1, recovery_window=10**6))}
            for r in runs
        ],
    }


def by_workload(runs: list[dict[str, Any]], chosen: dict[str, Any]) -> dict[str, str]:
    old = DivergenceThresholds(persist_steps=1, recovery_window=10**6)
    new = thresholds(chosen["k"], chosen["W"], chosen["F"], chosen["R"])
    out = {}
    for wl in sorted({r["workload"] for r in runs}):
        rs = [r for r in runs if r["workload"] == wl]
        cells = [f"{len(rs):>3} runs, {sum(r['truth'] for r in rs):>3} diverged"]
        for name, thr in (("one-step", old), ("chosen", new)):
            flagged = [r for r in rs if verdict(r, thr)[0] is not None]
            false = sum(not r["truth"] for r in flagged)
            cells.append(f"{name} {false:>2} / {len(flagged) - false:>2}")
        out[wl] = "; ".join(cells)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--quick", action="store_true", help="60 steps, one seed, fp32")
    ap.add_argument("--series-out", default=str(HERE / "results" / "divergence_series.json.gz"))
    ap.add_argument("--workloads", default="mlp,tiny_gpt,resnet,student_t")
    ap.add_argument(
        "--replay", metavar="FILE", nargs="+", help="judge the series saved in FILEs, run none"
    )
    ap.add_argument("--json", metavar="FILE", help="write the calibration as JSON")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.precisions = 60, 1, "fp32"
    if args.replay:
        runs = [r for f in args.replay for r in read_series(Path(f))]
    else:
        names = [STUDENT_T if w == "student_t" else w for w in args.workloads.split(",")]
        Path(args.series_out).parent.mkdir(parents=True, exist_ok=True)
        seeds, precisions = list(range(args.seeds)), args.precisions.split(",")
        runs = run_all(names, args.steps, seeds, precisions, Path(args.series_out))
    runs += external_runs()
    out = calibrate(runs)
    c, o = out["chosen"], out["one_step_rule"]
    print(f"runs {out['runs']}: diverged {out['truly_diverged']}, recovered {out['recovered']}")
    print(
        f"one-step rule (k=1): false divergences {o['false']}, caught {o['caught']}, "
        f"missed {o['missed']}, steps saved {o['saved_share']:.0%}"
    )
    print(
        f"chosen k={c['k']} W={c['W']} F={c['F']} R={c['R']}: false divergences {c['false']}, "
        f"caught {c['caught']}, missed {c['missed']}, steps saved {c['saved_share']:.0%}"
    )
    end = judge(runs, thresholds(c["k"], c["W"], c["F"], c["R"]), at_end=True)
    out["chosen_at_end"] = end
    print(
        f"chosen + the verdict at the run's end (no_recovery of a spike not recovered from when "
        f"the run ends): false divergences {end['false']}, caught {end['caught']}, missed "
        f"{end['missed']}"
    )
    for line in end["false_runs"]:
        print(f"  at the end, false divergence: {line}")
    carried = {
        name: judge(runs, thr, at_end=True, carried=True)
        for name, thr in (
            ("chosen", thresholds(c["k"], c["W"], c["F"], c["R"])),
            ("one_step_rule", thresholds(1, c["W"], c["F"], c["R"])),
        )
    }
    out["carried_to_the_end"] = carried
    for name, row in carried.items():
        print(
            f"{name.replace('_', ' ')}, every run carried to its end (stop_early: false: a trend "
            f"verdict withdrawn when the loss came back): false divergences {row['false']}, "
            f"caught {row['caught']}, missed {row['missed']}"
        )
    print("no false divergence, nor at the less tolerant neighbours (the best 12):")
    for r in sorted(out["robust"], key=lambda r: (-r["caught"], -r["saved_share"]))[:12]:
        print(
            f"  k={r['k']:<3} W={r['W']:<4} F={r['F']:<4} R={r['R']:<4} caught {r['caught']} "
            f"saved {r['saved_share']:.0%}"
        )
    print("per workload (runs, truly diverged; one-step rule and chosen: false / caught):")
    for wl, row in by_workload(runs, c).items():
        print(f"  {wl:<16} {row}")
    for line in o["false_runs"]:
        print(f"  one-step false divergence: {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
