"""Does the study's pick match or beat PyTorch's defaults at the length you train, on workloads
other than the quick start's, and does that hold on seeds the study never saw?

For each case (a built-in or benchmark workload at a learning rate where it is fragile,
searched with the shipped `gradclip.yaml` space's knobs; and the three examples' training
scripts with their own spaces), in a fresh folder, with the embedded defaults (local Ray,
SQLite, files), exactly as a user would:

1. `autotune study --space SPACE --set ...` (the case's overrides; `--quiet`);
2. `autotune show NAME --json`: the study's own paired verdict of the pick against the
   baseline at the decided length over its verification seeds (`vs_baseline`), and whether it
   preferred the defaults (`pick.defaults_preferred`);
3. `autotune export NAME -o recipe.yaml` (with no `--pick`);
4. the sceptical re-check: `autotune verify recipe.yaml --first-seed 101 --seeds 5 --json`:
   the recipe and the defaults on the same five fresh seeds 101-105 (none the study used) at
   the recipe's length, paired.

A case passes issue 23's goal when the study says `better` (and the re-check does not say
`worse`), or says "no detectable difference" / prefers the defaults and exported them as such.

    python benchmarks/pick_vs_defaults.py                       # every case (~40 min, 2 cores)
    python benchmarks/pick_vs_defaults.py --cases mlp,gru_lm --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)
import yaml

HERE = Path(__file__).resolve().parent
SHORT = ("probe.steps=100", "probe.batch=16", "budget.target_steps=500", "budget.trials=8")
EXAMPLES = HERE.parent / "examples"
CASES: dict[str, tuple[str, str, tuple[str, ...]]] = {  # name: (space, study name, --set ...)
    # the quick start as shipped: lr 0.3, batch 64, 150 -> 750 steps, 12 trials
    "mlp": ("gradclip", "gradclip", ()),
    "tiny_gpt": ("gradclip", "gradclip", ("workload.name=tiny_gpt", "knobs.lr=0.5", *SHORT)),
    "resnet": ("gradclip", "gradclip", ("workload.name=resnet", "knobs.lr=0.1", *SHORT)),
    "heavy_tail": (
        "gradclip",
        "gradclip",
        (f"workload.name={HERE / 'workloads' / 'heavy_tail.py'}:make", "knobs.lr=0.3"),
    ),
    "gru_lm": (
        "gradclip",
        "gradclip",
        (f"workload.name={HERE / 'workloads' / 'gru_lm.py'}:make", "knobs.lr=0.6", *SHORT),
    ),
    # the examples as shipped (training scripts through autotune.trial(); lr 0.003, 100 -> 300)
    **{
        ex: (str(EXAMPLES / ex / "space.yaml"), ex, ())
        for ex in ("plain_loop", "lightning", "hf_trainer")
    },
}
FRESH_SEED = 101  # the re-check's first seed (`verify --first-seed`): seeds 101-105


def autotune(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "autotune", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def interval(x: Any) -> str:
    if not isinstance(x, dict) or x.get("mean") is None:
        return "—"
    return f"{c.fmt(x['mean'])} [{c.fmt(x.get('low'))}, {c.fmt(x.get('high'))}]"


def folder(name: str, keep: str | None) -> contextlib.AbstractContextManager[str]:
    """A fresh folder for one case: under `keep` (kept, must not exist yet), else a temporary."""
    if keep is None:
        return tempfile.TemporaryDirectory(prefix=f"pvd-{name}-")
    path = Path(keep) / name
    path.mkdir(parents=True)
    return contextlib.nullcontext(str(path))


def run_case(
    name: str, case: tuple[str, str, tuple[str, ...]], timeout: float, keep: str | None = None
) -> dict[str, Any]:
    space, study_name, overrides = case
    with folder(name, keep) as tmp:
        cwd = Path(tmp)
        sets = [a for o in overrides for a in ("--set", o)]
        t0 = time.perf_counter()
        study = autotune(["study", "--space", space, *sets, "--quiet"], cwd, timeout)
        out: dict[str, Any] = {
            "case": name,
            "space": space,
            "overrides": list(overrides),
            "study_rc": study.returncode,
            "study_s": round(time.perf_counter() - t0, 1),
        }
        if study.returncode != 0:
            out["study_error"] = study.stderr[-1500:]
            return out
        shown = autotune(["show", study_name, "--json"], cwd, 120)
        data = json.loads(shown.stdout) if shown.returncode == 0 else {}
        pick = data.get("pick") or {}
        out["study"] = {
            "verdict": pick.get("verdict"),
            "defaults_preferred": pick.get("defaults_preferred"),
            "first_choice": pick.get("first_choice"),
            "vs_baseline": data.get("vs_baseline"),
        }
        exported = autotune(["export", study_name, "-o", "recipe.yaml"], cwd, 120)
        out["export_rc"] = exported.returncode
        if exported.returncode != 0:
            out["export_error"] = exported.stderr[-800:]
            return out
        recipe = yaml.safe_load((cwd / "recipe.yaml").read_text())
        out["exported"] = {"knobs": recipe.get("knobs"), "source": recipe.get("source")}
        t1 = time.perf_counter()
        fresh = ["--first-seed", str(FRESH_SEED), "--seeds", "5", "--json"]
        ver = autotune(["verify", "recipe.yaml", *fresh], cwd, timeout)
        out["verify_rc"], out["verify_s"] = ver.returncode, round(time.perf_counter() - t1, 1)
        try:
            report = json.loads(ver.stdout)
        except json.JSONDecodeError:
            out["verify_error"] = (ver.stdout + ver.stderr)[-1500:]
            return out
        out["verify"] = {k: report.get(k) for k in ("seeds", "steps", "vs_baseline")}
        return out


def row(r: dict[str, Any]) -> tuple[Any, ...]:
    st = r.get("study") or {}
    vs = st.get("vs_baseline") or {}
    fresh = ((r.get("verify") or {}).get("vs_baseline")) or {}
    pick, base = vs.get("pick") or {}, vs.get("baseline") or {}
    fresh_pick = (fresh.get("metrics") or {}).get("final_loss") or {}
    if r.get("study_rc"):
        return (r["case"], f"study failed (rc {r['study_rc']})", "", "", "", "", "")
    if r.get("export_rc"):
        why = (r.get("export_error") or "").strip().splitlines()[-1:] or [""]
        return (r["case"], "no pick", "", "", f"refused: {why[0][:160]}", "—", "")
    same = pick.get("number") is not None and pick.get("number") == base.get("number")
    said = "the defaults are the pick" if same else f"{st.get('verdict')}"
    return (
        r["case"],
        said + (" (defaults exported)" if st.get("defaults_preferred") else ""),
        f"{interval(pick.get('final_loss'))} / {interval(base.get('final_loss'))}",
        f"{c.fmt(pick.get('diverged_share'))} / {c.fmt(base.get('diverged_share'))}",
        "exported" if r.get("export_rc") == 0 else f"refused (rc {r.get('export_rc')})",
        f"{fresh.get('verdict')} (rc {r.get('verify_rc')})" if fresh else "—",
        f"{interval(fresh_pick.get('pick'))} / {interval(fresh_pick.get('baseline'))}",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, from the above")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per command")
    ap.add_argument("--json", default=str(HERE / "results" / "pick_vs_defaults.json"))
    ap.add_argument("--keep", metavar="DIR", help="keep each case's study folder under DIR")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
    m, started, results = c.machine(), time.perf_counter(), []
    for name in names:
        c.say(f"{name}: study ...")
        r = run_case(name, CASES[name], args.timeout, args.keep)
        c.say(f"{name}: {row(r)} (study {r.get('study_s')} s, verify {r.get('verify_s')} s)")
        results.append(r)
        c.write_json(args.json, {"machine": m, "results": results})  # nothing lost on a crash
    header = (
        "case",
        "study's verdict",
        "final loss pick / defaults (study)",
        "diverged pick / defaults",
        "export",
        "fresh seeds 101-105: verdict",
        "final loss pick / defaults (fresh)",
    )
    c.close_report(args.json, m, started, results, c.table(header, [row(r) for r in results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
