"""Issue 26: does searching the clipping policy (`search_spaces/clip_policy.yaml`: none, norm, agc,
zclip, autoclip, with warm-up) pick at least as well as searching a fixed global norm only (the
same space with `knobs.clip_policy=norm`), at an equal trial budget, at the length you train,
on seeds neither study saw?

For each case (a workload at a learning rate where it is fragile; the overrides of
`pick_vs_defaults.py`), in a fresh folder, exactly as a user would:

1. `autotune study --space clip_policy.yaml --set ...` twice: the policy searched, and the
   policy fixed to norm (clip_norm searched alone), with the same trials, seed and target;
2. `autotune export NAME -o recipe.yaml` of each pick;
3. both recipes run in this process (`run_probe`, one thread) at the recipe's length (the
   target) with no early stopping, over five fresh seeds (101-105): per seed the final loss
   (mean of the last 10% of the steps) and whether the run diverged; paired differences.

    python benchmarks/clip_policy_vs_norm.py --cases mlp,heavy_tail --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)
import pick_vs_defaults as pvd

from autotune.probe import run_probe
from autotune.recipe import Recipe

HERE = Path(__file__).resolve().parent
SPACE = str(HERE.parent / "search_spaces" / "clip_policy.yaml")
SEEDS = (101, 102, 103, 104, 105)
CASES = {name: pvd.CASES[name][2] for name in ("mlp", "tiny_gpt", "resnet", "heavy_tail", "gru_lm")}
ARMS = {"policy": (), "norm": ("knobs.clip_policy=norm",)}


def pick(overrides: tuple[str, ...], cwd: Path, timeout: float) -> dict[str, Any]:
    """One study of the clip_policy space with `overrides`, and its exported pick."""
    sets = [a for o in overrides for a in ("--set", o)]
    t0 = time.perf_counter()
    ran = pvd.autotune(["study", "--space", SPACE, *sets, "--quiet"], cwd, timeout)
    out: dict[str, Any] = {"study_rc": ran.returncode, "study_s": round(time.perf_counter() - t0)}
    if ran.returncode != 0:
        out["error"] = ran.stderr[-1500:]
        return out
    exported = pvd.autotune(["export", "clip_policy", "-o", "recipe.yaml"], cwd, 120)
    out["export_rc"] = exported.returncode
    if exported.returncode != 0:
        out["error"] = exported.stderr[-800:]
        return out
    recipe = Recipe.load(cwd / "recipe.yaml")
    out["knobs"] = recipe.knobs
    runs = []
    for seed in SEEDS:
        cfg = recipe.probe_config(steps=recipe.schedule_steps)
        cfg = dataclasses.replace(
            cfg, seed=seed, threads=1, divergence={**cfg.divergence, "stop_early": False}
        )
        r = run_probe(cfg)
        runs.append(
            {"seed": seed, "status": r["status"], "final_loss": r["metrics"].get("final_loss")}
        )
    out["runs"] = runs
    return out


def run_case(name: str, overrides: tuple[str, ...], timeout: float) -> dict[str, Any]:
    out: dict[str, Any] = {"case": name, "overrides": list(overrides)}
    for arm, extra in ARMS.items():
        with pvd.folder(f"{name}-{arm}", None) as tmp:
            c.say(f"{name}: {arm} study ...")
            out[arm] = pick((*overrides, *extra), Path(tmp), timeout)
    return out


def row(r: dict[str, Any]) -> tuple[Any, ...]:
    from autotune.knobs import clip_text

    p, n = r.get("policy") or {}, r.get("norm") or {}
    if "runs" not in p or "runs" not in n:
        return (r["case"], "failed", "", "", "", "", "")
    fp = [x["final_loss"] for x in p["runs"]]
    fn = [x["final_loss"] for x in n["runs"]]
    diffs = [a - b for a, b in zip(fp, fn, strict=True) if a is not None and b is not None]
    div_p = sum(x["status"] == "diverged" for x in p["runs"])
    div_n = sum(x["status"] == "diverged" for x in n["runs"])
    better = sum(d < 0 for d in diffs)
    return (
        r["case"],
        clip_text(p["knobs"]) + f", warm-up {p['knobs']['warmup_steps']}",
        clip_text(n["knobs"]) + f", warm-up {n['knobs']['warmup_steps']}",
        f"{c.fmt(statistics.median(fp))} / {c.fmt(statistics.median(fn))}",
        f"{c.fmt(statistics.mean(diffs)) if diffs else '—'} ({better}/{len(diffs)} lower)",
        f"{div_p} / {div_n}",
        f"{p['study_s']} s / {n['study_s']} s",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, from the above")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per command")
    ap.add_argument("--json", default=str(HERE / "results" / "clip_policy_vs_norm.json"))
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
    c.one_thread()
    m, started = c.machine(), time.perf_counter()
    results = [run_case(name, CASES[name], args.timeout) for name in names]
    header = (
        "case", "policy pick", "norm-only pick", "final loss, median (policy / norm)",
        "paired mean diff (seeds lower)", "diverged (policy / norm)", "study time",
    )  # fmt: skip
    c.close_report(args.json, m, started, results, c.table(header, [row(r) for r in results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
