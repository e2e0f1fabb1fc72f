"""Where a recipe does not transfer, does `autotune migrate --space` re-tune it to a cold study's
quality in at most 30% of the cold study's trials (issue 28)? "As good": not measurably worse
over the fresh seeds (the paired 95% interval of re-tuned - cold not entirely above 0).

The case (real, on a CPU): the new machine gives each probe less memory than the recipe's
micro-batch needs. The workload `workloads/long_signal.py` keeps about 1 MiB of activations
per sample, and the space searches `accum_steps` in {1, 2, 4} at batch 64 (micro-batch 64, 32,
16; `--accum`, `--batch` to change them). The source study runs unlimited; on the "new
machine" every probe process gets `--memory-mb` MiB of data memory over its imports
(`AUTOTUNE_PROBE_MEMORY_MB`, `RLIMIT_DATA`, glibc's mmap threshold fixed), so that micro-batch
64 fails in torch's CPU allocator there (classed `oom`) and 32 and 16 fit, the same way on every
run and however the probe process started (RESULTS.md, "The limit measures the tensors").
`--no-neighbours` drops the recipe's Pareto neighbours, so that a recipe that does not hold
goes to the re-tune.

1. The source study (unlimited), its pick exported with `--audit` (measured: the pick is at
   accum_steps 1, the fastest layout, which the source machine affords).
2. On the new machine, for each sampler seed: a cold study (the whole space, all its trials),
   and `autotune migrate recipe.yaml --space space.yaml` (its verdict, the reduced study
   warm-started from the recipe).
3. Quality, paired over the same fresh probe seeds at the decided length on the new machine:
   the cold pick's and the re-tuned recipe's final loss (and noise_per_drop).

    python benchmarks/migrate_retune.py [--seeds 3] [--memory-mb 84] [--size wide] [--accum 1,4]
        [--no-neighbours] [--json out.json]
        [--source-recipe recipe.yaml] [--objectives loss] [--source-accum 1] [--verify-seeds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pick_vs_defaults as pvd  # its `autotune` runs the CLI (this folder is on sys.path)
import yaml

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workloads" / "long_signal.py"
MEMORY_ENV = "AUTOTUNE_PROBE_MEMORY_MB"


def space(
    trials: int,
    sampler_seed: int,
    size: str = "wide",
    accum: tuple[int, ...] = (1, 2, 4),
    batch: int = 64,
    objectives: str = "throughput",
    verify_seeds: int = 2,
) -> dict[str, Any]:
    """The space. `objectives`: "throughput" (noise_per_drop against throughput, the shipped
    spaces' kind of trade-off) or "loss" (noise_per_drop against the final loss: a study that
    tunes for the training's quality alone, whose pick no machine's speed decides)."""
    second = (
        {"metric": "throughput", "direction": "maximize"}
        if objectives == "throughput"
        else {"metric": "final_loss", "direction": "minimize"}
    )
    return {
        "name": "long-signal",
        "workload": {"name": f"{WORKLOAD}:make", "size": size},
        "probe": {"steps": 40, "batch": batch, "seed": 0, "threads": 1},
        "objectives": [
            {"metric": "noise_per_drop", "direction": "minimize"},
            second,
        ],
        "constraints": [{"metric": "loss_drop", "op": ">=", "value": 0.05}],
        "budget": {"trials": trials, "target_steps": 120, "trial_timeout_s": 300},
        "sampler": {"name": "tpe", "seed": sampler_seed},
        "verify": {"top_k": 1, "seeds": verify_seeds},
        "knobs": {
            "lr": 0.1,
            "clip_norm": {"low": 0.05, "high": 5.0, "log": True},
            "warmup_steps": {"low": 0, "high": 30, "step": 5},
            "adam_eps": {"low": 1.0e-10, "high": 1.0e-5, "log": True},
            "accum_steps": {"choices": list(accum)} if len(accum) > 1 else accum[0],
        },
    }


def cli(args: list[str], cwd: Path, memory_mb: int | None, ok: tuple[int, ...] = (0,)) -> str:
    env_before = os.environ.get(MEMORY_ENV)
    if memory_mb:
        os.environ[MEMORY_ENV] = str(memory_mb)
    else:
        os.environ.pop(MEMORY_ENV, None)
    try:
        done = pvd.autotune(args, cwd, 7200)
    finally:
        if env_before is None:
            os.environ.pop(MEMORY_ENV, None)
        else:
            os.environ[MEMORY_ENV] = env_before
    if done.returncode not in ok:
        raise RuntimeError(f"autotune {args[0]}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done.stdout


def quality(recipe: Path, seeds: list[int], memory_mb: int, steps: int) -> dict[str, Any]:
    """The recipe on the new machine at `steps` over `seeds`: per-seed final loss
    and noise_per_drop (None where the run did not complete)."""
    from autotune import Recipe
    from autotune.recipe.verify import run_local

    r = Recipe.load(recipe)
    cfg = r.probe_config(steps=steps)
    os.environ[MEMORY_ENV] = str(memory_mb)
    try:
        runs = run_local(cfg, r.env, seeds, timeout_s=600, threads=1, say=lambda _t: None, label="")
    finally:
        os.environ.pop(MEMORY_ENV, None)
    out: dict[str, Any] = {"knobs": r.knobs, "outcomes": [x["outcome"] for x in runs]}
    for m in ("final_loss", "noise_per_drop"):
        out[m] = [((x.get("summary") or {}).get("metrics") or {}).get(m) for x in runs]
    return out


def paired(a: list[float | None], b: list[float | None]) -> dict[str, Any]:
    """b against a over the seeds where both completed, judged as the tool judges (`_common.
    judged_pair`: the per-seed log ratio b / a for these positive metrics): the difference's
    mean and 95% interval for reading, the ratio's, how many, and whether b is measurably
    worse (the whole interval above: both metrics here are minimised), the rule
    `compute_at_scale.py` judges "as good" by."""
    import _common as c

    j = c.judged_pair(list(b), list(a))
    d = j["diff"]
    return {
        "n": d.get("n"),
        "mean_diff": d.get("mean"),
        "low": d.get("low"),
        "high": d.get("high"),
        "ratio": j["ratio"],
        "measurably_worse": j["worse"],
    }


def one_seed(folder: Path, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """A cold study and a migration with a re-tune on the new machine, at sampler seed `seed`.
    When the recipe holds there as the same batch in more steps (migrate says `accum_steps A ->
    B`), its `recipe-migrated.yaml` is what is compared, unless a re-tune ran too (a recipe that
    is the defaults by a tie, given the space) and its pick replaced the recipe (`re-tuned`);
    when one of its Pareto neighbours holds (`use trial N`, and no re-tune runs), that trial,
    exported from the source study (`st`)."""
    here = folder / f"seed{seed}"
    here.mkdir()
    (here / "space.yaml").write_text(
        yaml.safe_dump(
            space(
                args.trials,
                seed,
                args.size,
                args.accum,
                args.batch,
                args.objectives,
                args.verify_seeds,
            ),
            sort_keys=False,
        )
    )
    (here / "recipe.yaml").write_text((folder / "recipe.yaml").read_text())
    t0 = time.perf_counter()
    cli(["study", "--space", "space.yaml", "--study-dir", "cold", "--quiet"], here, args.memory_mb)
    cold_wall = time.perf_counter() - t0
    cli(["export", "cold", "-o", "cold.yaml"], here, args.memory_mb)
    cold = json.loads(cli(["show", "cold", "--json"], here, args.memory_mb))
    t0 = time.perf_counter()
    mig_args = ["migrate", "recipe.yaml", "--space", "space.yaml", "--threads", "1"]
    mig_args += ["--seeds", "2", "--no-audit", "-o", "mig", "--json"]
    mig = json.loads(cli(mig_args, here, args.memory_mb, ok=(0, 1)))
    mig_wall = time.perf_counter() - t0
    fresh = [100 + i for i in range(args.quality_seeds)]
    row: dict[str, Any] = {
        "seed": seed,
        "cold_trials": args.trials,
        "cold_samples": (cold.get("compute") or {}).get("total"),
        "cold_wall_s": round(cold_wall, 1),
        "verdict": mig["verdict"],
        "why": mig["why"],
        "not_reproduced": mig["holds"].get("not_reproduced"),
        "differences": [r["field"] for r in mig["differences"]["rows"]],
        "migrate_wall_s": round(mig_wall, 1),
        "check_samples": mig["compute"]["samples"],
    }
    result = (mig.get("retune") or {}).get("result")
    if mig.get("migrated_recipe") and result is None:  # it holds as the same batch in more steps
        row.update(layout=mig["holds"]["layout"]["held"], retune_trials=0, trial_share=0.0)
        return with_quality(row, here, here / mig["migrated_recipe"], fresh, args)
    held = (mig["holds"].get("neighbours") or {}).get("held")
    study = source_study(folder)
    if held is not None and study is None:  # --source-recipe without its study: nothing to
        return {**row, "neighbour": held}  # export the neighbour from
    if held is not None:  # a Pareto neighbour of the recipe holds here: no re-tune ran
        cli(["export", str(study), "--pick", f"trial {held}", "-o",
             str(here / "neighbour.yaml")], folder, None)  # fmt: skip
        row.update(neighbour=held, retune_trials=0, trial_share=0.0)
        return with_quality(row, here, here / "neighbour.yaml", fresh, args)
    if result is None:
        return row
    row.update(
        retune_trials=result["trials"],
        retune_searched=result["searched"],
        retune_overrides=result["overrides"],
        retune_samples=result["samples"],
        trial_share=result["trials"] / args.trials,
    )
    if result["recipe"] is None:  # the re-tune found nothing that holds here
        row["retune_failed"] = result.get("failed")
        return row
    if not mig["verdict"].startswith("re-tuned") and mig.get("migrated_recipe"):
        # a recipe that is the defaults by a tie, re-tuned (`tie.retune_plan`) and kept: the
        # verdict's recipe is the one at the layout that held
        row.update(layout=mig["holds"]["layout"]["held"], retune_kept_defaults=True)
        return with_quality(row, here, here / mig["migrated_recipe"], fresh, args)
    return with_quality(row, here, here / result["recipe"], fresh, args)


def source_study(folder: Path) -> Path | None:
    """The source study's folder: this run's, or (`--source-recipe`) the one the recipe records
    (`source.study_dir`) if it is still there; None otherwise."""
    if (folder / "st").exists():
        return folder / "st"
    recorded = (yaml.safe_load((folder / "recipe.yaml").read_text()).get("source") or {}).get(
        "study_dir"
    )
    return Path(recorded) if recorded and Path(recorded).is_dir() else None


def with_quality(
    row: dict[str, Any], here: Path, migrated: Path, fresh: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    """`row` with the cold pick's and the migrated recipe's (the re-tuned one, or the Pareto
    neighbour that held) quality over the fresh seeds, paired."""
    from autotune import Recipe

    # Both at the cold pick's length (the target): a neighbour exported from the source study's
    # screen (`--pick 'trial N'` short of the decided length) would otherwise run at its 40 steps.
    steps = int(Recipe.load(here / "cold.yaml").probe.get("steps") or 120)
    row["cold_quality"] = quality(here / "cold.yaml", fresh, args.memory_mb, steps)
    row["retune_quality"] = quality(migrated, fresh, args.memory_mb, steps)
    for m in ("final_loss", "noise_per_drop"):
        row[f"{m}_retune_minus_cold"] = paired(row["cold_quality"][m], row["retune_quality"][m])
    return row


def _drop_neighbours(path: Path) -> None:
    """The recipe at `path` without `source.neighbours`."""
    data = yaml.safe_load(path.read_text())
    (data.get("source") or {}).pop("neighbours", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="sampler seeds (cold study, re-tune)")
    ap.add_argument("--trials", type=int, default=10, help="the cold study's trials")
    # The probe's own room over its imports (AUTOTUNE_PROBE_MEMORY_MB counts from them, with
    # glibc's mmap threshold fixed): long_signal wide at batch 64 needs +49-56 MiB at
    # micro-batch 16, +65-72 at 32, +97-104 at 64, at 10 and 120 steps, fresh or forked
    # (`memory_limit_need.py`, RESULTS.md). 84 sits 12 MiB over 32's and 13 under 64's.
    ap.add_argument("--memory-mb", type=int, default=84, help="the new machine's probe memory")
    ap.add_argument("--size", default="wide", help="long_signal's size (tiny: the first runs)")
    ap.add_argument(
        "--accum",
        type=lambda t: tuple(int(x) for x in t.split(",")),
        default=(1, 2, 4),
        help="the accum_steps choices (comma-separated)",
    )
    ap.add_argument("--batch", type=int, default=64, help="the probe's batch")
    ap.add_argument(
        "--source-accum",
        type=lambda t: tuple(int(x) for x in t.split(",")),
        help="the source study's accum_steps choices (default: --accum's); e.g. 1: the source "
        "machine had the memory, so its study never accumulated",
    )
    ap.add_argument(
        "--objectives",
        choices=("throughput", "loss"),
        default="throughput",
        help="the second objective beside noise_per_drop: throughput (the machine's speed is "
        "part of the pick) or final_loss (it is not)",
    )
    ap.add_argument(
        "--verify-seeds",
        type=int,
        default=2,
        help="the space's verification seeds, source and cold studies alike (the runs recorded "
        "before this option used 2; a space that says nothing gets 3)",
    )
    ap.add_argument("--quality-seeds", type=int, default=5, help="fresh probe seeds per pick")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--source-recipe", type=Path, help="skip the source study: its export")
    ap.add_argument(
        "--no-neighbours",
        action="store_true",
        help="drop the recipe's Pareto neighbours (as exported before autotune recorded them): "
        "a recipe that does not hold goes to the re-tune",
    )
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="migrate-retune-") as tmp:
        folder = Path(tmp)
        (folder / "space.yaml").write_text(
            yaml.safe_dump(
                space(
                    args.trials,
                    0,
                    args.size,
                    args.source_accum or args.accum,
                    args.batch,
                    args.objectives,
                    args.verify_seeds,
                ),
                sort_keys=False,
            )
        )
        t0 = time.perf_counter()
        if args.source_recipe:  # an export of this script's source study, run before (without
            # the study, a neighbour that holds cannot be exported: its row stops at the verdict)
            (folder / "recipe.yaml").write_text(args.source_recipe.read_text())
        else:
            cli(["study", "--space", "space.yaml", "--study-dir", "st", "--quiet"], folder, None)
            cli(["export", "st", "-o", "recipe.yaml"], folder, None)
        source_wall = time.perf_counter() - t0
        if args.no_neighbours:
            _drop_neighbours(folder / "recipe.yaml")
        from autotune import Recipe

        source = Recipe.load(folder / "recipe.yaml")
        knobs, neighbours = source.knobs, (source.source or {}).get("neighbours")
        print(json.dumps({"source_pick": knobs, "neighbours": neighbours, "wall_s": source_wall}),
              file=sys.stderr)  # fmt: skip
        for seed in range(args.seeds):
            rows.append(one_seed(folder, seed, args))
            print(json.dumps(rows[-1], default=str), file=sys.stderr, flush=True)
            if args.json:
                out = {"source_pick": knobs, "neighbours": neighbours, "rows": rows}
                args.json.write_text(json.dumps(out, indent=1, default=str))
    print(f"source pick: {knobs}; new machine: {args.memory_mb} MiB per probe")
    print(
        "| seed | verdict | re-tune trials / cold | final_loss re-tuned / cold | noise_per_drop |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        cells = []
        for m in ("final_loss", "noise_per_drop"):
            p = r.get(f"{m}_retune_minus_cold") or {}
            q = p.get("ratio") or {}
            cells.append(
                f"x{q.get('mean', float('nan')):.2f} [x{q.get('low', float('nan')):.2f}, "
                f"x{q.get('high', float('nan')):.2f}] (n {p.get('n')}; measurably worse: "
                f"{p.get('measurably_worse')})"
            )
        print(
            f"| {r['seed']} | {r['verdict']} | {r.get('retune_trials')} / {r['cold_trials']} | "
            f"{cells[0]} | {cells[1]} |"
        )


if __name__ == "__main__":
    main()
