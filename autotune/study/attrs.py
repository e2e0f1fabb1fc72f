"""The keys autotune keeps in Optuna's storage: a study's and its trials' user attributes, named
once here (every key is `autotune.<name>`), with typed readers for the ones most read.

A trial's attributes are its record as the driver told Optuna (`records.tell`) and what the
adapter gave it (its knobs and environment, whether it is the baseline, where it came from). A
study's hold the space, the MLflow run, the rungs and their records, the verifications and what
the study decided. Nothing here imports Optuna: the readers take any trial or study that has
`user_attrs`.
"""

from __future__ import annotations

from typing import Any

from autotune.probe.outcome import Outcome

# A trial's attributes.
BASELINE = "autotune.baseline"  # trial 0, PyTorch's defaults for the searched knobs
KNOBS = "autotune.knobs"  # every knob, its defaults resolved (the probe's own when it ran)
ENV = "autotune.env"  # the environment knobs it ran with
SOURCE = "autotune.source"  # where a warm-started trial came from (a sentence)
SOURCE_FP = "autotune.source_fp"  # that source's fingerprint hash
OUTCOME = "autotune.outcome"  # complete, diverged, oom or failed
CAUSE = "autotune.cause"
ERROR = "autotune.error"
METRICS = "autotune.metrics"  # the probe's summary metrics at the screen
FEASIBLE = "autotune.feasible"  # as Optuna was told (see SCREEN_FEASIBLE)
FP_HASH = "autotune.fp_hash"
NODE = "autotune.node"
RAY_NODE = "autotune.ray_node"  # the Ray node id: where its probe state lives
WALL_S = "autotune.wall_s"
EFFECTIVE_BATCH = "autotune.effective_batch"
DIVERGED_AT_STEP = "autotune.diverged_at_step"
SAMPLES_SEEN = "autotune.samples_seen"
STEPS_RUN = "autotune.steps_run"
STEPS_PLANNED = "autotune.steps_planned"
CONSTRAINTS = "autotune.constraints"
CONSTRAINT_NAMES = "autotune.constraint_names"
LOSS_HASH = "autotune.loss_hash"  # a hash of its loss series (`identical.loss_hash`)
SCRIPT_APPLIED = "autotune.script_applied"  # a script's: what applied its knobs

# A study's attributes.
SPACE = "autotune.space"  # the space's fingerprint: a resumed study must keep it
HOME = "autotune.home"  # {"host", "folder"}: where its records and MLflow runs are (`home`)
SPACE_YAML = "autotune.space_yaml"  # the space itself, to show or export the study
DROPPED = "autotune.dropped"  # {knob: why}: what conditioning dropped, never searched nor set
OBJECTIVES = "autotune.objectives"
MLFLOW = "autotune.mlflow"  # {uri, experiment_id, parent_run_id}
WARM_START = "autotune.warm_start"
RUNGS = "autotune.rungs"  # [{rung, steps, numbers}], rung by rung
DECIDED = "autotune.decided"  # what the rungs decided ({target_steps, ...})
SCREEN_FEASIBLE = "autotune.screen_feasible"
"""{trial number: feasible}, every screened trial judged again once the screen was over
(`rung_phase.rejudge_screen`): a trial told before the baseline had finished (several at once)
was told its constraints relative to the baseline vacuously."""
CLIP_NORM_AUTO = "autotune.clip_norm_auto"  # `clip_norm: auto`: the baseline's norms measured
SCREEN_YARDSTICK = "autotune.screen_yardstick"  # the baseline's screen over the verify seeds
RUNG_PREFIX = "autotune.rung."  # + "<number>.<steps>": a promoted probe's slim record
CONFIRMED = "autotune.confirmed"  # a `better` among several, judged again with fresh seeds
VERIFIED_PREFIX = "autotune.verified."  # + "<number>": a candidate's verification


def rung_key(number: int, steps: int) -> str:
    """The study attribute of trial `number`'s record at `steps` (a rung)."""
    return f"{RUNG_PREFIX}{number}.{steps}"


def verified_key(number: int) -> str:
    """The study attribute of trial `number`'s verification."""
    return f"{VERIFIED_PREFIX}{number}"


def rung_of(key: str) -> tuple[int, int] | None:
    """The trial number and steps of a study attribute that `rung_key` named; None for any
    other key."""
    if not key.startswith(RUNG_PREFIX):
        return None
    number, _, steps = key[len(RUNG_PREFIX) :].partition(".")
    return (int(number), int(steps)) if number.isdigit() and steps.isdigit() else None


def verified_of(key: str) -> int | None:
    """The trial number of a study attribute that `verified_key` named; None for any other."""
    if not key.startswith(VERIFIED_PREFIX):
        return None
    number = key[len(VERIFIED_PREFIX) :]
    return int(number) if number.isdigit() else None


def is_baseline(trial: Any) -> bool:
    return bool(trial.user_attrs.get(BASELINE))


def outcome(trial: Any) -> str:
    """The trial's outcome as the driver told it (`failed` when none was stored)."""
    return str(trial.user_attrs.get(OUTCOME, Outcome.FAILED.value))


def metrics(trial: Any) -> dict[str, Any]:
    """The trial's screen metrics (empty when it has none)."""
    return dict(trial.user_attrs.get(METRICS) or {})


def knobs(trial: Any) -> dict[str, Any]:
    """The trial's knobs (empty when none were stored)."""
    return dict(trial.user_attrs.get(KNOBS) or {})


def env(trial: Any) -> dict[str, Any]:
    """The trial's environment knobs (empty when none were stored)."""
    return dict(trial.user_attrs.get(ENV) or {})


def dropped(study: Any) -> dict[str, str]:
    """The knobs the study's last session dropped (they cannot act on its machine), with why;
    empty for a study made before this was kept."""
    return dict(study.user_attrs.get(DROPPED) or {})


def decided(study: Any) -> dict[str, Any]:
    """What the study decided so far (empty before the rungs did)."""
    return dict(study.user_attrs.get(DECIDED) or {})
