"""Everything MLflow: the connection, the study's runs, the summary, its plots and the UI.

The driver is the only MLflow writer. Every function here takes an explicit
`mlflow.tracking.MlflowClient` and never touches MLflow's global active-run state, so the driver
can log trial N while trial N+1 runs. mlflow is imported inside the functions: importing this
package is cheap (`plots` and `ui` are imported only where used). It must not import ray.

`connection` (URI, redaction, a checked client), `runs` (experiment, study run, trial and
verification runs), `sqlite_runs` (the trials' runs read from an SQLite store without MLflow,
for `export`), `summary` (the study's summary artifacts), `values` (MLflow's limits), `plots`,
`ui` (`autotune ui`).
"""

from autotune.tracking.connection import (
    DEFAULT_URI,
    check_uri,
    connect,
    folder_problem,
    make_folder,
    redact,
    resolve_uri,
    sqlite_path,
)
from autotune.tracking.experiment import EXPERIMENT_KIND, TAG_EXPERIMENT_KIND, ensure_experiment
from autotune.tracking.runs import (
    ROLE_VERIFICATION,
    TAG_CONFIRMATION,
    TAG_DRIVER_FP,
    TAG_LOGGED,
    TAG_PARENT,
    TAG_ROLE,
    TAG_STUDY,
    TAG_TRIAL_NUMBER,
    TAG_VERIFIED_TRIAL,
    end_running,
    ensure_study_run,
    find_study_run,
    fingerprint_tags,
    log_trial,
    logged_rungs,
    logged_trials,
    set_study_status,
    trial_params,
    trial_run_ids,
)
from autotune.tracking.summary import log_study_summary
from autotune.tracking.verification_runs import log_verification

__all__ = [
    "DEFAULT_URI",
    "EXPERIMENT_KIND",
    "ROLE_VERIFICATION",
    "TAG_CONFIRMATION",
    "TAG_DRIVER_FP",
    "TAG_EXPERIMENT_KIND",
    "TAG_LOGGED",
    "TAG_PARENT",
    "TAG_ROLE",
    "TAG_STUDY",
    "TAG_TRIAL_NUMBER",
    "TAG_VERIFIED_TRIAL",
    "check_uri",
    "connect",
    "end_running",
    "ensure_experiment",
    "ensure_study_run",
    "find_study_run",
    "fingerprint_tags",
    "folder_problem",
    "log_study_summary",
    "log_trial",
    "log_verification",
    "logged_rungs",
    "logged_trials",
    "make_folder",
    "redact",
    "resolve_uri",
    "set_study_status",
    "sqlite_path",
    "trial_params",
    "trial_run_ids",
]
