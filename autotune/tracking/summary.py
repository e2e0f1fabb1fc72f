"""The study's summary in MLflow: the baseline and best metrics on the parent run, the Pareto
table (CSV and Markdown) and the plots."""

from __future__ import annotations

import csv
import io
import json
import math
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.numbers import finite

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

from autotune.probe.outcome import Outcome
from autotune.tracking.connection import one_line
from autotune.tracking.runs import log
from autotune.tracking.values import clean_key, json_safe, log_entities, log_metrics, plain, to_json


def log_study_summary(
    client: MlflowClient,
    parent_run_id: str,
    summary: dict[str, Any],
    outcomes: list[dict[str, Any]],
    importances: Mapping[str, Mapping[str, float] | str] | None,
    decided: list[dict[str, Any]] | None = None,
) -> None:
    """Log the end of a study on its parent run, then set the run FINISHED.

    `outcomes`: the trials' screen records; `decided`: their records at the length the front
    was decided at (`summary["pareto_steps"]`), when that is a rung above the screen: what the
    Pareto and loss plots draw, as the front in the summary is of those values.

    Metrics `best.<m>`, `baseline.<m>`, `change_pct.<m>` at the length the study decided at and
    the screen's under `screen.` (`_decided_figures`, `_screen_figures`), `trials.<outcome>`
    counts (the screen's) and `rung_<steps>.<outcome>` and `rung_<steps>.trials` (each rung's
    above it: `summary["rung_counts"]`), and the compute spent (`compute_samples_total`,
    `compute_vs_today`, ...); tags for the decided length and the verdict, the pick
    (`summary["pick"]` if given, else the first Pareto entry) and the front; the Pareto front as
    an MLflow table (`pareto_front.json`) plus `pareto_front.csv` / `.md`; `summary.json`; and
    the plots `plots/pareto_front.png`, `plots/importances.png`, `plots/loss_curves.png`.
    """
    from mlflow.entities import Metric, RunStatus

    ts = int(time.time() * 1000)
    objectives: list[dict[str, Any]] = list(summary.get("objectives") or [])
    pareto: list[dict[str, Any]] = list(summary.get("pareto") or [])
    baseline = summary.get("baseline") or None

    values, decided_tags = _decided_figures(summary)
    screen_values, screen_tags = _screen_figures(summary)
    values.update(screen_values)
    decided_tags.update(screen_tags)
    for name, count in _counts(outcomes, summary.get("counts") or {}).items():
        values[f"trials.{name}"] = float(count)
    for rung in summary.get("rung_counts") or []:  # the probes each rung above the screen ran
        for name, count in rung.items():
            if name != "steps":
                values[f"rung_{rung['steps']}.{name}"] = float(count)
    values.update(_compute_metrics(summary.get("compute") or {}))
    log_metrics(client, parent_run_id, [Metric(clean_key(k), v, ts, 0) for k, v in values.items()])

    tags: dict[str, str] = {
        "autotune.objectives": ",".join(
            f"{o.get('metric')}:{o.get('direction', 'minimize')}" for o in objectives
        ),
        "autotune.pareto.trials": ",".join(str(p.get("number")) for p in pareto),
        "autotune.pareto.size": str(len(pareto)),
    }
    tags.update(decided_tags)
    if baseline and baseline.get("number") is not None:
        tags["autotune.baseline.trial"] = str(baseline["number"])
    pick = _pick(summary, pareto)
    if pick is not None:
        tags["autotune.pick.trial"] = str(pick.get("number"))
        for knob, value in (pick.get("knobs") or {}).items():
            tags[f"autotune.pick.knob.{knob}"] = str(value)
    if summary.get("dropped_knobs"):
        tags["autotune.dropped_knobs"] = to_json(summary["dropped_knobs"])
    log_entities(client, parent_run_id, tags=tags)

    client.log_text(parent_run_id, to_json(summary), "summary.json")
    if importances:
        client.log_text(parent_run_id, to_json(importances), "importances.json")
    columns = _pareto_columns(objectives, pareto)
    _log_table(client, parent_run_id, columns, "pareto_front.json")
    client.log_text(parent_run_id, _csv(columns), "pareto_front.csv")
    client.log_text(parent_run_id, _markdown(columns), "pareto_front.md")

    drawn = outcomes if decided is None else decided
    _log_plots(
        client, parent_run_id, summary, drawn, importances, _lengths(summary, outcomes, decided)
    )
    client.set_terminated(parent_run_id, status=RunStatus.to_string(RunStatus.FINISHED))


def _decided_figures(summary: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """The pick against the baseline at the length the study decided at, as the summary prints
    it (`improvement`: verified means where both were verified there, else their runs at that
    length): metrics `best.<objective>` (the pick's value), `baseline.<objective>`,
    `change_pct.<objective>` (none within the baseline's noise: `study.one_run`) and
    `decided_steps`; tags `autotune.decided_steps`,
    `autotune.compared` (verified, rung or screen) and `autotune.verdict` (the paired verdict,
    as printed: BETTER, NO DETECTABLE DIFFERENCE, ...). All at one length: a screen's best beside
    a verified change read as figures that contradict each other."""
    values: dict[str, float] = {}
    tags: dict[str, str] = {}
    steps = finite(summary.get("pareto_steps") or (summary.get("decided") or {}).get("steps"))
    if steps is not None:
        values["decided_steps"] = steps
        tags["autotune.decided_steps"] = str(int(steps))
    sources = set()
    for name, row in (summary.get("improvement") or {}).items():
        for part in ("best", "baseline", "change_pct"):
            value = finite((row or {}).get(part))
            if value is not None and not (part == "change_pct" and (row or {}).get("within_noise")):
                values[f"{part}.{name}"] = value
        if (row or {}).get("source"):
            sources.add(str(row["source"]))
        note = _change_note(row or {})
        if note:
            tags[f"autotune.change_pct.{name}"] = note
    if sources:
        tags["autotune.compared"] = ",".join(sorted(sources))
    verdict = (summary.get("vs_baseline") or {}).get("verdict")
    if verdict:
        tags["autotune.verdict"] = str(verdict).upper()
    return values, tags


def _change_note(row: Mapping[str, Any]) -> str | None:
    """Why `change_pct.<m>` is missing or is not the change between `best.<m>` and
    `baseline.<m>` (verified means, each over its own seeds): its seeds were timed apart (the
    paired verdict does not compare them: no metric), or it is over the seeds both have a
    value on (`study.paired_change`), with the two means there; of one run against one run,
    what noise it was measured against (`_noise_note`: within the baseline's, no metric).
    None otherwise."""
    if row.get("change_pct") is None:
        return "timed apart: not compared" if row.get("timed_apart") else None
    noise = _noise_note(row)
    if noise:
        return noise
    seeds, best, base = row.get("paired_seeds"), row.get("best_paired"), row.get("baseline_paired")
    if seeds is None or best is None or base is None:
        return None
    same = math.isclose(best, row.get("best") or 0.0, rel_tol=1e-9) and math.isclose(
        base, row.get("baseline") or 0.0, rel_tol=1e-9
    )
    if same and not row.get("timed_apart") and not row.get("left_out"):
        return None
    return f"paired over seeds {list(seeds)}: pick {best:.4g}, baseline {base:.4g} there"


def _noise_note(row: Mapping[str, Any]) -> str | None:
    """What a percentage of one run against one run was measured against (the summary's
    `baseline_noise.note`); within the baseline's noise its metric is not logged, and the tag
    keeps the percentage beside why it is no difference."""
    note = (row.get("baseline_noise") or {}).get("note")
    if not note:
        return None
    pct = finite(row.get("change_pct"))
    return f"{pct:+.1f}%, {note}" if row.get("within_noise") and pct is not None else str(note)


def _screen_figures(summary: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """The screen's figures (`probe.steps`), under `screen.`: the baseline's screen run
    (`screen.baseline.<m>`, every metric), the best feasible value per objective
    (`screen.best.<m>`) and, when the study decided at another length, its change against the
    baseline's screen (`screen.change_pct.<m>`: none within the baseline's noise), with the
    tag `autotune.screen.change_pct.<m>` saying what noise it was measured against."""
    values: dict[str, float] = {}
    tags: dict[str, str] = {}
    for name, value in ((summary.get("baseline") or {}).get("metrics") or {}).items():
        if finite(value) is not None:
            values[f"screen.baseline.{name}"] = float(value)
    for name, value in (summary.get("best") or {}).items():
        if finite(value) is not None:
            values[f"screen.best.{name}"] = float(value)
    for name, change in (summary.get("screen_improvement") or {}).items():
        pct = finite((change or {}).get("change_pct"))
        if pct is not None and not (change or {}).get("within_noise"):
            values[f"screen.change_pct.{name}"] = pct
        note = _noise_note(change or {})
        if note:
            tags[f"autotune.screen.change_pct.{name}"] = note
    return values, tags


def _compute_metrics(compute: Mapping[str, Any]) -> dict[str, float]:
    """The summary's `compute` as metrics: samples per phase, and the two ratios."""
    out: dict[str, float] = {}
    for key in ("screen", "rungs", "verification", "total", "today", "full_length"):
        if finite(compute.get(key)) is not None:
            out[f"compute_samples_{key}"] = float(compute[key])
    for key in ("vs_today", "saved_vs_full"):
        if finite(compute.get(key)) is not None:
            out[f"compute_{key}"] = float(compute[key])
    return out


def _pick(summary: Mapping[str, Any], pareto: list[dict[str, Any]]) -> dict[str, Any] | None:
    pick = summary.get("pick")
    if isinstance(pick, dict):
        return pick
    if pick is not None:
        for entry in pareto:
            if entry.get("number") == pick:
                return entry
        return {"number": pick}
    return pareto[0] if pareto else None


def _counts(outcomes: Iterable[Mapping[str, Any]], given: Mapping[str, Any]) -> dict[str, int]:
    counts = {o.value: 0 for o in (Outcome.COMPLETE, Outcome.DIVERGED, Outcome.FAILED, Outcome.OOM)}
    total = 0
    for outcome in outcomes:
        key = str(outcome.get("outcome") or Outcome.FAILED.value)
        counts[key] = counts.get(key, 0) + 1
        total += 1
    counts["total"] = total
    for key, value in given.items():  # the study's own counts win (e.g. pruned, timeouts)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            counts[str(key)] = int(value)
    return counts


def _pareto_columns(
    objectives: list[dict[str, Any]], pareto: list[dict[str, Any]]
) -> dict[str, list[Any]]:
    metric_names = [str(o.get("metric")) for o in objectives]
    knob_names: list[str] = []
    for entry in pareto:
        for knob in entry.get("knobs") or {}:
            if knob not in knob_names:
                knob_names.append(knob)
    columns: dict[str, list[Any]] = {"trial": []}
    for name in metric_names:
        columns[name] = []
    for knob in knob_names:
        columns[knob] = []
    for entry in pareto:
        columns["trial"].append(entry.get("number"))
        entry_values = list(entry.get("values") or [])
        for i, name in enumerate(metric_names):
            value = entry_values[i] if i < len(entry_values) else None
            if value is None:
                value = (entry.get("metrics") or {}).get(name)
            columns[name].append(plain(value))
        for knob in knob_names:
            columns[knob].append(plain((entry.get("knobs") or {}).get(knob)))
    return columns


def _log_table(
    client: MlflowClient, run_id: str, columns: dict[str, list[Any]], artifact: str
) -> None:
    """An MLflow table artifact that a second summary replaces (log_table would append rows)."""
    existing = {item.path for item in client.list_artifacts(run_id)}
    if artifact not in existing:
        client.log_table(run_id, data=columns, artifact_file=artifact)
        return
    # Same layout as log_table's ("split" orient, no index); the table tag is already set.
    rows = [list(row) for row in zip(*columns.values(), strict=True)]
    text = json.dumps(json_safe({"columns": list(columns), "data": rows}), allow_nan=False)
    client.log_text(run_id, text, artifact)


def _csv(columns: Mapping[str, list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns.keys())
    writer.writerows(zip(*columns.values(), strict=True))
    return out.getvalue()


def _markdown(columns: Mapping[str, list[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.6g}"
        return "" if value is None else str(value).replace("|", "\\|")

    header = list(columns.keys())
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in zip(*columns.values(), strict=True):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "# Pareto front\n\n" + "\n".join(lines) + "\n"


def _log_plots(
    client: MlflowClient,
    run_id: str,
    summary: Mapping[str, Any],
    outcomes: list[dict[str, Any]],
    importances: Mapping[str, Mapping[str, float] | str] | None,
    lengths: tuple[str, str],
) -> None:
    """The plots; `outcomes` are the records of the decided length, `lengths` its title part
    and the note on the trials that did not run that long (`_lengths`)."""
    from autotune.tracking import plots

    objectives = list(summary.get("objectives") or [])
    front = {int(p["number"]) for p in summary.get("pareto") or [] if p.get("number") is not None}
    picked = summary.get("pick")  # a dict once the study picked; nothing is ringed before
    pick = picked.get("number") if isinstance(picked, dict) else None
    length, left_out = lengths
    baseline = summary.get("baseline") or {}
    baseline_number = baseline.get("number")
    if baseline_number is None:
        baseline_number = next((o["number"] for o in outcomes if o.get("baseline")), None)
    jobs: list[tuple[str, Any]] = [
        (
            "plots/pareto_front.png",
            lambda: plots.pareto_figure(
                outcomes, objectives, front, pick=pick, length=length, left_out=left_out
            ),
        ),
        (
            "plots/loss_curves.png",
            lambda: plots.loss_curves_figure(
                outcomes, front, baseline_number, pick=pick, length=length
            ),
        ),
    ]
    if importances:
        jobs.append(("plots/importances.png", lambda: plots.importance_figure(importances)))
    for artifact, make in jobs:
        try:
            figure = make()
            client.log_figure(run_id, figure, artifact, save_kwargs={"dpi": plots.DPI})
        except Exception as exc:  # a plot must not cost the study its summary
            log.warning("could not log %s: %s", artifact, one_line(exc))


def _lengths(
    summary: Mapping[str, Any],
    outcomes: list[dict[str, Any]],
    decided: list[dict[str, Any]] | None,
) -> tuple[str, str]:
    """The plots' length ("at 120 steps", "at the screen's 40 steps") and the note on the trials
    that did not run that long ("3 trials not run 120 steps (not promoted): not drawn")."""
    steps = summary.get("pareto_steps")
    if decided is None:
        return (f"at the screen's {steps} steps" if steps else "at the screen"), ""
    shorter = len({o.get("number") for o in outcomes} - {o.get("number") for o in decided})
    if not shorter:
        return f"at {steps} steps", ""
    trials = f"{shorter} trial{'s' if shorter != 1 else ''}"
    return f"at {steps} steps", f"{trials} not run {steps} steps (not promoted): not drawn"
