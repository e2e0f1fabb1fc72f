"""What `autotune migrate` costs against the study it checks (issue 28: at most 10%).

A real study (default: the quick start, `gradclip`, as shipped) in a temporary folder here, its
pick exported with `--audit`, then `autotune migrate` run twice from a second Python
environment (`AUTOTUNE_SECOND_ENV`: another torch, as `.ci/run` builds it; without it, this
one) with another thread count: as a user runs it (the cheap check first: does the recorded run
reproduce) and with `--full` (the recipe and the baseline over the seeds, what every migration
cost before). Per run: the verdict, which path decided it, the samples it trained on and their
share of the study's, and its wall time.

`--here-env KEY=VALUE` sets a variable for migrate's side only: the numerics of another CPU on
demand, e.g. `ATEN_CPU_CAPABILITY=default` (PyTorch's kernels without AVX2/AVX-512, as on an
older CPU: its reductions and elementwise functions round differently, so a training run drifts
from the recorded one). Then the sceptic's question is whether the cheap verdict (one probe,
judged against the recorded seeds' spread) says what `--full` says.

    AUTOTUNE_SECOND_ENV=/path/to/venv python benchmarks/migrate_cost.py [--space gradclip]
        [--seeds 3] [--threads-here same|other] [--here-env KEY=VALUE ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pick_vs_defaults as pvd  # its `autotune` runs the CLI (this folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]


def other_python() -> str:
    where = os.environ.get("AUTOTUNE_SECOND_ENV")
    if not where:
        return sys.executable
    path = Path(where)
    return str(path / "bin" / "python") if path.is_dir() else str(path)


def here(args: list[str], cwd: Path) -> str:
    """An `autotune` command in this environment; its stdout (it must succeed)."""
    done = pvd.autotune(args, cwd, 7200)
    if done.returncode != 0:
        raise RuntimeError(f"autotune {args[0]}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done.stdout


def migrate_there(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    """`autotune migrate` in the second environment; exit 1 is its verdict "does not
    transfer", not a failure."""
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=7200)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"migrate: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="gradclip")
    ap.add_argument("--seeds", type=int, default=3, help="migrate's seeds per side")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="the study's --set"
    )
    ap.add_argument(
        "--threads-here",
        choices=("other", "same"),
        default="other",
        help="migrate at another thread count than the study's (numerics move) or the same",
    )
    ap.add_argument(
        "--here-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable for migrate's side only (e.g. ATEN_CPU_CAPABILITY=default)",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    bad = [item for item in args.here_env if "=" not in item or not item.split("=", 1)[0]]
    if bad:
        ap.error(f"--here-env takes KEY=VALUE, not {bad[0]!r}")
    extra = dict(item.split("=", 1) for item in args.here_env)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="migrate-cost-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        sets = [x for item in args.set for x in ("--set", item)]
        here(["study", "--space", args.space, "--study-dir", "st", *sets], folder)
        study_wall = time.perf_counter() - t0
        here(["export", "st", "--audit", "-o", "recipe.yaml"], folder)
        shown = json.loads(here(["show", "st", "--json"], folder))
        study_samples = (shown.get("compute") or {}).get("total")
        from autotune import Recipe

        recorded = Recipe.load(folder / "recipe.yaml").fingerprint or {}
        had = int(recorded.get("env", {}).get("torch_threads") or 1)
        threads = had if args.threads_here == "same" else (2 if had == 1 else 1)
        env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
        for mode in ("as a user runs it", "--full"):
            cmd = [other_python(), "-m", "autotune", "migrate", "recipe.yaml", "--json"]
            cmd += ["--seeds", str(args.seeds), "--threads", str(threads), "-o", f"out{len(rows)}"]
            cmd += ["--full"] if mode == "--full" else []
            t0 = time.perf_counter()
            result = json.loads(migrate_there(cmd, folder, env))
            wall = time.perf_counter() - t0
            holds = result["holds"]
            rows.append(
                {
                    "mode": mode,
                    "verdict": result["verdict"],
                    "path": holds.get("path") or "paired over seeds",
                    "not_reproduced": holds.get("not_reproduced"),
                    "max_rel_diff": (holds.get("curve") or {}).get("max_rel_diff"),
                    "spread": holds.get("spread"),
                    "paired": (holds.get("vs_baseline") or {}).get("verdict"),
                    "differences": [
                        f"{d['field']}: {d['recorded']} -> {d['here']}"
                        for d in result["differences"].get("rows", [])
                    ],
                    "samples": result["compute"]["samples"],
                    "probes": result["compute"]["probes"],
                    "share": result["compute"]["samples"] / study_samples,
                    "wall_s": round(wall, 1),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(
        f"study {args.space} {args.set}: {study_samples:,} samples, {study_wall:.0f} s; "
        f"migrate at {threads} thread(s)" + (f", with {args.here_env}" if extra else "")
    )
    print("| migrate | verdict | decided by | probes | samples | share of the study | wall s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['verdict']} | {r['path']} | {r['probes']} | {r['samples']:,} | "
            f"{r['share']:.1%} | {r['wall_s']} |"
        )
    if args.json:
        meta = {
            "study_samples": study_samples,
            "study_wall_s": study_wall,
            "space": args.space,
            "sets": args.set,
            "threads_here": threads,
            "here_env": extra,
            "load": os.getloadavg(),
        }
        args.json.write_text(json.dumps({"rows": rows, **meta}, indent=1))


if __name__ == "__main__":
    main()
