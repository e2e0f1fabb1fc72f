"""The recipe at a layout that fits, when its micro-batch ran out of memory here.

The recipe's batch split into more accumulation steps is the same arithmetic (the same samples a
step, the same updates) with a smaller micro-batch: the least change that can make a recipe fit a
machine with less memory, the first thing a user would try, and what a re-tune of the layout
alone found on the case measured (benchmarks/RESULTS.md, Migration). So before any Pareto
neighbour or re-tune, `try_layout` runs the recipe at the smallest accumulation above its own
that divides its batch into a micro-batch smaller than the one that ran out of memory (then the
next, up to `MAX_LAYOUTS`, while each runs out of memory too, unless two micro-batches ran out
of it before their first step alike: `setup_too_big`), over the recipe's seeds, and
judges it as the recipe is judged (`judged.judge`: not worse than PyTorch's defaults, no
divergence they do not share), against the defaults at the same layout when theirs ran out of
memory too (`layout_baseline`). The first layout that runs decides: it holds (`transfers with
these changes: accum_steps A -> B`) or it does not (its problems are the knobs', not the
memory's: the neighbours and the re-tune follow).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.migrate.judged import add_cost, judge, judged_entry
from autotune.migrate.layout_baseline import LayoutBaselines
from autotune.recipe.file import NAME_MAX, Recipe
from autotune.recipe.verify import is_baseline, run_local

MAX_LAYOUTS = 3  # accumulations tried, smallest first, while each runs out of memory
RECIPE_FILE = "recipe-migrated.yaml"  # the recipe at the layout that held, next to the report


def fitting_accums(batch: int, accum: int, oom_micro_batch: int) -> list[int]:
    """The accumulations above `accum` that divide `batch` into a micro-batch smaller than
    `oom_micro_batch`, smallest first."""
    return [
        d for d in range(accum + 1, batch + 1) if batch % d == 0 and batch // d < oom_micro_batch
    ]


def try_layout(
    recipe: Recipe,
    oom: Mapping[str, Any],
    length: int,
    seed_list: list[int],
    *,
    base: Mapping[str, Any] | None,
    layouts: LayoutBaselines | None,
    done: Mapping[int, dict[str, Any]] | None = None,
    timeout_s: float,
    threads: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The recipe at the layouts that could fit (see the module), judged against `base` (the
    baseline's runs at the recipe's layout, when they ran) or, with `layouts`, the defaults at
    each layout run beside it. `held`: the accumulation at which it holds, else None; `tried`:
    one entry per layout run. `done`: the recipe's runs already made at a layout (by
    accumulation, one seed each: `layout_spread`'s), not run again."""
    batch = int(oom["micro_batch"]) * int(oom["accum_steps"])
    candidates = fitting_accums(batch, int(oom["accum_steps"]), int(oom["micro_batch"]))
    out: dict[str, Any] = {
        "from_accum": int(oom["accum_steps"]),
        "batch": batch,
        "tried": [],
        "held": None,
        "samples": 0,
        "probes": 0,
        "wall_s": 0.0,
    }
    defaults = is_baseline(recipe)
    shown = ["final_loss", *recipe.achieved]
    for accum in candidates[:MAX_LAYOUTS]:
        cfg = recipe.probe_config(knobs={**recipe.knobs, "accum_steps": accum}, steps=length)
        label = f"recipe (accum {accum})"
        say(f"the recipe ran out of memory here: the same batch of {batch} in {accum} steps")
        entry: dict[str, Any] = {"accum_steps": accum, "micro_batch": int(cfg.micro_batch)}
        against, extra = base, []
        entry["against"] = (
            "itself (the recipe is PyTorch's defaults)"
            if defaults
            else "the baseline's runs at the recipe's own layout"
        )
        made = [r for r in [(done or {}).get(accum)] if r and r.get("seed") in seed_list]
        if layouts is not None and not defaults:
            runs, at = layouts.run_with(cfg, recipe.env, label, timeout_s=timeout_s,
                                        threads=threads, say=say, shown=shown,
                                        done=made)  # fmt: skip
            against, extra = at["summary"], at["fresh_runs"]
            entry["baseline_accum"] = at["accum_steps"]
            entry["against"] = f"PyTorch's defaults at accum_steps {at['accum_steps']}, beside it"
        else:
            rest = [s for s in seed_list if s not in {r["seed"] for r in made}]
            fresh = run_local(cfg, recipe.env, rest, timeout_s=timeout_s, threads=threads,
                              say=say, label=label, shown=shown)  # fmt: skip
            runs = sorted([*made, *fresh], key=lambda r: seed_list.index(r["seed"]))
        judged = judge(recipe, runs, None if defaults else against, cfg, same=defaults)
        entry.update(judged_entry(judged, [*runs, *extra]), out_of_memory="oom" in judged)
        out["tried"].append(entry)
        add_cost(out, entry)
        if entry["out_of_memory"] and setup_too_big(oom, judged["oom"]):
            out["before_first_step"] = True  # a smaller micro-batch is not what it needs
            break
        if entry["out_of_memory"]:
            continue  # this layout does not fit either: the next
        if entry["holds"]:
            out["held"] = accum
        break
    out["why"] = _why(out, candidates)
    return out


def setup_too_big(first: Mapping[str, Any], then: Mapping[str, Any]) -> bool:
    """Whether the recipe ran out of memory before its first step at its own micro-batch
    (`first`) and at a smaller one (`then`) alike (`judged.out_of_memory`): what does not fit
    is not the micro-batch but the model or its data, so no smaller one is tried (each would
    cost its seeds' probes, and the baseline's, to fail the same way)."""
    return bool(first.get("before_first_step") and then.get("before_first_step"))


def _why(out: Mapping[str, Any], candidates: list[int]) -> str:
    if out["held"] is not None:
        return f"it holds at accum_steps {out['held']}"
    if not candidates:
        return f"its batch of {out['batch']} has no smaller micro-batch to try"
    if out.get("before_first_step"):
        last = out["tried"][-1]
        return (
            f"at accum_steps {last['accum_steps']} (micro-batch {last['micro_batch']}) it runs "
            "out of memory before its first step, as at its own: the micro-batch is not what "
            "does not fit (the model or its data), so no smaller one is tried"
        )
    last = out["tried"][-1] if out["tried"] else None
    if last is None or last["out_of_memory"]:
        shown = ", ".join(str(t["accum_steps"]) for t in out["tried"])
        return f"at accum_steps {shown} it runs out of memory too"
    return f"at accum_steps {last['accum_steps']} it fits but does not hold: " + "; ".join(
        last["problems"]
    )


def write_recipe(recipe: Recipe, layout: Mapping[str, Any], out_dir: Path, here: str) -> Path:
    """The recipe at the layout that held (`layout`, `try_layout`'s), saved next to the report:
    the same knobs but `accum_steps`; its source records where it came from. What it recorded
    where it was tuned at its old layout (the loss curve, the verified seeds) is left out, the
    op audit kept."""
    accum = int(layout["held"])
    migrated = {
        "recipe": recipe.name,
        "fingerprint_hash": recipe.fingerprint_hash,
        "here": here,
        "changed": {"accum_steps": [layout["from_accum"], accum]},
        "why": "its micro-batch ran out of memory here; the same batch in more steps holds",
    }
    data = recipe.to_dict()
    data["name"] = f"{recipe.name[: NAME_MAX - 12]}-accum{accum}"
    data["knobs"] = {**recipe.knobs, "accum_steps": accum}
    data["micro_batch"], data["accum_steps"] = int(layout["batch"]) // accum, accum
    data["source"] = {**(recipe.source or {}), "migrated_from": migrated}
    audit = recipe.recorded.get("audit")
    data.pop("recorded", None)
    if audit:
        data["recorded"] = {"audit": audit}
    new = Recipe.from_dict(data, source="migrated recipe")
    if new.edited_sections() is not None:  # the layout changed on purpose, and held here
        new = new.with_digests()
    return new.save(out_dir / RECIPE_FILE)


#: How the layout verdict ends; a tied recipe's re-tune (`tie.after_retune`) takes it back.
NO_RETUNE = " No re-tune is needed."


def layout_verdict(recipe: Recipe, holds: Mapping[str, Any]) -> tuple[str, str, None]:
    """The recipe does not fit here at its own micro-batch, but holds at a layout that does
    (`holds.layout.held`): that change, and no re-tune."""
    layout = holds["layout"]
    entry = next(e for e in layout["tried"] if e["accum_steps"] == layout["held"])
    vs = entry["vs_baseline"]
    source = recipe.source or {}
    change = f"accum_steps {layout['from_accum']} -> {layout['held']}"
    if holds.get("path") == "layout_spread":  # one probe, by the recorded seeds' spread
        (seed,) = entry["result"]["seeds"]
        stands = (
            "the recipe (PyTorch's defaults, its own baseline) trains at that layout as it did "
            "there (`--full` runs it over the seeds)"
            if is_baseline(recipe)
            else f"the study's paired verdict against the baseline stands ({vs['verdict']}); "
            "the baseline was not re-run here (`--full` re-runs the recipe and the baseline "
            "over the seeds)"
        )
        judged = f"its run at seed {seed}: {entry['spread']['why']}. So {stands}"
    elif is_baseline(recipe):  # its own baseline: nothing to pair it with
        res = entry["result"]
        judged = (
            "the recipe is PyTorch's defaults, its own baseline, and at that layout it ran over "
            f"seeds {holds['seeds']} (diverged on {res['diverged_share']:.0%} of them, failed on "
            f"{res['failed']}). A study here, not this check, would say whether another "
            "configuration now beats the defaults at that layout"
        )
    else:
        judged = (
            f"paired against {entry['against']} over seeds {holds['seeds']} the verdict is "
            f"{vs['verdict']} ({vs.get('why', '')})"
        )
    return (
        f"transfers with these changes: {change}",
        f"The recipe (trial {source.get('trial')}) does not hold here at its own layout: "
        + "; ".join(holds["problems"])
        + f". The same batch of {layout['batch']} in {layout['held']} accumulation steps "
        f"(micro-batch {entry['micro_batch']}), the same arithmetic, fits and holds: {judged}."
        + NO_RETUNE,
        None,
    )


def layout_failed(holds: Mapping[str, Any]) -> str:
    """A sentence on the recipe at the layouts tried that did not hold ('' when none was)."""
    layout = holds.get("layout")
    if not layout or layout.get("held") is not None:
        return ""
    return f" The same batch in more accumulation steps does not help: {layout['why']}."
