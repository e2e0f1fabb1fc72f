"""Every trial of a real study carried on to the target: are the study's "diverged" labels true,
and how much did the study save on the configurations that truly diverge? (issue 23)

For each case (the cases of `pick_vs_defaults.py`: the built-in workloads and two of our own,
heavy_tail and gru_lm, at a fragile learning rate with the shipped gradclip space; the three
examples' training scripts with their own spaces), in a fresh folder, as a user runs it:

1. `autotune study --space SPACE --set ... --quiet` (local Ray, SQLite, files);
2. from the study folder's records: each trial's configuration (`params`), whether any of its
   probes was labelled diverged, and the samples the study spent on it: the screen and the rungs
   (`search`, a continued probe counting only its own samples) apart from the verification;
3. each configuration carried on, alone, to the study's target (`budget.target_steps`) on the
   study's probe seed with `probe.divergence.stop_early=false`: `autotune probe --space SPACE
   --set ... --set knobs.NAME=VALUE ... --set probe.steps=T --json` (trial 0: `--config
   baseline`). The probe's schedule already spans the target, so the study's probe of the
   configuration is this run's first steps.

Truth, as the divergence calibration judges a run carried on (RESULTS.md): truly divergent when
the carried run's loss is non-finite, or its final held-out loss is above 1.5x the best of the
study's carried runs, or at least 0.9x its initial loss. A label is **false** when the carried
run ends within 10% of that best (the issue's definition). **Saved**: of the truly divergent
searched configurations' samples at the target (the baseline left out: the yardstick runs the
whole length by design), the share the study's search did not spend; a truly divergent
configuration the study verified is listed apart (a wrong candidate, not a saving).

    python benchmarks/carried_on.py --jobs 2                      # every case (~30 min, 2 cores)
    python benchmarks/carried_on.py --cases heavy_tail,gru_lm --json out.json
    python benchmarks/carried_on.py --seed 1 --cases mlp,resnet --json s1.json  # other studies
    python benchmarks/carried_on.py --rejudge            # results/carried_on.json, judged again
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _common as c  # this folder's helpers (the script's folder is on sys.path)
import pick_vs_defaults as pvd

from autotune import space as sp
from autotune.study import folder as fd
from autotune.study.compute import samples_of

HERE = Path(__file__).resolve().parent
WORSE_THAN_BEST, STUCK, FALSE_WITHIN = 1.5, 0.9, 1.10


def study_records(study_dir: Path) -> dict[int, dict[str, Any]]:
    """Per trial number: its configuration, its labels and the samples the study spent on it."""
    out: dict[int, dict[str, Any]] = {}

    def entry(n: int) -> dict[str, Any]:
        return out.setdefault(
            n,
            {"params": None, "baseline": False, "labelled": [], "search": 0, "verify": 0}
            | {"finals": {}},
        )

    for path in sorted(fd.trials_dir(study_dir).glob("*.json")):
        rec = fd.read_json(path) or {}
        n, rung = int(path.stem.split("-")[0]), path.stem.partition("-r")[2]
        e = entry(n)
        if not rung:  # the screen's record holds the trial's configuration
            e["params"], e["baseline"] = rec.get("params") or {}, bool(rec.get("baseline"))
            e["samples_per_step"] = (rec.get("summary") or {}).get("samples_per_step")
        e["search"] += samples_of(rec)
        summary = rec.get("summary") or {}
        if summary.get("status") == "diverged":
            e["labelled"].append(f"r{rung or 0}: {summary.get('divergence_cause')}")
        final = (summary.get("metrics") or {}).get("final_loss")
        if final is not None and summary.get("steps_run"):
            e["finals"][int(summary["steps_run"])] = final  # the self-check's
    for path in sorted(fd.verify_dir(study_dir).glob("*.json")):
        rec = fd.read_json(path) or {}
        entry(int(path.stem.split("-")[0]))["verify"] += samples_of(rec)
    return {n: e for n, e in out.items() if e["params"] is not None}


def as_yaml(value: Any) -> str:
    """A value as `--set` reads it back exactly: a float always in the form YAML reads as one
    (`1e-07` alone is a string to YAML 1.1), to the last bit."""
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return f"{value:.17e}"
    return json.dumps(value)


def carry_args(space: sp.Space, trial: Mapping[str, Any], target: int) -> list[str]:
    """`autotune probe` arguments that run `trial`'s configuration to `target` without stopping."""
    sets = [f"probe.steps={target}", "probe.divergence.stop_early=false"]
    for name, value in (trial["params"] or {}).items():
        section = "env" if name in space.env else "knobs"
        sets.append(f"{section}.{name}={as_yaml(value)}")
    args = ["--config", "baseline"] + [a for s in sets for a in ("--set", s)]
    return args


def carry(
    case: tuple[str, str, tuple[str, ...]], args: list[str], cwd: Path, timeout: float
) -> dict[str, Any]:
    space, _, overrides = case
    sets = [a for o in overrides for a in ("--set", o)]
    t0 = time.perf_counter()
    done = pvd.autotune(["probe", "--space", space, *sets, *args, "--json"], cwd, timeout)
    wall = round(time.perf_counter() - t0, 1)
    try:
        summary = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": (done.stdout + done.stderr)[-800:], "rc": done.returncode, "wall_s": wall}
    m = summary.get("metrics") or {}
    return {
        "status": summary.get("status"),
        "cause": summary.get("divergence_cause"),
        "initial_loss": m.get("initial_loss"),
        "final_loss": m.get("final_loss"),
        "steps_run": summary.get("steps_run"),
        "samples_per_step": summary.get("samples_per_step"),
        "wall_s": wall,
    }


def judge(trials: dict[int, dict[str, Any]], target: int) -> dict[str, Any]:
    """Truth per carried run, the labels' falseness and the savings (see the module)."""
    finals = {
        n: t["carried"]["final_loss"]
        for n, t in trials.items()
        if isinstance(t["carried"].get("final_loss"), (int, float))
        and t["carried"]["final_loss"] == t["carried"]["final_loss"]  # not NaN
    }
    best = min(finals.values()) if finals else None
    for n, t in trials.items():
        run, fin = t["carried"], finals.get(n)
        init = run.get("initial_loss")
        if "error" in run:
            t["truth"] = "unknown"
        elif fin is None or run.get("cause") == "nonfinite_loss":
            t["truth"] = "divergent: non-finite"
        elif best is not None and fin > WORSE_THAN_BEST * best:
            t["truth"] = "divergent: far above the best"
        elif init and fin >= STUCK * init:
            t["truth"] = "divergent: ends where it started"
        else:
            t["truth"] = "recovered"
        # the strict subset: broken outright (non-finite) or learned nothing
        t["stuck"] = t["truth"] != "unknown" and (fin is None or bool(init and fin >= STUCK * init))
        t["false_label"] = bool(
            t["labelled"] and fin is not None and best is not None and fin <= FALSE_WITHIN * best
        )
    # the self-check: a probe the study ran at the target is this run (deterministic on the CPU)
    checked = {
        n: abs(finals[n] - t["finals"][target]) / max(abs(t["finals"][target]), 1e-12)
        for n, t in trials.items()
        if target in t["finals"] and n in finals
    }
    labelled = [n for n, t in trials.items() if t["labelled"]]
    divergent = [
        n for n, t in trials.items() if t["truth"].startswith("divergent") and not t["baseline"]
    ]
    stuck = [n for n in divergent if trials[n]["stuck"]]
    return {
        "best_final": best,
        "self_check": {"n": len(checked), "max_rel_diff": max(checked.values(), default=None)},
        "labelled": labelled,
        "false": [n for n in labelled if trials[n]["false_label"]],
        "divergent": divergent,
        "baseline_divergent": any(
            t["baseline"] and t["truth"] != "recovered" for t in trials.values()
        ),
        "divergent_verified": [n for n in divergent if trials[n]["verify"]],
        **savings(trials, divergent, target),
        "stuck": {"numbers": stuck, **savings(trials, stuck, target)},
    }


def savings(trials: Mapping[int, Mapping[str, Any]], numbers: Sequence[int], target: int) -> dict:
    """The samples the study's search spent on `numbers`, of their samples at the target."""
    whole = sum(target * int(trials[n].get("samples_per_step") or 0) for n in numbers)
    spent = sum(int(trials[n]["search"]) for n in numbers)
    return {"spent": spent, "of": whole, "saved": (1 - spent / whole) if whole else None}


def run_case(
    name: str, case: tuple[str, str, tuple[str, ...]], jobs: int, timeout: float
) -> dict[str, Any]:
    space_ref, study_name, overrides = case
    with pvd.folder(name, None) as tmp:
        cwd = Path(tmp)
        sets = [a for o in overrides for a in ("--set", o)]
        t0 = time.perf_counter()
        study = pvd.autotune(["study", "--space", space_ref, *sets, "--quiet"], cwd, timeout)
        out: dict[str, Any] = {"case": name, "study_rc": study.returncode}
        out["study_s"] = round(time.perf_counter() - t0, 1)
        if study.returncode != 0:
            return {**out, "study_error": study.stderr[-1500:]}
        space = sp.load(space_ref, overrides)
        target = space.budget.target_steps or space.probe.steps
        trials = study_records(cwd / "autotune-studies" / study_name)
        c.say(f"{name}: study {out['study_s']} s, {len(trials)} trials; carrying to {target} ...")
        numbers = sorted(trials)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            runs = pool.map(
                lambda n: carry(case, carry_args(space, trials[n], target), cwd, timeout), numbers
            )
            for n, run in zip(numbers, runs, strict=True):
                trials[n]["carried"] = run
        return {**out, "target": target, "trials": trials, **judge(trials, target)}


def row(r: Mapping[str, Any]) -> tuple[Any, ...]:
    if r.get("study_rc"):
        return (r["case"], f"study failed (rc {r['study_rc']})", *[""] * 6)
    saved = "n/a" if r["saved"] is None else f"{r['saved']:.0%}"
    lab = len(r["labelled"])
    return (
        r["case"],
        f"{len(r['trials'])} -> {r['target']}",
        lab,
        f"{len(r['false'])}/{lab}" if lab else "0/0",
        f"{len(r['divergent'])}" + (" (and the baseline)" if r["baseline_divergent"] else ""),
        f"{saved} ({c.fmt(r['spent'], 0)} of {c.fmt(r['of'], 0)})" if r["of"] else saved,
        ", ".join(map(str, r["divergent_verified"])) or "-",
        stuck_cell(r["stuck"]),
    )


def stuck_cell(stuck: Mapping[str, Any]) -> str:
    if not stuck["numbers"]:
        return "0"
    return f"{len(stuck['numbers'])}: {stuck['saved']:.0%} saved"


HEADER = (
    "case",
    "trials -> target",
    "labelled diverged",
    "false labels",
    "truly divergent (searched)",
    "samples saved on them",
    "truly divergent yet verified",
    "of them stuck or non-finite: saved",
)


def rejudge(path: Path) -> int:
    """Judge the carried runs saved in `path` again (after the rule changed): nothing runs."""
    data = json.loads(path.read_text())
    for r in data["results"]:
        if "trials" not in r:
            continue
        trials = {int(n): t for n, t in r["trials"].items()}
        for t in trials.values():
            t["finals"] = {int(k): v for k, v in t["finals"].items()}
        r.update(trials=trials, **judge(trials, r["target"]))
    print(c.table(HEADER, [row(r) for r in data["results"]]))
    c.write_json(path, data)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default=",".join(pvd.CASES), help="comma-separated, from the above")
    ap.add_argument("--jobs", type=int, default=1, help="carried runs at once")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per command")
    ap.add_argument("--json", default=str(HERE / "results" / "carried_on.json"))
    ap.add_argument("--seed", type=int, help="the studies' probe.seed and sampler.seed")
    ap.add_argument("--rejudge", action="store_true", help="judge --json's saved runs again")
    args = ap.parse_args(argv)
    if args.rejudge:
        return rejudge(Path(args.json))
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in pvd.CASES]
    if unknown or args.jobs < 1:
        raise SystemExit(f"--cases: known {', '.join(pvd.CASES)} (got {unknown}); --jobs >= 1")
    m, started, results = c.machine(), time.perf_counter(), []
    for name in names:
        space_ref, study_name, overrides = pvd.CASES[name]
        if args.seed is not None:  # another study: its probe seed and its sampler's
            overrides = (*overrides, f"probe.seed={args.seed}", f"sampler.seed={args.seed}")
        r = run_case(name, (space_ref, study_name, overrides), args.jobs, args.timeout)
        r["seed"] = args.seed
        c.say(f"{name}: {row(r)}")
        results.append(r)
        c.write_json(args.json, {"machine": m, "results": results})  # nothing lost on a crash
    c.close_report(args.json, m, started, results, c.table(HEADER, [row(r) for r in results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
