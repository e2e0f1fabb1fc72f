"""The study's runs in MLflow: the experiment, the parent run of a study, a child run per trial
and per verification.

- experiment = the study name;
- parent run (tags `autotune.role=study`, `autotune.study=<name>`): the study's settings as params,
  `space.yaml`, and at the end the summary (`autotune.tracking.summary`);
- child run per trial (`trial-0007`, `trial-0000-baseline`): knobs as params, the probe's summary
  metrics, the step series as metric histories, fingerprint tags and artifacts. The tag
  `autotune.logged=true` is written last: a child without it was cut short and is logged again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune.knobs import clip_text
from autotune.numbers import finite

if TYPE_CHECKING:
    from mlflow.entities import Metric, Run
    from mlflow.tracking import MlflowClient

from autotune.probe.outcome import Outcome
from autotune.tracking.connection import one_line
from autotune.tracking.series import series_metrics
from autotune.tracking.values import (
    bool_str,
    clean_key,
    clean_params,
    clean_tags,
    log_entities,
    log_metrics,
    to_json,
)

log = logging.getLogger(__name__)


TAG_ROLE = "autotune.role"


TAG_STUDY = "autotune.study"


TAG_TRIAL_NUMBER = "autotune.trial_number"


TAG_LOGGED = "autotune.logged"


TAG_PARENT = "mlflow.parentRunId"


TAG_VERIFIED_TRIAL = "autotune.verified_trial"
TAG_CONFIRMATION = "autotune.confirmation"  # a verification run of a confirmation (`study.confirm`)


TAG_SCRIPT_SHA256 = "autotune.script_sha256"
"""On a trial's run: the SHA-256 of the training script it ran, as the probe read it."""


TAG_DRIVER_FP = "autotune.fp.driver_hash"
"""On the study's run: the fingerprint hash of the node the driver ran on."""

#: On the verification run of the baseline's yardstick seeds (its screen at the verification
#: seeds, in a study with rungs): `true`.
TAG_YARDSTICK = "autotune.yardstick"


ROLE_VERIFICATION = "verification"


# Summary fields logged as params of a trial (how the probe actually ran).
DERIVED_PARAMS = (
    "effective_batch",
    "micro_batch",
    "accum_steps",
    "precision",
    "workload",
    "size",
    "steps_planned",
    "world_size",  # DDP probes (autotune.process.supervisor)
    "oom_retried",
)


def search_all(client: MlflowClient, experiment_id: str, filter_string: str) -> list[Run]:
    runs: list[Run] = []
    token: str | None = None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=filter_string,
            max_results=1000,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def study_runs(client: MlflowClient, experiment_id: str, study_name: str) -> list[Run]:
    # The study name is compared here, not in the filter string, so any name needs no quoting.
    runs = search_all(client, experiment_id, f"tags.`{TAG_ROLE}` = 'study'")
    return [run for run in runs if run.data.tags.get(TAG_STUDY) == study_name]


def ensure_study_run(
    client: MlflowClient,
    experiment_id: str,
    study_name: str,
    *,
    space_yaml: str,
    params: dict[str, Any],
    tags: dict[str, str],
    run_id: str | None = None,
) -> str:
    """The study's parent run: `run_id`, the run this study logged to before (set RUNNING
    again), when it is still in this experiment; else a new one. Not found by the study's
    name: a new study of a name used before (its folder removed, or another folder) gets runs
    of its own instead of logging beside the old study's trials.

    A new run gets `params`, `tags` and the `space.yaml` artifact. On an existing run the tags are
    set again and only params it does not have yet are logged (MLflow params are immutable).
    """
    from mlflow.entities import RunStatus

    run = _own_run(client, experiment_id, run_id)
    cleaned_params = clean_params(params)
    run_tags = {**{k: str(v) for k, v in tags.items()}, TAG_ROLE: "study", TAG_STUDY: study_name}
    if run is not None:
        found = str(run.info.run_id)
        client.update_run(found, status=RunStatus.to_string(RunStatus.RUNNING))
        new_params = {k: v for k, v in cleaned_params.items() if k not in run.data.params}
        log_entities(client, found, params=new_params, tags=run_tags)
        return found
    made = client.create_run(experiment_id, run_name=study_name, tags=clean_tags(run_tags))
    log_entities(client, made.info.run_id, params=cleaned_params)
    client.log_text(made.info.run_id, space_yaml, "space.yaml")
    return str(made.info.run_id)


def _own_run(client: MlflowClient, experiment_id: str, run_id: str | None) -> Run | None:
    """The study run `run_id` when it exists, is live and is a study run of `experiment_id`."""
    if not run_id:
        return None
    try:
        run = client.get_run(run_id)
    except Exception:  # not in this store (another tracking URI than before), or gone
        return None
    live = run.info.lifecycle_stage == "active" and run.data.tags.get(TAG_ROLE) == "study"
    return run if live and str(run.info.experiment_id) == str(experiment_id) else None


def find_study_run(client: MlflowClient, study_name: str) -> tuple[str, str] | None:
    """(experiment id, parent run id) of a study logged before, or None."""
    experiment = client.get_experiment_by_name(study_name)
    if experiment is None or experiment.lifecycle_stage == "deleted":
        return None
    experiment_id = str(experiment.experiment_id)
    runs = study_runs(client, experiment_id, study_name)
    return (experiment_id, str(runs[0].info.run_id)) if runs else None


def set_study_status(client: MlflowClient, parent_run_id: str, status: str) -> None:
    """End the parent run with `status` (FINISHED, FAILED, KILLED), e.g. when the study stops."""
    client.set_terminated(parent_run_id, status=status)


def end_running(client: MlflowClient, experiment_id: str, study_name: str, status: str) -> int:
    """End with `status` (KILLED: a stopped study) every run of the study still RUNNING: its
    own, and a trial's, rung's or verification's cut short while it was logged. How many."""
    runs = search_all(client, experiment_id, "attributes.status = 'RUNNING'")
    ours = [r for r in runs if r.data.tags.get(TAG_STUDY) == study_name]
    for run in ours:
        client.set_terminated(run.info.run_id, status=status)
    return len(ours)


def child_runs(client: MlflowClient, experiment_id: str, parent_run_id: str) -> list[Run]:
    return search_all(client, experiment_id, f"tags.`{TAG_PARENT}` = '{parent_run_id}'")


def trial_number(run: Run) -> int | None:
    try:
        return int(run.data.tags.get(TAG_TRIAL_NUMBER, ""))
    except ValueError:
        return None


def is_complete(run: Run) -> bool:
    return run.data.tags.get(TAG_LOGGED) == "true"


def logged_trials(client: MlflowClient, experiment_id: str, parent_run_id: str) -> set[int]:
    """Trial numbers that have a completely logged child run of `parent_run_id`.

    Child runs without the `autotune.logged=true` marker (the driver died while logging them) are
    deleted, so the trial can be logged again. Call it when a study starts or resumes.
    """
    numbers: set[int] = set()
    for run in child_runs(client, experiment_id, parent_run_id):
        number = trial_number(run)
        if is_complete(run) and run.data.tags.get(TAG_ROLE) == ROLE_VERIFICATION:
            continue
        if is_complete(run) and number is not None:
            numbers.add(number)
        else:
            log.info("deleting the half-logged MLflow run %s (trial %s)", run.info.run_id, number)
            client.delete_run(run.info.run_id)
    return numbers


def _trial_run_name(number: int, baseline: bool) -> str:
    return f"trial-{number:04d}" + ("-baseline" if baseline else "")


def log_trial(
    client: MlflowClient,
    experiment_id: str,
    parent_run_id: str,
    study_name: str,
    outcome: dict[str, Any],
) -> str:
    """Log one trial as a child run of the study; returns its run id. Idempotent per trial number.

    If a complete child run for `outcome["number"]` exists, its id is returned and nothing is
    written; an incomplete one is deleted and the trial logged afresh.
    """

    number = int(outcome["number"])
    there = _complete_or_cleared(
        client,
        experiment_id,
        f"tags.`{TAG_PARENT}` = '{parent_run_id}' and tags.`{TAG_TRIAL_NUMBER}` = '{number}'",
    )
    if there is not None:
        return there

    summary: dict[str, Any] = outcome.get("summary") or {}
    wall_s = finite(outcome.get("wall_s"))
    now_ms = int(time.time() * 1000)
    start_ms = now_ms - int(wall_s * 1000) if wall_s is not None and wall_s > 0 else now_ms

    run = client.create_run(
        experiment_id,
        start_time=start_ms,
        run_name=_trial_run_name(number, bool(outcome.get("baseline"))),
        tags={TAG_PARENT: parent_run_id, TAG_STUDY: study_name, TAG_TRIAL_NUMBER: str(number)},
    )
    run_id = str(run.info.run_id)

    log_entities(client, run_id, tags=_trial_tags(study_name, outcome, summary))
    _log_trial_artifacts(client, run_id, outcome, summary)
    _log_and_close(client, run_id, outcome, summary, now_ms)
    return run_id


def _complete_or_cleared(
    client: MlflowClient, experiment_id: str, filter_string: str
) -> str | None:
    """The id of a complete run the filter finds; incomplete ones (cut short) are deleted, so
    that the caller logs the run afresh."""
    found = search_all(client, experiment_id, filter_string)
    for run in found:
        if is_complete(run):
            return str(run.info.run_id)
    for run in found:
        client.delete_run(run.info.run_id)
    return None


def _log_and_close(
    client: MlflowClient,
    run_id: str,
    record: Mapping[str, Any],
    summary: Mapping[str, Any],
    now_ms: int,
) -> None:
    """A probe's params, metrics and step series; its status; last, the tag that marks the run
    complete."""
    from mlflow.entities import RunStatus

    log_entities(client, run_id, params=clean_params(trial_params(record, summary)))
    log_metrics(client, run_id, _trial_metrics(record, summary, now_ms))
    names = (summary.get("metrics") or {}).keys()
    partial = record.get("partial") if not summary.get("series") else None
    if isinstance(partial, Mapping):  # a probe that ended without a summary: its steps so far
        series, first = partial.get("series") or {}, int(partial.get("first_step") or 0)
    else:
        series, first = summary.get("series") or {}, 0
    points, tags = series_metrics(series, now_ms, names, first)
    log_metrics(client, run_id, points)
    log_entities(client, run_id, tags=tags)
    failed = str(record.get("outcome") or Outcome.FAILED) in (Outcome.FAILED, Outcome.OOM)
    status = RunStatus.FAILED if failed else RunStatus.FINISHED
    client.set_terminated(run_id, status=RunStatus.to_string(status), end_time=now_ms)
    client.set_tag(run_id, TAG_LOGGED, "true")


def trial_params(outcome: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = dict(outcome.get("knobs") or {})
    ran = summary.get("knobs") or {}  # as the probe resolved them (an unset lr, batch: the run's)
    for name, value in params.items():
        if value is None and ran.get(name) is not None:
            params[name] = ran[name]
    if "clip_policy" in params:  # the clipping as it acted: the policy with its own settings
        params["clip"] = clip_text(params)
    for var, value in (outcome.get("env") or {}).items():
        params[f"env.{var}"] = value
    # As the probe ran (its summary), else as it was set to run (the trial's config, `layout`
    # in its record): a failed DDP trial has no summary, and its run shows its world size too.
    planned = outcome.get("layout") or {}
    for key in DERIVED_PARAMS:
        value = summary.get(key) if summary.get(key) is not None else planned.get(key)
        if value is not None:
            params.setdefault(key, value)
    for r, seen in enumerate(summary.get("rank_env") or ()):  # as each DDP rank read it back
        for var, value in (seen or {}).items():
            params[f"rank{r}.env.{var}"] = "(unset)" if value is None else value
    return params


def _trial_tags(
    study_name: str, outcome: Mapping[str, Any], summary: Mapping[str, Any]
) -> dict[str, str]:
    tags: dict[str, str] = {
        TAG_STUDY: study_name,
        TAG_ROLE: "trial",
        TAG_TRIAL_NUMBER: str(int(outcome["number"])),
        "autotune.outcome": str(outcome.get("outcome") or Outcome.FAILED.value),
        "autotune.baseline": bool_str(outcome.get("baseline")),
        "autotune.feasible": bool_str(outcome.get("feasible")),
    }
    optional = {
        "autotune.cause": outcome.get("cause"),
        "autotune.error": outcome.get("error"),  # a failure's one line (study.records)
        "autotune.node": outcome.get("node"),
        "autotune.device": summary.get("device"),
        "autotune.diverged_at_step": summary.get("diverged_at_step"),
        "autotune.divergence_cause": summary.get("divergence_cause"),
        "autotune.divergence_onset_step": summary.get("divergence_onset_step"),
        "autotune.divergence_spike_count": summary.get("divergence_spike_count"),
        "autotune.source": outcome.get("source"),
        "autotune.script": summary.get("script"),
        TAG_SCRIPT_SHA256: summary.get("script_sha256"),
    }
    tags.update({k: str(v) for k, v in optional.items() if v is not None and v != ""})
    if outcome.get("fingerprint"):
        tags.update(fingerprint_tags(outcome["fingerprint"]))
    return tags


def fingerprint_tags(fp: dict[str, Any]) -> dict[str, str]:
    """Flat tags of a fingerprint from `autotune.fingerprint.tags`; none if that is unavailable."""
    try:
        from autotune import fingerprint
    except ImportError:
        return {}
    make = getattr(fingerprint, "tags", None)
    if make is None:
        return {}
    try:
        return {str(k): str(v) for k, v in make(fp).items()}
    except Exception as exc:  # a bad fingerprint must not lose the trial
        log.warning("fingerprint tags could not be made: %s", one_line(exc))
        return {}


def _trial_metrics(outcome: Mapping[str, Any], summary: Mapping[str, Any], ts: int) -> list[Metric]:
    from mlflow.entities import Metric

    values: dict[str, float] = {}
    for name, value in (summary.get("metrics") or {}).items():
        number = finite(value)
        if number is not None:
            values[str(name)] = number
    for key in ("steps_run", "steps_planned"):
        number = finite(summary.get(key))
        if number is not None:
            values.setdefault(key, number)
    wall_s = finite(outcome.get("wall_s"))
    if wall_s is not None:
        values["wall_s"] = wall_s
    return [Metric(clean_key(k), v, ts, 0) for k, v in values.items()]


def _log_trial_artifacts(
    client: MlflowClient, run_id: str, outcome: Mapping[str, Any], summary: Mapping[str, Any]
) -> None:
    if outcome.get("fingerprint"):
        client.log_text(run_id, to_json(outcome["fingerprint"]), "fingerprint.json")
    if summary.get("anomaly"):
        client.log_text(run_id, to_json(summary["anomaly"]), "anomaly.json")
    if outcome.get("outcome") != Outcome.COMPLETE:
        if outcome.get("log_tail"):
            client.log_text(run_id, str(outcome["log_tail"]), "log_tail.txt")
        if outcome.get("error"):
            client.log_text(run_id, str(outcome["error"]), "error.txt")
    record = {k: v for k, v in outcome.items() if k != "partial"}  # its series: metrics
    if record.get("summary"):
        record["summary"] = {k: v for k, v in record["summary"].items() if k != "series"}
    client.log_text(run_id, to_json(record), "trial.json")


def trial_run_ids(client: MlflowClient, experiment_id: str, parent_run_id: str) -> dict[int, str]:
    """Trial number -> run id of its completely logged child run."""
    out: dict[int, str] = {}
    for run in child_runs(client, experiment_id, parent_run_id):
        number = trial_number(run)
        if number is not None and is_complete(run):
            out[number] = str(run.info.run_id)
    return out


TAG_RUNG = "autotune.rung"
TAG_RUNG_STEPS = "autotune.steps"


def logged_rungs(
    client: MlflowClient, experiment_id: str, trial_runs: Mapping[int, str]
) -> set[tuple[int, int]]:
    """(trial number, steps) of every completely logged rung run nested under `trial_runs`
    (trial number -> its run id): one search of the experiment's rung runs."""
    owner = {run_id: number for number, run_id in trial_runs.items()}
    out: set[tuple[int, int]] = set()
    for run in search_all(client, experiment_id, f"tags.`{TAG_ROLE}` = 'rung'"):
        number = owner.get(run.data.tags.get(TAG_PARENT, ""))
        steps = run.data.tags.get(TAG_RUNG_STEPS, "")
        if number is not None and steps.isdigit() and is_complete(run):
            out.add((number, int(steps)))
    return out


def log_rung(
    client: MlflowClient,
    experiment_id: str,
    trial_run_id: str,
    study_name: str,
    record: dict[str, Any],
) -> str:
    """One promoted probe (a rung record, see `autotune.study.rung_phase`) as a run nested under
    its trial's run, named `trial-0007@340`; idempotent per (trial run, rung, steps)."""

    rung, steps = int(record["rung"]), int(record["steps"])
    there = _complete_or_cleared(
        client,
        experiment_id,
        f"tags.`{TAG_PARENT}` = '{trial_run_id}' and tags.`{TAG_RUNG}` = '{rung}' "
        f"and tags.`{TAG_RUNG_STEPS}` = '{steps}'",
    )
    if there is not None:
        return there
    summary: dict[str, Any] = record.get("summary") or {}
    now_ms = int(time.time() * 1000)
    tags = _trial_tags(study_name, record, summary)
    tags.update(
        {
            TAG_ROLE: "rung",
            TAG_PARENT: trial_run_id,
            TAG_RUNG: str(rung),
            TAG_RUNG_STEPS: str(steps),
            # the steps it continued from (0: it started over; `why` says why)
            "autotune.resumed_from_step": str(int(summary.get("resumed_from_step") or 0)),
        }
    )
    why = (summary.get("continuation") or {}).get("why")
    if why:
        tags["autotune.restart_reason"] = str(why)[:500]
    if record.get("filled"):  # promoted beyond the quota, for a worker that would idle
        tags["autotune.filled"] = "true"
    run = client.create_run(
        experiment_id,
        start_time=now_ms,
        run_name=f"trial-{int(record['number']):04d}@{steps}",
        tags=tags,
    )
    run_id = str(run.info.run_id)
    _log_and_close(client, run_id, record, summary, now_ms)
    return run_id
