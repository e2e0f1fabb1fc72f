"""The study: Optuna decides, Ray runs the probes, the driver records every trial in MLflow.

`run(options)` (`driver`) is the whole job. Optuna owns the search state in an RDB storage
(`storage`; an SQLite file in the study folder by default), so a study survives the driver and
resumes (`resume`): trials that were running when the driver died are run again under the same
Optuna trial number, and a trial that finished is never run twice. Ray runs the trials as
tasks (`adapter` asks Optuna for the next whenever a worker is free; `session`; the worker side,
the one job runner of the screen, the rungs and the verification, is `workers`); each trial's
probe is a process of its own (`autotune.process.launcher`: forked by the worker's zygote, or a
fresh `python -m autotune.process.entry`) whose environment holds the trial's environment knobs
before torch starts, and which is killed when it outlives its time limit. The driver is the
only writer to MLflow (`writer`).

Outcomes: `complete` (feasible or not by the constraints), `diverged` (a measured, infeasible
result the sampler learns from), `oom` (infeasible: tells the sampler that region does not
fit), `failed` (an exception, a timeout, a crash, a killed process: recorded with its cause and
the tail of its log; Optuna state FAIL); one enum, `autotune.probe.outcome.Outcome`.

The other modules: `records` (a trial's record), `attrs` (the keys autotune keeps in Optuna),
`folder` (the study folder's files), `options`, `objectives` (directions, values, constraints,
the sampler), `progress`, `verification` (the best candidates re-run over seeds), `summary`,
`improvement` (against the baseline at the decided length), `pick`, `warmstart`, `find` (an
existing study).
"""

from autotune.study.driver import check_workload, run
from autotune.study.find import find_study
from autotune.study.importance import importances
from autotune.study.objectives import (
    STAND_IN_MARGIN,
    conditional,
    constraint_names,
    constraints_of,
    directions,
    make_sampler,
    name_metrics,
    sampler_seed,
    stand_ins,
    suggest,
    trial_setup,
    vacuous,
    values_of,
)
from autotune.study.opening import open_study
from autotune.study.options import (
    STUDIES_DIR,
    StudyOptions,
    StudyResult,
    WarmStart,
    study_dir_for,
)
from autotune.study.progress import Progress, eta_s
from autotune.study.records import (
    complete_outcome,
    count_finished,
    read_outcome,
    tell,
    write_outcome,
)
from autotune.study.session import plan_resources
from autotune.study.storage import open_storage, storage_url
from autotune.study.summary import pareto_front, summarize
from autotune.study.summary_text import format_summary
from autotune.study.warmstart import load_warm_start, warm_params

__all__ = [
    "STAND_IN_MARGIN",
    "STUDIES_DIR",
    "Progress",
    "StudyOptions",
    "StudyResult",
    "WarmStart",
    "check_workload",
    "complete_outcome",
    "conditional",
    "constraint_names",
    "constraints_of",
    "count_finished",
    "directions",
    "eta_s",
    "find_study",
    "format_summary",
    "importances",
    "load_warm_start",
    "make_sampler",
    "name_metrics",
    "open_storage",
    "open_study",
    "pareto_front",
    "plan_resources",
    "read_outcome",
    "run",
    "sampler_seed",
    "stand_ins",
    "storage_url",
    "study_dir_for",
    "suggest",
    "summarize",
    "tell",
    "trial_setup",
    "vacuous",
    "values_of",
    "warm_params",
    "write_outcome",
]
