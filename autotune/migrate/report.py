"""The migration report in Markdown: the verdict first, then the differences, the ops, the
curves (a PNG when matplotlib is installed) and the compute spent. Both files are written
atomically (`write`, `plot_curve`)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import outfile
from autotune.migrate import lacks
from autotune.recipe.machine_load import load_line
from autotune.recipe.seeds import format_interval


def write(path: Path, text: str) -> Path:
    """The report to `path` atomically (`autotune.outfile`): a crash or a full disk mid-write
    leaves the previous report or none, never half of one. The file written: `path`, or the
    file a symlink at it points to."""
    return outfile.write(path, text, "-o")


def plot_curve(curve: Mapping[str, Any], path: Path) -> Path | None:
    """The recorded and this machine's loss curves and their difference, to `path` (drawn
    aside, then written as the report is: `write`); None without matplotlib or without a
    compared curve."""
    if curve.get("status") != "compared":
        return None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    from autotune.repro.compare_plot import plot_comparison

    with tempfile.TemporaryDirectory() as tmp:
        png = plot_comparison(dict(curve), Path(tmp) / path.name)
        outfile.write(path, png.read_bytes(), "-o")
    return path


def layout_defaults(accums: Sequence[int]) -> str:
    """What a neighbour is paired against when the recipe's baseline ran out of memory here
    (`layout_baseline`): one phrase for the report's table and the verdict's sentence."""
    return (
        "PyTorch's defaults at its own micro-batch, run beside it (the recipe's baseline ran out "
        f"of memory here; accum_steps {', '.join(map(str, accums))})"
    )


def markdown(result: Mapping[str, Any], png: str | None = None) -> str:
    """The report as Markdown (`result`: what `run.migrate` returns)."""
    holds = result["holds"]
    lines = [
        f"# Migration of recipe `{result['recipe']}`",
        "",
        f"**Verdict: {result['verdict']}**",
        "",
        result["why"],
        "",
        (
            f"Tuned on `{result['recorded_hash']}`"
            if result["recorded_hash"]
            else "Tuned on a machine the recipe does not record (no `fingerprint`)"
        )
        + f", checked here on `{result['here_hash']}` ({result['here_summary']}).",
        "",
    ]
    if said := load_line(result.get("load"), holds.get("threads"), "the check"):
        lines += [said, ""]
    if result.get("script_changed"):  # what the recipe recorded ran another script
        lines += [
            f"**The workload's script changed since the recipe was made**: "
            f"{result['script_changed']}. What the recipe recorded (its loss curve, its verified "
            "seeds, its study's verdict) was measured on the script as it was.",
            "",
        ]
    lacked = list(result.get("lacks") or [])
    lines += lacks.section(lacked, result.get("edited"), result.get("lacks_why"))
    lines += _holds_section(holds)
    lines += _layout_section(holds.get("layout"))
    lines += _neighbours_section(holds.get("neighbours") or {})
    lines += _differences_section(result["differences"])
    lines += _ops_section(result["ops"])
    lines += _curve_section(holds.get("curve") or {}, png)
    lines += _retune_section(result)
    lines += _compute_section(result["compute"])
    return "\n".join(lines).rstrip() + "\n"


def _spread_section(h: Mapping[str, Any]) -> list[str]:
    """The recorded run drifted here (or ran out of memory, and the same batch in more steps
    ran: `layout_spread`), but ended within the recorded seeds' spread."""
    spread = h["spread"]
    rows = spread.get("rows") or {}
    if h.get("path") == "layout_spread":
        held = h["layout"]["held"]
        (seed,) = next(e for e in h["layout"]["tried"] if e["accum_steps"] == held)["result"][
            "seeds"
        ]
        ran = (
            f"The recipe's micro-batch ran out of memory here ({h['problems'][0]}), "
            f"{h['threads']} thread(s). The same batch in {held} accumulation steps, the same "
            f"arithmetic at a smaller micro-batch, fits: its run (seed {seed}, {h['steps']} "
            "steps)"
        )
    else:
        ran = (
            f"The recipe's recorded run does not reproduce here ({h['not_reproduced']}), "
            f"{h['threads']} thread(s): the numerics moved. Its run here (seed "
            f"{h['seeds'][0]}, {h['steps']} steps)"
        )
    return [
        "## Does the recipe hold here",
        "",
        f"{ran} ends within the spread of its verified seeds where it was tuned "
        "(no worse than the one-sided 97.5% prediction bound of one more seed), so the study's "
        f"verification stands: {_carried(h)}. The baseline was not re-run here (`autotune "
        "migrate --full` re-runs the recipe and the baseline over the seeds).",
        "",
        "| metric | here | recorded seeds | bound | within |",
        "|---|---|---|---|---|",
        *(
            f"| {m} | {_num(r['here'], '.4g')} | "
            f"{', '.join(_num(v, '.4g') for v in r['recorded'])} | "
            f"{_num(r['bound'], '.4g')} | {'yes' if r['within'] else 'no'} |"
            for m, r in rows.items()
        ),
        "",
    ]


def _carried(h: Mapping[str, Any]) -> str:
    """The study's verdict a cheap check carries over, said of the recipe it belongs to: a recipe
    that is PyTorch's defaults is the baseline itself, and its study's paired verdict (when
    there is one) was its first choice's against them."""
    verdict = h["vs_baseline"]["verdict"]
    if not h.get("recipe_is_baseline"):
        return f"its paired verdict against the baseline, **{verdict}**"
    theirs = (
        f" (its study's, **{verdict}**, is its first choice's against them)"
        if verdict not in ("not compared", "not recorded")
        else ""
    )
    return (
        "the recipe is PyTorch's defaults, the baseline itself, with no paired verdict of its "
        f"own{theirs}"
    )


def _holds_section(h: Mapping[str, Any]) -> list[str]:
    rec, base = h["recipe_result"], h.get("baseline_result")
    vs = h["vs_baseline"]
    if h.get("path") == "reproduced":
        return [
            "## Does the recipe hold here",
            "",
            f"The recipe's recorded run reproduces here ({h['reproduced']}), {h['threads']} "
            "thread(s): the same training, so the study's verification stands, as it was where "
            f"it was tuned: {_carried(h)}. The baseline was not re-run here (`autotune migrate "
            "--full` re-runs the recipe and the baseline over the seeds).",
            "",
            "| metric | recipe here (one seed) |",
            "|---|---|",
            *(f"| {m} | {format_interval(iv)} |" for m, iv in rec["metrics"].items()),
            "",
        ]
    if h.get("path") in ("within_spread", "layout_spread"):
        return _spread_section(h)
    missed = h.get("not_reproduced")
    out = [
        "## Does the recipe hold here",
        "",
        f"The recipe and the baseline (PyTorch's defaults for the searched knobs) over seeds "
        f"{h['seeds']} at {h['steps']} steps (the decided length), {h['threads']} thread(s)"
        + (f"; why the cheap check did not stand: {missed}" if missed else "")
        + ".",
        "",
        "| metric | recipe: mean [95% interval] | baseline: mean [95% interval] | paired verdict |",
        "|---|---|---|---|",
    ]
    for m, iv in rec["metrics"].items():
        b = format_interval(base["metrics"].get(m)) if base else "-"
        v = ((vs.get("metrics") or {}).get(m) or {}).get("verdict", "-")
        out.append(f"| {m} | {format_interval(iv)} | {b} | {v} |")
    div_b = f"{base['diverged_share']:.0%}" if base else "-"
    out += [
        f"| diverged | {rec['diverged_share']:.0%} of seeds | {div_b} of seeds | |",
        "",
        f"Paired verdict here: **{vs['verdict']}** ({vs.get('why', '')}); "
        f"where it was tuned: {h.get('source_verdict') or 'not recorded'}.",
        "",
    ]
    for p in h.get("problems") or []:
        out.append(f"- does not hold: {p}")
    return out + ([""] if h.get("problems") else [])


def _layout_section(layout: Mapping[str, Any] | None) -> list[str]:
    """The recipe at a layout that fits (`layout.try_layout`), when its micro-batch ran out of
    memory here."""
    if not layout:
        return []
    judged = (
        "at the recipe's seed, judged by its verified seeds' spread"
        if layout["tried"] and "spread" in layout["tried"][-1]
        else "over the same seeds and judged as the recipe is"
    )
    out = [
        "## The same batch in more steps",
        "",
        f"The recipe's micro-batch ran out of memory here, so its batch of {layout['batch']} was "
        f"run in more accumulation steps (from {layout['from_accum']}), the same arithmetic at a "
        f"smaller micro-batch, {judged}: {layout['why']}.",
        "",
    ]
    if not layout["tried"]:
        return out
    out += [
        "| accum_steps | micro-batch | paired against | paired verdict | holds here |",
        "|---|---|---|---|---|",
    ]
    for e in layout["tried"]:
        against = e["against"]
        why = "yes" if e["holds"] else "no: " + "; ".join(e["problems"])
        out.append(
            f"| {e['accum_steps']} | {e['micro_batch']} | {against} | {e['verdict']} | "
            f"{why.replace('|', '/')} |"
        )
    return [*out, ""]


def _neighbours_section(nb: Mapping[str, Any]) -> list[str]:
    """The recipe's Pareto neighbours (`neighbours.try_neighbours`): each one tried, what it changes
    and its verdict; or why none was run."""
    out = ["## Pareto neighbours", ""]
    recorded = nb.get("recorded")
    if nb.get("status") != "tried":
        if recorded is None and nb.get("source") is False:
            text = "The recipe records no Pareto neighbours (it has no `source` section)"
        elif recorded is None:
            text = (
                "The recipe records no Pareto neighbours (exported before autotune recorded them)"
            )
        elif recorded == 0:
            text = "The recipe records none (its study had no other candidate on the front)"
        else:
            text = f"The recipe records {recorded} Pareto neighbour(s)"
        reasons = {"not needed": f"not needed: {nb.get('why')}", "not run": nb.get("why")}
        more = reasons.get(str(nb.get("status")))
        return [*out, text + (f"; {more}" if more else "") + ".", ""]
    layouts = sorted({e["baseline_accum"] for e in nb.get("tried") or [] if "baseline_accum" in e})
    against = "the same baseline runs" if not layouts else layout_defaults(layouts)
    against += "; one holds only when it beats them. "
    out += [
        f"The recipe does not hold here: its {recorded} Pareto neighbour(s) from its study, "
        "nearest first, over the same seeds at the same length, each paired against "
        + against
        + (
            f"Trial {nb['held']} holds."
            if nb.get("held") is not None
            else "None holds here either."
        ),
        "",
        "| trial | on the front of | knobs that differ | paired verdict | holds here |",
        "|---|---|---|---|---|",
    ]
    for e in nb.get("tried") or []:
        changes = (", ".join(e.get("changes") or []) or "none").replace("|", "\\|")
        head = f"| {e['trial']} | {_cell(e.get('front') or 'every objective')} | {changes}"
        if e.get("status") == "not run":
            out.append(f"{head} | not run | not needed: trial {nb['held']} |")
            continue
        why = "yes" if e.get("holds") else "no: " + "; ".join(e.get("problems") or [])
        why += confirmation_text(e.get("confirmation"))
        verdict = e.get("verdict") or "not run"
        out.append(f"{head} | {verdict} | {why.replace('|', '/')} |")
    return [*out, ""]


def confirmation_text(conf: Mapping[str, Any] | None) -> str:
    """How a neighbour's verdict came about when it was judged again with fresh seeds
    (`neighbour_confirm`); '' when it was not."""
    if not conf:
        return ""
    return (
        f" (it read better on seeds {conf['chosen_on']}, where {conf['among']} neighbours were "
        f"judged; this verdict is over fresh seeds {conf['seeds']} too)"
    )


def _differences_section(d: Mapping[str, Any]) -> list[str]:
    out = ["## What differs", ""]
    if "fingerprint" in d["not_recorded"]:
        return [*out, "The recipe records no fingerprint: nothing to compare.", ""]
    counts = d["counts"]
    out.append(
        f"{len(d['rows'])} field(s) differ: {counts.get('numerics', 0)} can change the numerics, "
        f"{counts.get('performance', 0)} only the speed, {counts.get('none', 0)} nothing."
    )
    if d["not_recorded"]:
        out.append(f"Not recorded with the recipe: {', '.join(d['not_recorded'])}.")
    out += ["", "| field | recorded | here | can change | why |", "|---|---|---|---|---|"]
    for r in d["rows"]:
        out.append(
            f"| `{r['field']}` | {_cell(r['recorded'])} | {_cell(r['here'])} | {r['class']} "
            f"| {r['why']} |"
        )
    return [*out, ""]


def _ops_section(o: Mapping[str, Any]) -> list[str]:
    out = ["## Which ops differ", ""]
    if o["status"] == "skipped":
        return [*out, "Not run (`--no-audit`).", ""]
    if o["status"] != "compared":
        out.append(
            "The recipe records no op audit (export it with `--audit` where it was tuned): "
            "this machine's alone."
        )
    else:
        grew = ", ".join(o["grew"]) or "none"
        beyond = ", ".join(o["beyond_tolerance"]) or "none"
        out.append(f"Error grew more than {o['factor']:g}x here: **{grew}**.")
        out.append(f"Beyond the dtype's tolerance here and not where tuned: **{beyond}**.")
    out += [
        "",
        "| op | pass | max_abs recorded | max_abs here | ratio | |",
        "|---|---|---|---|---|---|",
    ]
    for r in o["rows"]:
        mark = r["why"] or ""
        out.append(
            f"| {r['op']} | {r['pass']} | {_num(r['a_max_abs'])} | {_num(r['b_max_abs'])} "
            f"| {_num(r['ratio'], '.3g')} | {mark} |"
        )
    return [*out, ""]


def _curve_section(c: Mapping[str, Any], png: str | None) -> list[str]:
    out = ["## Loss curve against the recorded one", ""]
    if c.get("status") != "compared":
        why = f" ({c['why']})" if c.get("why") else ""
        return [*out, f"Not compared: {c.get('status', 'not run')}{why}.", ""]
    verdict = "AGREE" if c["agree"] else "DIFFER"
    at = (  # the recipe's own layout ran out of memory here: the curve is the layout's
        f" (here at {c['layout']}, the same batch in more steps)" if c.get("layout") else ""
    )
    out.append(
        f"At the recorded seed{at}, over {c['common_steps']} common steps: **{verdict}**: "
        f"{c['verdict']}; final relative difference {_num(c['final_rel_diff'], '.3g')}, "
        f"correlation {_num(c['correlation'], '.4f')}."
    )
    if png:
        out += ["", f"![recorded and here]({png})"]
    return [*out, ""]


def _retune_section(result: Mapping[str, Any]) -> list[str]:
    kc = result["knob_classes"]
    if kc["hardware-bound"] or kc["portable"]:
        line = (
            f"Hardware-bound: {', '.join(kc['hardware-bound']) or 'none'}; "
            f"portable: {', '.join(kc['portable']) or 'none'}."
        )
    else:  # nothing to class: the recipe does not say what its study searched
        line = (
            "Not classed: the recipe does not record which knobs its study searched "
            "(`source.searched`) and sets no environment knob."
        )
    out = ["## Knobs", "", line]
    if result.get("inert_env"):
        out.append(f"Cannot act here (dropped): {', '.join(result['inert_env'])}.")
    plan = result.get("retune")
    if plan:
        listed = ", ".join(f"{k} ({plan['why'][k]})" for k in plan["knobs"])
        out += ["", "To re-tune: " + (listed or "no hardware-bound knob searched")]
        if plan.get("tie"):  # the defaults by a tie that hold here: what the re-tune tries
            out.append(plan["note"])
        done = plan.get("result")
        start = (  # a tie's: the first choice, then the neighbours (the recipe is the baseline)
            "its first choice and Pareto neighbours" if plan.get("tie") else "the recipe"
        )
        if done and done.get("recipe") is None:
            out.append(
                f"Re-tuned by a study of {done['trials']} trial(s) (the source space has "
                f"{done['source_trials']}), warm-started from {start}: nothing held here "
                f"({done.get('failed')})."
            )
        elif done:
            out.append(
                f"Re-tuned by a study of {done['trials']} trial(s) (the source space has "
                f"{done['source_trials']}), warm-started from {start}: `{done['recipe']}` "
                f"({', '.join(f'{k}={v}' for k, v in done['knobs'].items())})."
            )
        if done and done.get("clamped"):
            out.append(
                "The recipe's values outside the space's bounds were moved into them for its "
                f"warm start: {', '.join(done['clamped'])}."
            )
        elif plan.get("unfit"):  # given the space, but it can only run out of memory here
            out.append(f"Not run: {plan['unfit']}.")
        elif not done:  # not run (no `--space`): how to run it
            out.append(f"Command: `{plan['command']}`" if plan.get("command") else "")
            out.append(plan.get("note", ""))
    return [*out, ""]


def _compute_section(c: Mapping[str, Any]) -> list[str]:
    out = [
        "## Compute spent",
        "",
        f"This check: {c['samples']:,} samples over {c['probes']} probe(s) "
        f"({c['probe_wall_s']:.0f} s of probes, {c['audit_wall_s']:.0f} s of op audit).",
    ]
    if c.get("retune_samples"):
        out.append(f"The re-tune: {c['retune_samples']:,} samples.")
    study = c.get("study_samples")
    if study:
        spent = c["samples"] + int(c.get("retune_samples") or 0)
        what = "this check and its re-tune" if c.get("retune_samples") else "this check"
        out.append(
            f"The source study spent {study:,} samples: {what} cost {spent / study:.0%} of it."
        )
    else:
        out.append("The source study's compute is not recorded with the recipe.")
    return [*out, ""]


def _cell(v: Any) -> str:
    text = "-" if v is None else str(v)
    return text.replace("|", "\\|")[:80]


def _num(v: Any, fmt: str = ".2e") -> str:
    return "-" if v is None else format(float(v), fmt)


def names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(r["field"]) for r in rows]
