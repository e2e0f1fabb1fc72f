"""Determinism check: run the same probe several times and compare the step series bit for bit.

`run_repro` loads a space (or a recipe, see `load_space`), forces `probe.deterministic: true`
(which turns on `torch.use_deterministic_algorithms`, cuDNN/MIOpen determinism, a fixed cuBLAS
workspace and, on ROCm, rocBLAS without atomics; see `autotune.probe.steps.set_deterministic`), runs
the probe `runs` times with the space's fixed knob values and compares each run's per-step loss
and gradient norm with the first run's: equal bit for bit, or by how much they differ.

By default the runs share this process (fast; the global switches the probe turns on and the
RNG states are restored afterwards). `fresh_process=True` starts each run as its own
`python -m autotune.process.entry` process with the space's environment knobs set, as a study trial
does: the stronger check, since nothing is shared between runs. In this process the space's
`env:` values are set in `os.environ` during the runs, which libraries that read them at
start-up (RCCL/NCCL, rocBLAS, the HSA runtime) may already have done.

With `seeds=[0, 1]` the runs use different seeds, and the first seed runs once more: the seed
matters when the seeds' runs differ by more than that seed's two runs do (`seed_noise`).

A space runs one configuration, named in the result: its `baseline` (every searched knob at
PyTorch's default, as a study's trial 0 and `autotune probe` run it) or its `midpoint` (each
searched knob at its domain's default); a recipe runs its own knobs. The runs get the CPU
threads the caller's `threads_for(space)` gives (`autotune repro` passes what a study plans for
a trial here, as `autotune probe` does), else probe.threads, else torch's.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from autotune import outfile
from autotune import space as sp
from autotune.errors import RecipeError, ReproError, SpaceError, WorkloadError
from autotune.probe.series_equal import compare_run_series
from autotune.process.cores import check_fits_here
from autotune.repro import seed_noise
from autotune.space import yaml_reader

__all__ = ["SERIES", "compare_run_series", "format_repro", "load_space", "run_repro", "series_text"]

SERIES = ("loss", "grad_norm")
RECIPE_KEY = "autotune_recipe"
RECIPE_VERSION = 1  # the newest recipe format this module reads


def load_space(
    ref: str | Path,
    overrides: Sequence[str] = (),
    check_recipe: Callable[[Path], object] | None = None,
) -> tuple[sp.Space, str]:
    """The space of `ref` and its kind (`space` or `recipe`), with `overrides` applied.

    A space file (or built-in name) is read by `autotune.space.load`. A YAML file with a
    top-level `autotune_recipe:` format number is read as a recipe (the file `autotune export`
    writes): its `name`, `workload`, `knobs` and `env`, and its `precision`, `micro_batch`,
    `world_size` and `probe` (steps, seed, device, ...) become a space whose knobs are all fixed,
    so the probe runs exactly the recipe's configuration. Other recipe keys (achieved, source,
    fingerprint) are not needed and not read. A recipe without `workload:` cannot be probed and
    is an error. Errors inside a recipe name the file and key, not the line.

    `check_recipe(path)`, when given, is called on a recipe file before it becomes a space:
    `autotune repro` passes `Recipe.load` (of the layer beside this one, which this module may
    not import), so that a malformed recipe is refused as `autotune verify` refuses it, in the
    same line, before any probe runs. The script's recorded SHA-256 is not a space's key.
    """
    what = outfile.special(ref)  # before it is opened: a FIFO would block the read forever
    if what is not None:
        raise ReproError(f"{ref}: not a regular file ({what}): not a space or recipe file")
    path = sp.find(ref)
    text = yaml_reader.read_text(path, ReproError)  # bounded: the file may come from elsewhere
    data = yaml_reader.load(text, str(path), SpaceError)
    if not (isinstance(data, dict) and RECIPE_KEY in data):
        return sp.load(path, overrides), "space"
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    changed = [k for k in keys if k == "knobs" or k.startswith("knobs.")]
    if changed:  # a recipe is the configuration it records: its knobs are all fixed
        raise RecipeError(
            f"--set {changed[0]}: a recipe's knobs are fixed (the configuration it records); "
            "to probe other values, repro its study's space with --set knobs.NAME=VALUE"
        )
    if check_recipe is not None:
        check_recipe(path)
    version = data[RECIPE_KEY]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecipeError(f"{path}: {RECIPE_KEY}: must be a format number, got {version!r}")
    if version > RECIPE_VERSION:
        raise RecipeError(
            f"{path}: {RECIPE_KEY}: format {version} is newer than this autotune reads "
            f"({RECIPE_VERSION}): upgrade autotune"
        )
    if "workload" not in data:
        raise RecipeError(
            f"{path}: this recipe names no workload, so it cannot be probed; `repro` reads a "
            "space file, or a recipe with `workload:` and `knobs:`"
        )
    probe = data.get("probe") or {}
    if not isinstance(probe, dict):
        raise RecipeError(f"{path}: probe: must be a mapping, got {type(probe).__name__}")
    fields = sp.ProbeSettings.model_fields
    spec_probe = {k: v for k, v in probe.items() if k in fields}
    for key in ("precision", "micro_batch", "world_size"):
        if key in data and key in fields:
            spec_probe[key] = data[key]
    accum = (
        (data.get("knobs") or {}).get("accum_steps") if isinstance(data.get("knobs"), dict) else 1
    )
    if isinstance(accum, int) and accum > 1 and "micro_batch" in spec_probe:
        # A space derives the micro-batch (batch / accum_steps): the same samples per step.
        spec_probe["batch"] = int(spec_probe.pop("micro_batch")) * accum
    name = data.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem).lstrip("-_.") or "recipe"
    workload = data["workload"]
    if isinstance(workload, dict):  # the script's recorded hash is the recipe's, not a space's
        workload = {k: v for k, v in workload.items() if k != "script_sha256"}
    spec: dict[str, Any] = {"name": name, "workload": workload, "probe": spec_probe}
    for key in ("knobs", "env"):
        if data.get(key):
            spec[key] = data[key]
    return sp.loads(yaml.safe_dump(spec), source=str(path), overrides=overrides), "recipe"


def run_repro(
    space_or_recipe_path: str | Path,
    runs: int = 2,
    seed_override: int | None = None,
    set_: Sequence[str] = (),
    seeds: Sequence[int] | None = None,
    fresh_process: bool = False,
    check_recipe: Callable[[Path], object] | None = None,
    config: str | None = None,
    threads_for: Callable[[sp.Space], int | None] | None = None,
) -> dict[str, Any]:
    """Run the space's probe `runs` times in deterministic mode and compare the step series.

    `seed_override` replaces the space's seed; `seeds` gives one seed per run instead (and sets
    the number of runs). Returns plain data: the settings, one summary per run (seed, status,
    steps, final loss, the determinism switches that applied), and per series (`loss`,
    `grad_norm`) the comparison of every run with the first (`compare_run_series`).
    `reproducible` is True when all runs share a seed and every series is bitwise equal; None
    when the seeds differ, judged then by `seed_effect` (`seed_noise.judge`). `check_recipe`:
    see `load_space`. `config` (`baseline`, default, or `midpoint`) and `threads_for`: see the
    module's docstring; the result's `config` names the configuration run, its knob values and
    threads.
    """
    if seeds is not None:
        seed_list = [int(s) for s in seeds]
        if len(seed_list) < 2:
            raise ReproError(f"--seeds needs at least two seeds, got {seed_list}")
        repeated = sorted({s for s in seed_list if seed_list.count(s) > 1})
        if repeated:  # runs of one seed are --runs' check, not a test that the seed matters
            raise ReproError(
                f"--seeds {','.join(map(str, seed_list))}: seed {repeated[0]} is repeated; the "
                "seeds must differ (for runs of one seed use --runs)"
            )
    elif runs < 2:
        raise ReproError(f"a repro needs at least 2 runs, got {runs}")
    given = [("--seed", seed_override)] + [("--seeds", int(s)) for s in seeds or ()]
    for flag, value in given:
        problem = None if value is None else sp.seed_problem(value)
        if problem:
            raise ReproError(f"{flag}: {problem}")
    space, kind = load_space(
        space_or_recipe_path, [*set_, "probe.deterministic=true"], check_recipe
    )

    if kind == "space" and space.workload.script is None:
        _check_workload(space)  # a recipe's was checked by check_recipe
    base = seed_override if seed_override is not None else space.probe.seed
    seed_list = seed_list if seeds is not None else [base] * runs
    configs, chosen = _configs(space, kind, config, seed_list, threads_for)
    check_fits_here(configs[0], str(space.source))  # its ranks and threads on these cores
    timeout = float(space.budget.trial_timeout_s)
    # A user's training script never runs in this process: whatever it does (os._exit, a
    # signal, a hang) ends its own process, not the command that judges it.
    fresh_process = fresh_process or any(cfg.script is not None for cfg in configs)
    results = [_run_fresh(cfg, timeout) if fresh_process else _run_here(cfg) for cfg in configs]
    effect = None
    if seeds is not None:  # the first seed again: what differs between seeds without the seed
        again = _run_fresh(configs[0], timeout) if fresh_process else _run_here(configs[0])
        effect = seed_noise.judge(results, again, SERIES)
        results.append({**again, "repeat": True})
    series = {  # the runs asked for, not the repeat, which only measures the noise
        name: compare_run_series([r["series"].get(name, []) for r in results[: len(seed_list)]])
        for name in SERIES
    }
    same_seed = len(set(seed_list)) == 1
    identical = all(s["bitwise_equal"] for s in series.values())
    first = results[0]
    return {
        "space": space.name,
        "source": space.source,
        "kind": kind,
        "workload": first["workload"],
        "size": first["size"],
        "device": first["device"],
        "precision": first["precision"],
        "steps": configs[0].steps,
        "config": chosen,
        "seeds": seed_list,
        "fresh_process": fresh_process,
        "determinism": first.get("determinism", {}),
        "runs": [
            {
                "seed": r["seed"],
                "status": r["status"],
                "steps_run": r["steps_run"],
                "final_loss": (r.get("metrics") or {}).get("final_loss"),
                "wall_s": r["wall_s"],
                **({"repeat": True} if r.get("repeat") else {}),
            }
            for r in results
        ],
        "series": series,
        "bitwise_equal": identical,
        "reproducible": identical if same_seed else None,
        "seed_effect": effect,  # --seeds: the seeds' difference against one seed's noise
    }


def format_repro(result: Mapping[str, Any]) -> str:
    """A readable report of `run_repro`."""
    seeds = result["seeds"]
    how = "fresh processes" if result["fresh_process"] else "this process"
    cfg = result["config"]
    values = ", ".join(f"{k}={v:g}" if _is_num(v) else f"{k}={v}" for k, v in cfg["knobs"].items())
    threads = f"{cfg['threads']} CPU thread(s)" if cfg["threads"] else "torch's CPU threads"
    lines = [
        f"repro {result['space']} ({result['kind']} {result['source']}): {result['workload']} "
        f"({result['size']}) on {result['device']}, {result['precision']}, "
        f"{result['steps']} steps, {len(seeds)} runs in {how}, "
        f"seeds {', '.join(str(s) for s in seeds)}"
        + (f" (and seed {seeds[0]} again: its run-to-run noise)" if result["seed_effect"] else ""),
        f"config       {cfg['name']} ({cfg['what']}){': ' + values if values else ''}; {threads}",
        *(sp.env_dropped_text(k, why) for k, why in (cfg.get("dropped") or {}).items()),
        "determinism  "
        + (", ".join(f"{k}={v}" for k, v in result["determinism"].items()) or "nothing recorded"),
    ]
    for i, r in enumerate(result["runs"]):
        final = r["final_loss"]
        lines.append(
            f"run {i}        seed {r['seed']}{' again' if r.get('repeat') else ''}, {r['status']}, "
            f"{r['steps_run']} steps, final loss "
            f"{'n/a' if final is None else format(final, '.6g')}, {r['wall_s']:.1f} s"
        )
    for name, s in result["series"].items():
        lines.append(f"{name:<12} {series_text(s)}")
    effect = result.get("seed_effect")
    if effect is not None:
        lines.append(seed_noise.text(effect, seeds[0]))
    else:
        verdict = result["reproducible"]
        lines.append("REPRODUCIBLE: bitwise identical" if verdict else "NOT REPRODUCIBLE")
    return "\n".join(lines)


def series_text(s: Mapping[str, Any]) -> str:
    """One series' comparison in words: where it first differs with each run's value there, so
    that a NaN against a number reads as such (its difference is not a number: left out of the
    max abs difference, which is over the steps where both are finite)."""
    if s["bitwise_equal"]:
        return f"bitwise equal at all {s['steps']} steps"
    if not s["differing_steps"]:
        text = f"equal at the {s['steps']} steps all runs have"
    else:
        # repr: the shortest text that reads back as the same float (two values a bit apart differ)
        values = " vs ".join(
            v if isinstance(v, str) else repr(v) for v in s.get("first_diff_values") or []
        )
        text = (
            f"differs at {s['differing_steps']} of {s['steps']} steps, first at step "
            f"{s['first_diff_step']}" + (f" ({values})" if values else "")
        )
        one_finite = int(s.get("one_finite_steps") or 0)
        gap = s["max_abs_diff"]
        if gap is not None and (gap > 0 or not one_finite):
            text += f", max abs difference {gap:.3g}"
            if one_finite:
                text += " where both are finite"
        if one_finite:
            text += f", {one_finite} step(s) finite in one run and not the other"
    if s["length_mismatch"]:
        text += f"; runs have different lengths {s['lengths']}"
    return text


CONFIGS = {
    "baseline": "PyTorch's defaults for the searched knobs, as trial 0",
    "midpoint": "each searched knob at its domain's default",
    "recipe": "the recipe's knobs, those not at PyTorch's default shown",
}


def _configs(
    space: sp.Space,
    kind: str,
    config: str | None,
    seeds: Sequence[int],
    threads_for: Callable[[sp.Space], int | None] | None,
) -> tuple[list[Any], dict[str, Any]]:
    """One probe config per seed, of the configuration `config` names (a recipe: its own), at
    the threads `threads_for` plans (see the module's docstring); and that configuration in
    words: its name, what it is, its knob values (a space's searched ones, a recipe's all), the
    threads."""
    import dataclasses

    if kind == "recipe" and config not in (None, "recipe"):
        raise ReproError(f"--config {config}: a recipe runs its own knobs; --config is a space's")
    name = "recipe" if kind == "recipe" else config or "baseline"
    if name not in CONFIGS:
        raise ReproError(f"--config {name}: choose baseline or midpoint")
    dropped: dict[str, str] = {}
    if name == "baseline":
        knobs, env = space.baseline_knobs(), space.baseline_env()
    elif name == "midpoint":  # its env as a study here sets it: a dropped variable unset
        from autotune import fingerprint

        cond = sp.condition_on(space, fingerprint.collect())
        knobs, env = space.fixed_knobs(), sp.midpoint_env(space, cond)
        dropped = sp.env_dropped(space, cond)
    else:
        knobs, env = space.fixed_knobs(), space.fixed_env()
    threads = threads_for(space) if threads_for is not None else space.probe.threads
    configs = [
        dataclasses.replace(sp.probe_config(space, knobs=knobs, env=env, seed=s), threads=threads)
        for s in seeds
    ]
    if kind == "recipe":  # every knob is fixed: the ones it sets away from PyTorch's
        shown = {k: v for k, v in knobs.items() if k == "lr" or v != sp.KNOBS[k].default}
    else:  # the searched ones: what tells the baseline from the midpoint
        shown = {k: v for k, v in {**knobs, **env}.items() if k in space.searched()}
    what = {"name": name, "what": CONFIGS[name], "knobs": shown, "dropped": dropped}
    return configs, {**what, "threads": threads}


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


# --------------------------------------------------------------------------------------------
# Running the probes
# --------------------------------------------------------------------------------------------


def _check_workload(space: sp.Space) -> None:
    """Resolve the space's workload here once, as `autotune check` and a study do: a workload
    that cannot be imported or built (or exits while it is) is one line naming the space file
    and its `workload` key, before any probe runs."""
    from autotune.probe.workload import resolve

    try:
        resolve(space.workload.name, space.workload.size)
    except WorkloadError as e:
        raise WorkloadError(f"{space.source}: workload: {e}") from None


def _run_here(cfg: Any) -> dict[str, Any]:
    from autotune.process.entry import run_here

    with _restored_state(), _environ(cfg.env):
        return run_here(cfg)


@contextlib.contextmanager
def _restored_state() -> Iterator[None]:
    """Give back the process-wide switches and RNG states that a deterministic probe changes."""
    import torch

    saved_env = {
        k: os.environ.get(k) for k in ("CUBLAS_WORKSPACE_CONFIG", "ROCBLAS_DEFAULT_ATOMICS_MODE")
    }
    det, warn = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    cudnn_det, cudnn_bench = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    threads = torch.get_num_threads()
    py_rng, np_rng, torch_rng = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn)
        torch.backends.cudnn.deterministic = cudnn_det
        torch.backends.cudnn.benchmark = cudnn_bench
        torch.set_num_threads(threads)
        random.setstate(py_rng)
        np.random.set_state(np_rng)
        torch.set_rng_state(torch_rng)
        _restore_env(saved_env)


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        _restore_env(saved)


def _restore_env(saved: Mapping[str, str | None]) -> None:
    for key, old in saved.items():
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def _run_fresh(cfg: Any, timeout_s: float) -> dict[str, Any]:
    """One probe as `python -m autotune.process.entry CONFIG.json`, with the env knobs set at
    start; its reports come on its report channel (`autotune.process.channel`), never from its
    output."""
    from autotune.process.channel import run_process
    from autotune.process.env import process_env
    from autotune.process.spawn import python_module

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.json"
        path.write_text(json.dumps(cfg.to_dict()))
        env = process_env(cfg.env)
        try:
            proc, reports = run_process(
                python_module("autotune.process.entry", str(path)),
                env=env,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as e:
            raise ReproError(
                f"a probe run took more than {timeout_s:g} s (budget.trial_timeout_s)"
            ) from e
    summary: dict[str, Any] | None = None
    for msg in reports:
        if msg.get("event") == "error":
            raise WorkloadError(
                f"the probe of workload '{cfg.workload}' raised {msg.get('error_type')}: "
                f"{msg.get('message')}"
            )
        if msg.get("event") == "summary":
            summary = msg
    if summary is None:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise ReproError(
            f"a probe process exited with status {proc.returncode} without a summary: {tail}"
        )
    return summary
