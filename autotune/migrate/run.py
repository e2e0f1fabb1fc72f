"""`migrate`: a recipe from another machine checked on this one, in one report.

The verdict: `transfers` when the recipe holds here (the paired verdict against the baseline
finds no problem: it did not diverge on more seeds than the baseline beyond chance nor on every
seed, and is not worse on the final loss or a stability objective); `transfers with these
changes` when it holds but some of its environment knobs cannot act here (they are dropped),
when its micro-batch ran out of memory but the same batch in more steps holds (`accum_steps A
-> B`: `layout.try_layout`; `recipe-migrated.yaml` is written), or when it does not hold but one
of its Pareto neighbours does (`use trial N (...)`: `neighbours.try_neighbours`; no re-tune then);
`does not transfer` otherwise, naming what a re-tune searches (`knob_classes.retune_plan`);
given the source's space file, `re-tuned: ...` after the reduced study (`retune`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune import fingerprint
from autotune.errors import UsageError
from autotune.migrate import knob_classes, tie
from autotune.migrate.differences import differences
from autotune.migrate.holds import reproduced, reproduces, rerun
from autotune.migrate.lacks import lacking, note, origin, set_aside, set_aside_texts
from autotune.migrate.layout import layout_failed, layout_verdict, write_recipe
from autotune.migrate.layout_spread import at_layout
from autotune.migrate.ops import compare_ops
from autotune.migrate.output import connect, log_report, make_out, previous, removed_if_stopped
from autotune.migrate.report import layout_defaults, markdown, plot_curve
from autotune.migrate.report import write as write_report
from autotune.migrate.retune_check import check_retune
from autotune.migrate.spread import within_spread
from autotune.probe.steps import pick_device
from autotune.process.zygotes import serving
from autotune.recipe.file import Recipe
from autotune.recipe.machine_load import load_done, load_now
from autotune.recipe.preflight import check_timeout, load_checked
from autotune.recipe.script_hash import script_changed
from autotune.repro import record
from autotune.space.limits import MAX_THREADS
from autotune.study import signals

REPORT = "migration.md"
PLOT = "migration-curve.png"


def migrate(
    path: str | Path,
    *,
    seeds: int = 3,
    steps: int | None = None,
    threads: int | None = None,
    timeout_s: float = 600.0,
    out_dir: str | Path = ".",
    audit: bool = True,
    tracking_uri: str | None = None,
    quiet: bool = False,
    space: str | None = None,
    full: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Check the recipe at `path` on this machine; write the report under `out_dir`; return the
    result (`verdict`, `why`, `differences`, `ops`, `holds`, `knob_classes`, `compute`,
    `report`, `png`, `run_id`). `space`: the source study's space file: a recipe that does not
    transfer is then re-tuned here by a reduced study (`retune`). First the cheap check
    (`holds.reproduces`: the recipe's recorded run, at its seed, reproduced here); only when it
    does not (or with `full`) the recipe and the baseline over `seeds` (`holds.rerun`).
    `force`: replace an earlier migration's files in `out_dir` (`output.previous`)."""
    check_options(threads, timeout_s, seeds)  # before the recipe is read or anything made

    say: Callable[[str], None] = (
        (lambda _t: None) if quiet else (lambda t: print(t, file=sys.stderr))
    )
    # read as verify reads it; an edited recipe without what was measured before the edit
    recipe, edited = set_aside(load_checked(path, own_threads=True), say)
    check_threads(threads, int(recipe.world_size))  # as probe and verify check probe.threads
    out = Path(out_dir)
    client, made = prepare(out, tracking_uri, space, recipe)  # before any probe: fail fast
    previous(out, force)  # an earlier migration's files: refused, or removed with `force`
    # SIGTERM stops the check as Ctrl-C does (KeyboardInterrupt, the signal noted for the exit
    # status), in every phase: the re-tune's study notes either and stops, and so does this.
    # Its probes on this machine are forked by zygotes kept for the whole check (`serving`):
    # the imports of a fresh process paid once per environment, not once per probe.
    with signals.handled(), removed_if_stopped(made), serving():
        return _run(recipe, path, edited, out, client, seeds, steps, threads, timeout_s,
                    audit, tracking_uri, space, full, say)  # fmt: skip


def _run(
    recipe: Recipe,
    path: str | Path,
    edited: Any,
    out: Path,
    client: Any,
    seeds: int,
    steps: int | None,
    threads: int | None,
    timeout_s: float,
    audit: bool,
    tracking_uri: str | None,
    space: str | None,
    full: bool,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """`migrate` once its report's folder and store are ready (see it)."""
    import torch

    threads = int(threads or torch.get_num_threads())
    load = load_now()  # what the report says of it
    ops, audit_wall = _ops(recipe, audit, threads, say)
    holds = check(
        recipe, full, seeds=seeds, steps=steps, threads=threads, timeout_s=timeout_s, say=say
    )
    set_aside_texts(holds, edited)  # "records no curve": it was set aside, for the edit
    here_fp = holds.get("fingerprint") or fingerprint.collect()
    diffs = differences(recipe.fingerprint, here_fp)
    inert = knob_classes.inert_env(recipe.env, str(here_fp.get("platform")), int(recipe.world_size))
    searched = list((recipe.source or {}).get("searched") or [])
    verdict, why, plan = verdict_of(recipe, path, holds, inert, searched)
    lacks = lacking(recipe)  # a hand-written or cut recipe: what its verdict cannot say
    why += note(lacks, verdict, edited) + tie.note(recipe, verdict)
    written = None  # the recipe at the layout that held here (`layout`)
    if (holds.get("layout") or {}).get("held") is not None:
        written = write_recipe(recipe, holds["layout"], out, str(here_fp.get("hash")))
        why += f" The recipe at that layout: {written}."
    if plan is None and space:  # the defaults by a tie, and they hold: does anything beat them
        plan = tie.retune_plan(recipe, verdict, holds, searched)
    retuned = None
    if plan is not None and space:
        from autotune.migrate.retune import retune, unfit

        plan["unfit"] = unfit(space, recipe, plan)  # every trial would run out of memory again
        if plan["unfit"]:
            why += f" Given the space, the re-tune did not run: {plan['unfit']}."
        else:
            retuned = retune(recipe, path, plan, space, out_dir=out, tracking_uri=tracking_uri,
                             say=say)  # fmt: skip
            plan["result"] = retuned
            after = tie.after_retune if plan.get("tie") else _after_retune
            verdict, why = after(verdict, why, retuned)
    result: dict[str, Any] = {
        "recipe": recipe.name,
        "verdict": verdict,
        "why": why,
        "recorded_hash": recipe.fingerprint_hash,
        "here_hash": here_fp.get("hash"),
        "here_summary": _summary(here_fp),
        "lacks": lacks,
        "lacks_why": origin(recipe) if lacks else None,
        "source_tie": tie.source_tie(recipe),  # the recipe is the defaults by a tie
        "edited": edited,
        "script_changed": script_changed(recipe.workload),  # the report says it, not only stderr
        "differences": diffs,
        "ops": ops,
        "holds": holds,
        "knob_classes": knob_classes.classes(searched, recipe.env),
        "inert_env": inert,
        "retune": plan,
        "migrated_recipe": str(written) if written else None,
        "compute": _compute(recipe, holds, audit_wall, retuned),
        "load": load_done(load),
    }
    png = plot_curve(holds.get("curve") or {}, out / PLOT)
    result["png"] = str(png) if png else None
    text = markdown(result, png=png.name if png else None)
    report = out / REPORT
    write_report(report, text)  # atomically: a crash mid-write leaves no half a report
    result["report"] = str(report)
    result["run_id"] = log_report(client, result) if client is not None else None
    return result


def _after_retune(verdict: str, why: str, retuned: dict[str, Any]) -> tuple[str, str]:
    """The verdict and its `why` after the re-tune of a recipe that does not hold here."""
    study = (
        f" A study of {retuned['trials']} trial(s) ({retuned['source_trials']} in the source's "
        f"space), warm-started from the recipe, re-tuned {', '.join(retuned['searched'])}"
    )
    if retuned.get("clamped"):  # the warm start ran at the space's bounds, not the recipe
        study += (
            f" (the recipe's values outside the space's bounds were moved into them for "
            f"its warm start: {', '.join(retuned['clamped'])})"
        )
    if retuned["recipe"] is None:
        return (
            "does not transfer: the re-tune found nothing that holds here",
            why + f"{study}: {retuned['failed']}.",
        )
    return f"re-tuned: {', '.join(retuned['searched'])}", why + f"{study}: {retuned['recipe']}."


def _compute(
    recipe: Recipe, holds: dict[str, Any], audit_wall: float, retuned: dict[str, Any] | None
) -> dict[str, Any]:
    """What the check spent, beside what the source study spent."""
    n_probes = (
        len(holds["recipe_result"]["runs"])
        + len((holds.get("baseline_result") or {}).get("runs") or [])
        + int((holds.get("layout") or {}).get("probes") or 0)  # at a layout that fits
        + int((holds.get("neighbours") or {}).get("probes") or 0)  # its Pareto neighbours'
    )
    study_compute = (recipe.source or {}).get("compute") or {}
    return {
        "samples": holds["samples"],
        "probes": n_probes,
        "probe_wall_s": holds["wall_s"],
        "audit_wall_s": audit_wall,
        "retune_samples": (retuned or {}).get("samples"),
        "study_samples": study_compute.get("total"),
        "share_of_study": (  # the re-tune's samples count: it ran here for this check
            (holds["samples"] + int((retuned or {}).get("samples") or 0)) / study_compute["total"]
            if study_compute.get("total")
            else None
        ),
    }


def check(
    recipe: Recipe,
    full: bool,
    *,
    seeds: int,
    steps: int | None,
    threads: int,
    timeout_s: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Does the recipe hold here: the cheap check (its recorded run reproduces), else (or with
    `full`) the recipe and the baseline over the seeds, the first probe reused."""
    fast: dict[str, Any] = {"reproduces": False, "runs": [], "why": "--full"}
    if not full:
        fast = reproduces(recipe, steps=steps, threads=threads, timeout_s=timeout_s, say=say)
    if fast["reproduces"]:
        return reproduced(recipe, fast, threads)
    same = fast["runs"] and same_numerics(recipe, fast["runs"][0].get("fingerprint"))
    # out of memory: the memory's doing ("the run here ended oom"), not the numerics'
    oom = fast["runs"] and fast["runs"][0].get("outcome") == "oom"
    if same and not oom:  # nothing moved the numbers: "another seed's spread" hides a change
        fast["why"] += (
            "; this machine's numerics are the recipe's (no numerics difference in the "
            "fingerprint), so the recipe, the workload's code or a nondeterministic op changed "
            "the run: not judged by the seeds' spread"
        )
    elif fast["runs"] and not oom:
        spread = within_spread(recipe, fast["runs"][0], fast["steps"])
        if spread["within"]:
            say(f"{fast['why']}, but {spread['why']}")
            return reproduced(recipe, fast, threads, spread)
        fast["why"] += f"; not within the recorded seeds' spread: {spread['why']}"
    made: dict[int, dict[str, Any]] = {}  # the recipe's runs at a layout that fits, by accum
    if oom:  # the same batch in more steps, at the recipe's seed, by its verified seeds' spread
        held, made = at_layout(recipe, fast, threads=threads, timeout_s=timeout_s, say=say)
        if held is not None:
            say(f"{fast['why']}, but {held['layout']['why']}")
            return held
    say(f"{fast['why']}: re-running recipe {recipe.name} and the baseline over {seeds} seed(s)")
    holds = rerun(
        recipe,
        seeds=seeds,
        steps=steps,
        threads=threads,
        timeout_s=timeout_s,
        say=say,
        done=fast["runs"],
        layout_done=made,
    )
    holds["reproduced"] = None
    holds["not_reproduced"] = fast["why"]
    return holds


def same_numerics(recipe: Recipe, here: dict[str, Any] | None) -> bool:
    """Whether this machine's fingerprint (`here`, a probe's) records no difference that can
    change the numbers from the recipe's, every section recorded on both sides."""
    if not recipe.fingerprint or not here:
        return False
    diffs = differences(recipe.fingerprint, here)
    return not diffs["not_recorded"] and not diffs["counts"].get("numerics")


def _ops(
    recipe: Recipe, audit: bool, threads: int, say: Callable[[str], None]
) -> tuple[dict[str, Any], float]:
    """The op audit here against the recipe's recorded one (`compare_ops`; status `skipped`
    without `audit`) and the audit's wall time."""
    if not audit:
        return {**compare_ops(None, {}), "status": "skipped"}, 0.0
    device = str(recipe.probe.get("device") or "auto")
    shown = pick_device(device).type if device == "auto" else device  # the probe's rule
    say(f"op audit here ({shown}, {recipe.precision}, {threads} thread(s))")
    t0 = time.perf_counter()
    here_audit = record.audit_here(device, recipe.precision, threads)
    wall = time.perf_counter() - t0
    return compare_ops(recipe.recorded.get("audit"), here_audit), wall


def verdict_of(
    recipe: Recipe,
    path: str | Path,
    holds: dict[str, Any],
    inert: list[str],
    searched: list[str],
) -> tuple[str, str, dict[str, Any] | None]:
    problems = holds.get("problems") or []
    vs = holds["vs_baseline"]
    stands = (  # a defaults recipe is the baseline: the study's verdict was its first choice's
        "the recipe is PyTorch's defaults, the baseline itself"
        if holds.get("recipe_is_baseline")
        else f"its paired verdict against the baseline: {vs['verdict']}"
    )
    if holds.get("path") == "reproduced" and not recipe.recorded.get("verified"):
        why = (
            f"The recorded run reproduces here ({holds['reproduced']}): this machine trains the "
            f"same run. The recipe was not verified in its study (trial "
            f"{(recipe.source or {}).get('trial')}: no seeds, no paired verdict to stand), so "
            "nothing more is known; `--full` runs the recipe and the baseline over the seeds."
        )
    elif holds.get("path") == "reproduced":
        why = (
            f"The recorded run reproduces here ({holds['reproduced']}): this machine trains the "
            f"same run, so the study's verification stands ({stands}). The baseline was not "
            "re-run here; `--full` re-runs the recipe and the baseline over the seeds."
        )
    elif holds.get("path") == "within_spread":
        why = (
            f"The recorded run does not reproduce here ({holds['not_reproduced']}), but "
            f"{holds['spread']['why']}: the recipe trains here as another seed would have "
            f"there, so the study's verification stands ({stands}). The baseline was not "
            "re-run here; `--full` re-runs the recipe and the baseline over the seeds."
        )
    elif not problems:
        why = (
            f"The recipe holds here: paired against the baseline over seeds {holds['seeds']} "
            f"the verdict is {vs['verdict']} ({vs.get('why', '')})."
        )
    if holds.get("nothing_runs"):
        return (
            "cannot tell here: nothing runs, the baseline included",
            f"The recipe cannot be judged on this machine: {holds['nothing_runs']}. Fix the "
            "machine (or its limits) and run migrate again; no re-tune can help.",
            None,
        )
    if problems and (holds.get("layout") or {}).get("held") is not None:
        return layout_verdict(recipe, holds)
    if problems and (holds.get("neighbours") or {}).get("held") is not None:
        return neighbour_verdict(recipe, holds)
    if not problems:
        if inert:
            return (
                f"transfers with these changes: drop {', '.join(inert)}",
                why + f" Its environment knobs {', '.join(inert)} cannot act here.",
                None,
            )
        return "transfers", why, None
    plan = knob_classes.retune_plan(searched, recipe.env, holds)
    plan["command"] = f"autotune study --space SPACE --warm-start {path}"
    plan["note"] = (
        "Give the source study's space file (`--space FILE`) and `autotune migrate` runs the "
        "reduced study: these knobs searched, the others fixed at the recipe's values."
    )
    knobs = ", ".join(plan["knobs"]) or "nothing it searched (a cold study)"
    carried = {  # the cheap check: the run is the study's, and so is its verdict
        "reproduced": f"The recorded run reproduces here ({holds.get('reproduced')}), so ",
        "within_spread": "The recorded run ends here within its verified seeds' spread, so ",
    }.get(str(holds.get("path")), "")
    return (
        f"does not transfer: re-tune {knobs}",
        carried
        + (
            "the recipe does not hold here either: "
            if carried
            else "The recipe does not hold here: "
        )
        + "; ".join(problems)
        + "."
        + layout_failed(holds)
        + neighbours_failed(holds),
        plan,
    )


def neighbour_verdict(recipe: Recipe, holds: dict[str, Any]) -> tuple[str, str, None]:
    """The recipe does not hold here, but one of its Pareto neighbours (`holds.neighbours.held`)
    does: use that trial (what it changes), exported from the source study; no re-tune."""
    nb = holds["neighbours"]
    n = nb["held"]
    entry = next(e for e in nb["tried"] if e["trial"] == n)
    vs = entry["vs_baseline"]
    changes = ", ".join(entry["changes"]) or "no knob differs"
    source = recipe.source or {}
    study = source.get("study_dir") or source.get("study") or "STUDY"
    seeds = holds["seeds"]
    conf = entry.get("confirmation")
    if conf:  # read better among several: judged with fresh seeds too (`neighbour_confirm`)
        seeds = f"{seeds} and fresh seeds {conf['seeds']} (judged after {conf['among']} there)"
    against = (
        "the same baseline runs"
        if "baseline_accum" not in entry
        else layout_defaults([entry["baseline_accum"]])
    )
    return (
        f"transfers with these changes: use trial {n} ({changes})",
        f"The recipe (trial {source.get('trial')}) does not hold here: "
        + "; ".join(holds["problems"])
        + f". Its Pareto neighbour trial {n} (beside it on its study's front) holds: paired "
        f"against {against} over seeds {seeds} the verdict is {vs['verdict']} "
        f"({vs.get('why', '')}). `autotune export {study} --pick 'trial {n}'` on the source "
        "study exports it; no re-tune is needed.",
        None,
    )


def neighbours_failed(holds: dict[str, Any]) -> str:
    """A sentence on the Pareto neighbours tried that did not hold either ('' when none were)."""
    tried = [e for e in (holds.get("neighbours") or {}).get("tried") or [] if e.get("problems")]
    if not tried:
        return ""
    return (
        " Its Pareto neighbours do not hold here either: "
        + "; ".join(f"trial {e['trial']}: {'; '.join(e['problems'])}" for e in tried)
        + "."
    )


def _summary(fp: dict[str, Any]) -> str:
    versions = fp.get("versions") or {}
    devices = fp.get("devices") or []
    where = devices[0].get("name") if devices else (fp.get("host") or {}).get("cpu_model")
    threads = (fp.get("env") or {}).get("torch_threads")
    return f"{fp.get('platform')}, {where}, torch {versions.get('torch')}, {threads} thread(s)"


def check_options(threads: int | None, timeout_s: float, seeds: int = 2) -> None:
    """`--threads` (None: this machine's default), `--timeout` and `--seeds` in range, as a
    space file bounds `threads`, `budget.trial_timeout_s` and `verify.seeds`: a UsageError
    naming the option, before anything is read or made (a typo here must not become a failed
    probe read as "does not transfer"). One paired seed shows no seed noise: the paired verdict
    over it would call a recipe 38% worse "no detectable difference", so at least 2."""
    if seeds < 2:
        raise UsageError(
            f"--seeds {seeds}: one paired seed shows no seed noise, so the recipe cannot be "
            "told from the baseline: at least 2 (as a study's verify.seeds)"
        )
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS
    ):
        raise UsageError(f"--threads {threads}: must be a whole number from 1 to {MAX_THREADS}")
    check_timeout(timeout_s)  # verify's check


def check_threads(threads: int | None, world_size: int) -> None:
    """`--threads` beyond this machine's cores (or not shared out evenly among the recipe's
    ranks) is refused as `probe` and `verify` refuse probe.threads (`cores.threads_problem`),
    naming the option: the probes would run with threads the machine does not have, and the
    report said one count in its op audit and another in its header."""
    import os

    from autotune.process.cores import DoesNotFit, threads_problem

    problem = threads_problem(world_size, threads, float(os.cpu_count() or 1), "world_size")
    if problem:
        text = problem.format(place="this machine").replace("probe.threads", "--threads")
        raise DoesNotFit(f"--threads {threads}{text.removeprefix('--threads')}")


def prepare(
    out: Path, tracking_uri: str | None, space: str | None, recipe: Recipe | None = None
) -> Any:
    """The report's folder made, the tracking store's client (None without one), the re-tune's
    space and engines checked (`check_retune`); (the client, the folders made). A refusal
    removes the folders made for it."""
    made = make_out(out)
    try:
        client = connect(tracking_uri) if tracking_uri else None
        if space:
            check_retune(space, recipe)
    except BaseException:
        for folder in reversed(made):  # nothing written: the folders made for it go again
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return client, made
