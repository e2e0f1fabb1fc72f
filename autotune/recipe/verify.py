"""Verification: re-run a configuration with other seeds and say what it reliably achieves.

A single probe at one seed can be lucky. Verification runs the same probe with `n` other seeds
(the probe seed + 1, ..., + n), each in a process of its own with the configuration's
environment (forked by a zygote that did a fresh process's imports once: `run_interleaved`),
and reports for every metric the mean and the 95% interval of the mean (Student's t with n - 1
degrees of freedom: mean ± t(0.975, n-1) · s / √n, s the sample standard deviation), over the
seeds that neither diverged nor failed, plus the share of seeds that diverged.

At the end of a study the best `verify.top_k` candidates are verified this way (through Ray, on
the study's workers: see `autotune.study`); `autotune verify RECIPE` does it for a recipe on the
current machine, beside the baseline (PyTorch's defaults for the knobs the study searched) at the
same seeds, compares with what the recipe promised, and warns when this machine's hardware
fingerprint differs from the recipe's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune import space as sp
from autotune.probe import ProbeConfig
from autotune.probe.outcome import Outcome
from autotune.probe.summary import loss_of
from autotune.recipe import digest, paired
from autotune.recipe.file import Recipe
from autotune.recipe.machine_load import load_done, load_line, load_now
from autotune.recipe.preflight import check_timeout, check_workload
from autotune.recipe.promise import compare_promise, promise_header, promise_line, seed_origin
from autotune.recipe.seeds import (
    POSITIVE_METRICS,
    REPORTED,
    format_interval,
    interval,
    seeds_for,
    summarize_seeds,
    t975,
)

__all__ = [
    "POSITIVE_METRICS",
    "REPORTED",
    "baseline_knobs",
    "check_timeout",
    "check_workload",
    "compare_promise",
    "format_interval",
    "format_report",
    "interval",
    "loss_series",
    "metrics_of",
    "run_local",
    "seeds_for",
    "summarize_seeds",
    "t975",
    "verify_recipe",
]

# ---------------------------------------------------------------------------------------------
# A recipe on this machine
# ---------------------------------------------------------------------------------------------


def baseline_knobs(recipe: Recipe) -> dict[str, Any]:
    """PyTorch's defaults for the knobs the recipe's study searched (the lr stays)."""
    searched = recipe.source.get("searched")
    if not searched:  # a recipe without that record: every knob but lr and the batch layout
        searched = [n for n in sp.KNOBS if n not in ("lr", "accum_steps", "batch")]
    out = dict(recipe.knobs)
    for name in searched:
        if name in sp.KNOBS and name != "lr":
            out[name] = sp.KNOBS[name].default
    if out.get("batch") is None:  # the study's reference batch, as its baseline ran
        out["batch"] = int(recipe.probe.get("batch") or recipe.knobs["batch"])
    return out


def baseline_config(recipe: Recipe, length: int) -> ProbeConfig:
    """The baseline beside `recipe` (its searched knobs at PyTorch's defaults,
    `baseline_knobs`) at `length` steps, run as the study runs its baseline."""
    return recipe.probe_config(knobs=baseline_knobs(recipe), steps=length).for_baseline()


def run_one(
    cfg: ProbeConfig,
    env: Mapping[str, str],
    seed: int,
    *,
    timeout_s: float,
    threads: int | None,
    say: Callable[[str], None],
    label: str,
    at: str = "",
    shown: Sequence[str] = ("final_loss",),
) -> dict[str, Any]:
    """Run `cfg` at `seed` in a process of its own on this machine (forked by a zygote inside
    `zygotes.serving`, else a fresh one); say how it ended (`label`, and `at` after the seed:
    `(2/3)`; the metrics `shown`: those the recipe is judged on)."""
    from dataclasses import replace

    from autotune.process.launcher import run_trial_process
    from autotune.process.zygote import script_preload_env
    from autotune.process.zygotes import serving_now

    out = run_trial_process(
        replace(cfg, seed=seed).to_dict(),
        env,
        timeout_s=timeout_s,
        threads=threads or cfg.threads,  # as the study ran it (OMP_NUM_THREADS included)
        spare=serving_now(),
        # a script's zygote imports what the study's did (its preload), once for every seed
        extra_env=script_preload_env(cfg.preload) if cfg.script else None,
    )
    out["seed"] = seed
    m = (out.get("summary") or {}).get("metrics") or {}
    state = out["outcome"] + (f" ({out['cause']})" if out.get("cause") else "")
    values = "".join(
        f"  {name} {m[name]:.4g}"
        for name in dict.fromkeys(shown)
        if isinstance(m.get(name), (int, float))
    )
    done = out["outcome"] == Outcome.COMPLETE
    say(f"  {label} seed {seed}{at}: {state}" + (values if done else ""))
    return out


def run_local(
    cfg: ProbeConfig,
    env: Mapping[str, str],
    seeds: Sequence[int],
    *,
    timeout_s: float,
    threads: int | None,
    say: Callable[[str], None],
    label: str,
    shown: Sequence[str] = ("final_loss",),
) -> list[dict[str, Any]]:
    """Run `cfg` once per seed, one after another, each in a process of its own on this
    machine (`run_interleaved`)."""
    return run_interleaved(
        [(cfg, env, label)], seeds, timeout_s=timeout_s, threads=threads, say=say, shown=shown
    )[0]


def run_interleaved(
    arms: Sequence[tuple[ProbeConfig, Mapping[str, str], str]],
    seeds: Sequence[int],
    *,
    timeout_s: float,
    threads: int | None,
    say: Callable[[str], None],
    skip: Sequence[tuple[int, int]] = (),
    shown: Sequence[str] = ("final_loss",),
) -> list[list[dict[str, Any]]]:
    """Run each arm (config, environment, label) over `seeds`, interleaved by seed: every
    arm's run of the first seed, then of the second, ...; per arm its runs in seed order. A
    paired comparison (the recipe against the baseline) then sees a change in the machine's
    load on both arms of a seed alike, not as a difference between arms run one after the
    other. `skip`: (arm index, seed) pairs not to run (already run).

    Each run is a process of its own, forked by a zygote of its environment
    (`autotune.process.zygotes.serving`: one kept per environment of the arms, all ended when
    this returns, unless a caller's `serving` keeps them for its next runs): the imports of a
    fresh process (seconds) are paid once per environment, not once per seed and arm. A forked
    probe runs as a fresh one does, at the same seed to the same numbers
    (tests/recipe/test_verify_forked.py)."""
    from autotune.process.zygotes import serving

    out: list[list[dict[str, Any]]] = [[] for _ in arms]
    with serving(len({frozenset(env.items()) for _, env, _ in arms})):
        for i, seed in enumerate(seeds):
            for k, (cfg, env, label) in enumerate(arms):
                if (k, seed) in skip:
                    continue
                at = f" ({i + 1}/{len(seeds)})"
                run = run_one(
                    cfg,
                    env,
                    seed,
                    timeout_s=timeout_s,
                    threads=threads,
                    say=say,
                    label=label,
                    at=at,
                    shown=shown,
                )
                out[k].append(run)
    return out


def verify_recipe(
    recipe: Recipe,
    *,
    source: str = "<recipe>",
    seeds: int = 3,
    baseline: bool = True,
    timeout_s: float = 600.0,
    threads: int | None = None,
    quiet: bool = False,
    steps: int | None = None,
    first_seed: int | None = None,
    checked: bool = False,
) -> dict[str, Any]:
    """Verify a recipe on this machine: its seeds, the baseline's, the promise, the drift.

    The seeds: `first_seed` ... `first_seed + seeds - 1` for both, else the ones after the
    recipe's probe seed, as its study's verification ran them (`seed_origin` says which the
    study ran). The recipe and the baseline run interleaved by seed (`run_interleaved`).
    `steps` runs the recipe and the baseline for that many steps instead of the probe's: a
    study ranks configurations at its probe length, which does not always predict a longer run
    (benchmarks/RESULTS.md, probe fidelity), so check at the length you will train. The promise
    was measured at the probe length: at another length it is not compared. `checked`: the
    workload was resolved already (`preflight.load_checked`)."""
    from autotune import fingerprint

    say: Callable[[str], None] = (
        (lambda _t: None) if quiet else (lambda t: print(t, file=sys.stderr))
    )
    check_timeout(timeout_s)
    if not checked:
        check_workload(recipe, source)
    here = fingerprint.collect()
    promised_steps = int(recipe.probe.get("steps", 200))
    length = promised_steps if steps is None else steps  # at the reference batch
    cfg = recipe.probe_config(steps=length)
    if first_seed is None:
        seed_list = seeds_for(cfg.seed, seeds)
    else:
        seed_list = [first_seed + i for i in range(seeds)]
    is_defaults = is_baseline(recipe)
    say(
        f"verifying recipe {recipe.name} on this machine ({here.get('hash')}): "
        f"{len(seed_list)} seed(s), {cfg.steps} steps each"
        + (f" ({length} at the study's batch)" if cfg.steps != length else "")
        + (f", LR scheduled over {cfg.schedule_steps}" if cfg.schedule_steps != cfg.steps else "")
        + (", beside the baseline" if baseline and not is_defaults else "")
    )
    if baseline and is_defaults:
        say("the recipe is the baseline (PyTorch's defaults): no baseline run beside it")
    arms = [(cfg, recipe.env, "recipe  ")]
    if baseline and not is_defaults:
        arms.append((baseline_config(recipe, length), recipe.env, "baseline"))
    shown = ["final_loss", *recipe.achieved]  # what the recipe is judged on
    load = load_now()  # the report says whether other work shared the machine
    ran = run_interleaved(
        arms, seed_list, timeout_s=timeout_s, threads=threads, say=say, shown=shown
    )
    runs = ran[0]
    # The probes' own fingerprint (their threads and environment), not this driver's.
    here = next((r["fingerprint"] for r in runs if r.get("fingerprint")), here)
    drift = fingerprint.diff(recipe.fingerprint, here) if recipe.fingerprint else []
    edited = recipe.edited_sections() or []  # the sections changed since its export
    same = recipe.fingerprint is not None and not drift
    report: dict[str, Any] = {
        "recipe": recipe.name,
        "source": dict(recipe.source),
        "fingerprint": here,
        "recipe_fingerprint_hash": recipe.fingerprint_hash,
        "drift": [{"field": f, "recipe": a, "here": b} for f, a, b in drift],
        "same_hardware": same,
        "seeds": seed_list,
        "seed_origin": seed_origin(recipe, seed_list, _unlike(length, promised_steps, edited)),
        "recipe_is_baseline": is_defaults,  # PyTorch's defaults: no baseline beside it
        "steps": length,
        "recipe_result": summarize_seeds(runs, metrics_of(recipe)),
        # each seed's loss at every step (JSON: a non-finite loss is null), for MLflow's
        # `loss/seed_N` histories and a user who plots them
        "loss_series": loss_series(runs),
        "load": load_done(load),
    }
    if len(ran) > 1:
        report["baseline_result"] = summarize_seeds(ran[1], metrics_of(recipe))
    report["promised_steps"] = promised_steps
    report["promised_metrics"] = list(recipe.achieved)  # empty: the recipe promised nothing
    # The recipe against the baseline, paired over the same seeds at this length.
    metrics = paired.compared_metrics(
        [
            {"metric": m, "direction": p.get("direction", "minimize")}
            for m, p in recipe.achieved.items()
        ]
    )
    report["vs_baseline"] = paired.compare(
        report["recipe_result"], report.get("baseline_result"), metrics, same=is_defaults
    )
    if not baseline and not is_defaults:  # not "not run at these seeds": not asked for
        report["vs_baseline"]["why"] = "the baseline was not run (--no-baseline)"
    report["edited"] = edited  # another configuration's promise
    compared = length == promised_steps and not report["edited"]
    report["promise"] = compare_promise(recipe, report["recipe_result"], same) if compared else []
    return report


def _unlike(length: int, promised_steps: int, edited: list[str]) -> str | None:
    """How this verification's runs differ from the study's own (None: they do not)."""
    if length != promised_steps:
        return f"run here at {length} steps, not the study's {promised_steps}"
    if edited:
        return f"the recipe's {', '.join(edited)} edited since its export"
    return None


def loss_series(runs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Seed (as a JSON key) -> the loss at each step that seed's probe ran."""
    out: dict[str, list[Any]] = {}
    for r in runs:
        loss = loss_of(r.get("summary"))
        if loss and r.get("seed") is not None:
            out[str(r["seed"])] = loss
    return out


def is_baseline(recipe: Recipe) -> bool:
    """The recipe is the baseline: exported as the defaults, or its knobs are PyTorch's
    defaults for every knob its study searched."""
    if (recipe.source or {}).get("defaults"):
        return True
    base = baseline_knobs(recipe)
    return all(recipe.knobs.get(k) == v for k, v in base.items())


def metrics_of(recipe: Recipe) -> list[str]:
    """The metrics a recipe's runs are summarized on: its promised ones, then the reported, then
    scaling_efficiency where the recipe measures scaling (`probe.measure_scaling`): each probe
    (the recipe's and the baseline's) pays for the one-process run, so its figure is shown even
    when the study did not optimise it."""
    scaling = ["scaling_efficiency"] if recipe.probe.get("measure_scaling") else []
    return list(dict.fromkeys([*recipe.achieved, *REPORTED, *scaling]))


def all_failed(report: Mapping[str, Any]) -> bool:
    """Every seed of the recipe failed (an exception, a crash, a timeout): nothing was measured."""
    rec = report["recipe_result"]
    return bool(rec["n"]) and rec["failed"] == rec["n"]


def failure_lines(result: Mapping[str, Any], label: str) -> list[str]:
    """One line per failed seed: its cause and the error the probe reported."""
    return [
        f"  {label} seed {r['seed']}: {r['outcome']} ({r.get('cause') or 'unknown cause'})"
        + (f": {r['error']}" if r.get("error") else "")
        for r in result["runs"]
        if r.get("outcome") not in (Outcome.COMPLETE, Outcome.DIVERGED)
    ]


def format_report(report: Mapping[str, Any]) -> str:
    """The verification as a table: recipe vs baseline per metric, the promise, the drift."""
    rec = report["recipe_result"]
    base = report.get("baseline_result")
    lines = [
        f"recipe {report['recipe']}: {rec['n']} seed(s) {report['seeds']}, {report['steps']} "
        f"steps; diverged {rec['diverged_share']:.0%} of seeds{paired.causes_text(rec)}"
        + (f", {rec['failed']} failed" if rec["failed"] else "")
        + (
            f"; baseline diverged {base['diverged_share']:.0%}{paired.causes_text(base)}"
            + (f", {base['failed']} failed" if base["failed"] else "")
            if base
            else ""
        )
    ]
    if report.get("seed_origin"):
        lines.append(report["seed_origin"]["text"])
    if rec["failed"]:
        lines.append("failed seeds:")
        lines += failure_lines(rec, "recipe  ")
        if base and base["failed"]:
            lines += failure_lines(base, "baseline")
    head = f"  {'metric':<14} {'recipe: mean [95% interval]':<34}"
    if base:
        head += f" {'baseline: mean [95% interval]':<34}"
    lines.append(head)
    for m, iv in rec["metrics"].items():
        row = f"  {m:<14} {format_interval(iv):<34}"
        if base:
            row += f" {format_interval(base['metrics'].get(m)):<34}"
        lines.append(row)
    promised_steps = report.get("promised_steps", report["steps"])
    if promised_steps != report["steps"]:
        if report.get("baseline_result"):
            check = "the recipe against the baseline above is the check here"
        elif report.get("recipe_is_baseline"):
            check = "the recipe is the baseline: its runs above are all there is to read"
        else:  # --no-baseline: a recipe that is not the defaults, run alone
            check = "no baseline ran beside it (--no-baseline): its runs above are all there is"
        lines.append(
            f"the recipe's promise was measured at {promised_steps} steps: not compared at "
            f"{report['steps']} ({check})"
        )
    if report.get("edited"):
        lines.append(digest.text(report["edited"]))
    elif report.get("promised_metrics") == [] and promised_steps == report["steps"]:
        lines.append(
            "the recipe records no `achieved` values: it promised nothing, so nothing is "
            "compared with a promise (the runs above and the baseline beside them are the check)"
        )
    if report.get("promise"):
        lines.append(promise_header(report["promise"]))
        lines += [promise_line(p, format_interval) for p in report["promise"]]
    if report.get("vs_baseline"):
        lines.append(paired.format_line(report["vs_baseline"], label="recipe"))
    threads = ((report.get("fingerprint") or {}).get("env") or {}).get("torch_threads")
    if said := load_line(report.get("load"), threads, "the verification"):
        lines.append(said)
    if report["drift"]:
        was, now = report["recipe_fingerprint_hash"], report["fingerprint"].get("hash")
        lines.append(
            f"WARNING: this machine differs from the one the recipe was tuned on ({was} -> {now}):"
            if was != now
            # the hash is the hardware's: settings (thread counts, the CPU kernels used, ...)
            # are outside it and can still change the numbers
            else f"WARNING: the same hardware ({now}), set up differently from where the recipe "
            "was tuned:"
        )
        for d in report["drift"][:12]:
            lines.append(f"  {d['field']}: {d['recipe']!r} -> {d['here']!r}")
        if len(report["drift"]) > 12:
            lines.append(f"  ... and {len(report['drift']) - 12} more fields")
    elif report["recipe_fingerprint_hash"] is None:
        lines.append("the recipe records no fingerprint: hardware drift cannot be checked")
    else:
        lines.append(f"same hardware as the recipe ({report['recipe_fingerprint_hash']})")
    return "\n".join(lines)
