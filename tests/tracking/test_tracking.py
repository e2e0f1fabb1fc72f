"""autotune.tracking against a real MLflow SQLite store (no mocks of MLflow)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autotune import tracking
from autotune.errors import TrackingError

SERIES_LEN = 40

# MLflow 3.17's own SQLAlchemy mapping warns on import; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy")


def _summary(loss: list[float], diverged_at: int | None = None) -> dict[str, Any]:
    n = len(loss)
    return {
        "metrics": {"loss_final": loss[-1], "loss_cv": 0.12, "tokens_per_s": 1500.0, "gap": None},
        "series": {
            "loss": loss,
            "grad_norm": [1.0 + 0.01 * i for i in range(n)],
            "lr": [1e-3] * n,
            "scale": [65536.0] * n,
            "clipped": [i % 3 == 0 for i in range(n)],
            "skipped": [False] * n,
            "step_time": [0.0125] * n,  # seconds, as the probe keeps it
        },
        "effective_batch": 64,
        "micro_batch": 16,
        "accum_steps": 4,
        "precision": "fp16",
        "workload": "mlp",
        "size": "tiny",
        "device": "cpu",
        "steps_run": n,
        "steps_planned": SERIES_LEN,
        "divergence_cause": "nonfinite_loss" if diverged_at is not None else None,
        "diverged_at_step": diverged_at,
        "anomaly": {"step": diverged_at, "kind": "nan"} if diverged_at is not None else None,
        "determinism": {"seed": 0},
    }


def _outcome(number: int, kind: str = "complete", **extra: Any) -> dict[str, Any]:
    loss = [2.0 * math.exp(-0.05 * i) for i in range(SERIES_LEN)]
    summary: dict[str, Any] | None = _summary(loss)
    cause = None
    feasible = True
    if kind == "diverged":
        loss = loss[:20] + [float("nan")] * 5
        summary = _summary(loss, diverged_at=20)
        cause, feasible = "nonfinite_loss", False
    elif kind == "failed":
        summary, cause, feasible = None, "exception", False
    outcome = {
        "number": number,
        "outcome": kind,
        "cause": cause,
        "error": "RuntimeError: boom" if kind == "failed" else None,
        "log_tail": "line 1\nline 2\nTraceback: boom\n" if kind != "complete" else "",
        "baseline": number == 0,
        "knobs": {"clip_norm": 1.0, "warmup_steps": 10, "adam_eps": 1e-8},
        "env": {"NCCL_ALGO": "Ring"},
        "params": {"clip_norm": 1.0},
        "summary": summary,
        "fingerprint": {"hash": "abc123def456", "platform": "cpu", "devices": [], "host": {}},
        "values": [0.12, 12.5] if summary is not None and kind == "complete" else None,
        "constraints": [0.0] if feasible else [1.0],
        "feasible": feasible,
        "wall_s": 3.5,
        "node": "node-a",
        "source": None,
    }
    outcome.update(extra)
    return outcome


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One SQLite store for the module: creating its tables takes MLflow several seconds."""
    folder = tmp_path_factory.mktemp("mlflow")
    return tracking.connect(f"sqlite:///{folder}/mlflow.db")


@pytest.fixture
def study(store: Any, request: pytest.FixtureRequest) -> tuple[Any, str, str, str]:
    name = f"study-{request.node.name}"
    experiment_id = tracking.ensure_experiment(store, name)
    parent = tracking.ensure_study_run(
        store,
        experiment_id,
        name,
        space_yaml="name: x\nknobs: {}\n",
        params={"n_trials": 10, "objectives": ["loss_cv", "step_time"]},
        tags={"autotune.fp.driver_hash": "abc"},
    )
    return store, experiment_id, parent, name


def _artifacts(client: Any, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        if item.is_dir:
            found |= _artifacts(client, run_id, item.path)
        else:
            found.add(item.path)
    return found


def _read(client: Any, run_id: str, path: str, dst: Path) -> str:
    local = client.download_artifacts(run_id, path, str(dst))
    return Path(local).read_text()


# --------------------------------------------------------------------------------------------


def test_resolve_uri_makes_sqlite_and_file_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    here = tmp_path.resolve()
    assert tracking.resolve_uri(None) == f"sqlite:///{here}/mlflow.db"
    assert tracking.resolve_uri("sqlite:///sub/t.db") == f"sqlite:///{here}/sub/t.db"
    assert tracking.resolve_uri("sqlite:////abs/t.db") == "sqlite:////abs/t.db"
    assert tracking.resolve_uri("mlruns") == (here / "mlruns").as_uri()
    assert tracking.resolve_uri("file:./mlruns") == (here / "mlruns").as_uri()
    for remote in ("http://127.0.0.1:5000", "https://mlflow.example", "postgresql://u:p@h/db"):
        assert tracking.resolve_uri(remote) == remote
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///from_env.db")
    assert tracking.resolve_uri(None) == f"sqlite:///{here}/from_env.db"
    assert tracking.resolve_uri("http://h:1") == "http://h:1"  # explicit beats the environment


@pytest.mark.parametrize("uri", ["http://127.0.0.1:9", "postgresql://u:p@127.0.0.1:9/db"])
def test_connect_fails_fast_on_unreachable_store(uri: str) -> None:
    start = time.monotonic()
    with pytest.raises(TrackingError) as info:
        tracking.connect(uri)
    assert time.monotonic() - start < 15
    message = str(info.value)
    assert "127.0.0.1:9" in message
    assert "MLFLOW_TRACKING_URI" in message
    assert "u:p@" not in message  # the password is not printed


def test_connect_rejects_unwritable_sqlite_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(TrackingError, match=f"{blocker}/sub does not exist .{blocker} is not a"):
        tracking.connect(f"sqlite:///{blocker}/sub/mlflow.db")


_FIRST_STORE = """
import logging, sys
logging.basicConfig(level=logging.INFO)  # as a user's own logging setup might
from autotune import tracking
import mlflow.store.db.utils
levels = lambda: [logging.getLogger(n).level for n in ("alembic", "mlflow.store.db.utils")]
before = levels()
client = tracking.connect(sys.argv[1])
print([e.name for e in client.search_experiments()])
print(levels() == before)
"""


@pytest.mark.integration
def test_creating_a_new_store_prints_nothing(tmp_path: Path) -> None:
    """A first study creates the SQLite store: MLflow's and alembic's table-creation lines at
    INFO are noise there (in a fresh process, as the CLI is, with MLflow's own log setup)."""
    db = tmp_path / "mlflow.db"
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_STORE, f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["['Default']", "True"]  # created; levels given back
    assert "Creating initial MLflow database tables" not in proc.stderr, proc.stderr
    assert "alembic" not in proc.stderr and "Updating database tables" not in proc.stderr


def test_ensure_experiment_is_idempotent_and_restores(store: Any) -> None:
    first = tracking.ensure_experiment(store, "exp-idem")
    assert tracking.ensure_experiment(store, "exp-idem") == first
    store.delete_experiment(first)
    assert tracking.ensure_experiment(store, "exp-idem") == first
    assert store.get_experiment(first).lifecycle_stage == "active"


def test_experiment_is_of_the_training_kind(store: Any) -> None:
    """MLflow 3's UI opens an experiment of kind custom_model_development on its runs table,
    one without a kind on the GenAI overview: a new experiment has the kind, an old one
    without it gets it, and a kind the user chose is kept."""
    kind = store.get_experiment(tracking.ensure_experiment(store, "exp-kind")).tags
    assert kind["mlflow.experimentKind"] == "custom_model_development"
    old = store.create_experiment("exp-no-kind")
    assert "mlflow.experimentKind" not in store.get_experiment(old).tags
    assert tracking.ensure_experiment(store, "exp-no-kind") == old
    assert store.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"
    genai = {"mlflow.experimentKind": "genai_development"}
    chosen = store.create_experiment("exp-genai", tags=genai)
    tracking.ensure_experiment(store, "exp-genai")
    assert store.get_experiment(chosen).tags["mlflow.experimentKind"] == "genai_development"


def test_ensure_study_run_found_again(study: tuple[Any, str, str, str], tmp_path: Path) -> None:
    client, experiment_id, parent, name = study
    run = client.get_run(parent)
    assert run.info.run_name == name
    assert run.data.params["n_trials"] == "10"
    assert run.data.tags["autotune.role"] == "study"
    assert "space.yaml" in _artifacts(client, parent)
    client.set_terminated(parent, status="KILLED")
    again = tracking.ensure_study_run(
        client,
        experiment_id,
        name,
        space_yaml="changed",
        params={"n_trials": 20, "extra": "x" * 7000},
        tags={},
        run_id=parent,  # what the resumed study recorded
    )
    assert again == parent
    run = client.get_run(parent)
    assert run.info.status == "RUNNING"
    assert run.data.params["n_trials"] == "10"  # params are immutable; not re-logged
    assert len(run.data.params["extra"]) == 6000  # a new key is added, truncated to the limit
    assert tracking.find_study_run(client, name) == (experiment_id, parent)
    assert tracking.find_study_run(client, "no-such-study") is None


def test_log_trial_writes_params_metrics_series_tags_artifacts(
    study: tuple[Any, str, str, str], tmp_path: Path
) -> None:
    client, experiment_id, parent, name = study
    run_id = tracking.log_trial(client, experiment_id, parent, name, _outcome(7))
    run = client.get_run(run_id)
    assert run.info.run_name == "trial-0007"
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["clip_norm"] == "1.0"
    assert params["env.NCCL_ALGO"] == "Ring"
    assert params["effective_batch"] == "64"
    assert params["precision"] == "fp16"
    metrics = run.data.metrics
    assert metrics["loss_cv"] == pytest.approx(0.12)
    assert metrics["wall_s"] == pytest.approx(3.5)
    assert "gap" not in metrics  # None is skipped
    history = client.get_metric_history(run_id, "loss")
    assert len(history) == SERIES_LEN
    by_step = {m.step: m.value for m in history}
    assert by_step[0] == pytest.approx(2.0)
    assert by_step[10] == pytest.approx(2.0 * math.exp(-0.5))
    clipped = {m.step: m.value for m in client.get_metric_history(run_id, "clipped")}
    assert clipped[0] == 1.0 and clipped[1] == 0.0
    step_ms = [m.value for m in client.get_metric_history(run_id, "step_time_ms")]
    assert step_ms == pytest.approx([12.5] * SERIES_LEN)  # the probe's 0.0125 s, in ms
    tags = run.data.tags
    assert tags["mlflow.parentRunId"] == parent
    assert tags["autotune.role"] == "trial"
    assert tags["autotune.trial_number"] == "7"
    assert tags["autotune.outcome"] == "complete"
    assert tags["autotune.feasible"] == "true"
    assert tags["autotune.node"] == "node-a"
    assert tags["autotune.device"] == "cpu"
    assert tags["autotune.logged"] == "true"
    assert tags.get("autotune.fp.hash") == "abc123def456"
    artifacts = _artifacts(client, run_id)
    assert {"fingerprint.json", "trial.json"} <= artifacts
    assert "log_tail.txt" not in artifacts
    fp = json.loads(_read(client, run_id, "fingerprint.json", tmp_path))
    assert fp["hash"] == "abc123def456"
    record = json.loads(_read(client, run_id, "trial.json", tmp_path))
    assert "series" not in record["summary"] and record["number"] == 7


def test_log_trial_failures_and_divergence(
    study: tuple[Any, str, str, str], tmp_path: Path
) -> None:
    client, experiment_id, parent, name = study
    failed = tracking.log_trial(client, experiment_id, parent, name, _outcome(3, "failed"))
    run = client.get_run(failed)
    assert run.info.status == "FAILED"
    assert run.data.tags["autotune.cause"] == "exception"
    assert {"log_tail.txt", "error.txt"} <= _artifacts(client, failed)
    assert "Traceback: boom" in _read(client, failed, "log_tail.txt", tmp_path)

    diverged = tracking.log_trial(client, experiment_id, parent, name, _outcome(0, "diverged"))
    run = client.get_run(diverged)
    assert run.info.run_name == "trial-0000-baseline"
    assert run.info.status == "FINISHED"  # divergence is a result, not a failure
    assert run.data.tags["autotune.diverged_at_step"] == "20"
    assert run.data.tags["autotune.baseline"] == "true"
    assert run.data.metrics["nonfinite_steps"] == 5
    assert len(client.get_metric_history(diverged, "loss")) == 20  # NaN points are not logged
    assert "anomaly.json" in _artifacts(client, diverged)


def test_log_trial_is_idempotent(study: tuple[Any, str, str, str]) -> None:
    client, experiment_id, parent, name = study
    first = tracking.log_trial(client, experiment_id, parent, name, _outcome(1))
    second = tracking.log_trial(client, experiment_id, parent, name, _outcome(1))
    assert first == second
    runs = client.search_runs([experiment_id], "tags.`autotune.trial_number` = '1'")
    assert len(runs) == 1


def test_logged_trials_deletes_half_logged_children(study: tuple[Any, str, str, str]) -> None:
    client, experiment_id, parent, name = study
    tracking.log_trial(client, experiment_id, parent, name, _outcome(1))
    tracking.log_trial(client, experiment_id, parent, name, _outcome(2, "diverged"))
    half = client.create_run(
        experiment_id,
        run_name="trial-0005",
        tags={"mlflow.parentRunId": parent, "autotune.trial_number": "5"},
    ).info.run_id
    assert tracking.logged_trials(client, experiment_id, parent) == {1, 2}
    assert client.get_run(half).info.lifecycle_stage == "deleted"
    # and trial 5 can now be logged for real
    tracking.log_trial(client, experiment_id, parent, name, _outcome(5))
    assert tracking.logged_trials(client, experiment_id, parent) == {1, 2, 5}


def test_log_study_summary_leaves_plots_and_pareto_table(
    study: tuple[Any, str, str, str], tmp_path: Path
) -> None:
    client, experiment_id, parent, name = study
    outcomes = [
        _outcome(0, values=[0.30, 14.0]),
        _outcome(1, values=[0.10, 13.0]),
        _outcome(2, values=[0.20, 11.0]),
        _outcome(3, "diverged"),
        _outcome(4, "failed"),
    ]
    for outcome in outcomes:
        tracking.log_trial(client, experiment_id, parent, name, outcome)
    objectives = [
        {"metric": "loss_cv", "direction": "minimize"},
        {"metric": "step_time", "direction": "minimize"},
    ]
    summary = {
        "study": name,
        "objectives": objectives,
        "baseline": {
            "number": 0,
            "values": [0.30, 14.0],
            "metrics": {"loss_cv": 0.30, "step_time": 14.0},
            "feasible": True,
            "outcome": "complete",
        },
        "pareto": [
            {
                "number": n,
                "values": outcomes[n]["values"],
                "metrics": {"loss_cv": outcomes[n]["values"][0]},
                "knobs": {"clip_norm": 0.5 * n, "warmup_steps": 10},
                "params": {"clip_norm": 0.5 * n},
            }
            for n in (1, 2)
        ],
        "best": {"loss_cv": 0.10, "step_time": 11.0},
        "improvement": {
            "loss_cv": {"baseline": 0.30, "best": 0.10, "change_pct": -66.7},
            "step_time": {"baseline": 14.0, "best": 11.0, "change_pct": -21.4},
        },
        "counts": {"complete": 3, "diverged": 1, "failed": 1, "oom": 0},
        "rung_counts": [
            {"steps": 60, "trials": 3, "complete": 2, "diverged": 1, "oom": 0, "failed": 0}
        ],
        "dropped_knobs": {"scaler_init": "precision is fp32"},
        "compute": {"screen": 4800, "rungs": 0, "total": 4800, "vs_today": 1.0, "today": 4800},
    }
    importances = {
        "loss_cv": {"clip_norm": 0.7, "warmup_steps": 0.3},
        "step_time": {"clip_norm": 0.2, "warmup_steps": 0.8},
    }
    tracking.log_study_summary(client, parent, summary, outcomes, importances)

    run = client.get_run(parent)
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert metrics["baseline.loss_cv"] == pytest.approx(0.30)
    assert metrics["best.step_time"] == pytest.approx(11.0)
    assert metrics["trials.complete"] == 3
    assert metrics["trials.diverged"] == 1
    assert metrics["trials.failed"] == 1
    assert metrics["trials.oom"] == 0
    # each rung above the screen counted on its own (the screen's 1 diverged, the rung's 1)
    assert metrics["rung_60.trials"] == 3 and metrics["rung_60.complete"] == 2
    assert metrics["rung_60.diverged"] == 1 and metrics["rung_60.failed"] == 0
    assert metrics["compute_samples_total"] == 4800 and metrics["compute_vs_today"] == 1.0
    assert run.data.tags["autotune.pick.trial"] == "1"
    assert run.data.tags["autotune.pareto.trials"] == "1,2"
    artifacts = _artifacts(client, parent)
    assert {
        "plots/pareto_front.png",
        "plots/importances.png",
        "plots/loss_curves.png",
        "pareto_front.json",
        "pareto_front.csv",
        "pareto_front.md",
        "summary.json",
    } <= artifacts
    csv_text = _read(client, parent, "pareto_front.csv", tmp_path).splitlines()
    assert csv_text[0] == "trial,loss_cv,step_time,clip_norm,warmup_steps"
    assert len(csv_text) == 3
    table = json.loads(_read(client, parent, "pareto_front.json", tmp_path))
    assert table["columns"][:3] == ["trial", "loss_cv", "step_time"]
    assert len(table["data"]) == 2
    png = Path(client.download_artifacts(parent, "plots/pareto_front.png", str(tmp_path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # A second summary (a resumed study) replaces the table instead of appending to it.
    summary["pareto"] = summary["pareto"][:1]
    tracking.log_study_summary(client, parent, summary, outcomes, None)
    table = json.loads(_read(client, parent, "pareto_front.json", tmp_path / "again"))
    assert table["data"] == [[1, 0.1, 13.0, 0.5, 10]]


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("postgresql://u:secret@db:5432/optuna", "postgresql://u:***@db:5432/optuna"),
        ("postgresql://u:se@cr/et@db/optuna", "postgresql://u:***@db/optuna"),  # @ in password
        ("postgresql://u@db/optuna", "postgresql://u@db/optuna"),  # no password: as it is
        ("sqlite:///runs/a@b.db", "sqlite:///runs/a@b.db"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        # in the query (review: `?password=` was printed in full by every command)
        ("postgresql://u@h:9/x?password=s3cret", "postgresql://u@h:9/x?password=***"),
        (
            "postgresql://u@h/x?sslmode=require&PASSWORD=a&b=1",
            "postgresql://u@h/x?sslmode=require&PASSWORD=***&b=1",
        ),
        ("postgresql://u:p@h/x?sslpassword=k", "postgresql://u:***@h/x?sslpassword=***"),
    ],
)
def test_redact_hides_only_the_password(uri: str, shown: str) -> None:
    assert tracking.redact(uri) == shown


def test_trial_params_show_the_knobs_the_probe_ran_with_for_unset_ones() -> None:
    from autotune.tracking.runs import trial_params

    outcome = {"knobs": {"clip_norm": 1.0, "lr": None, "batch": None, "init_scale": None}}
    summary = {"knobs": {"clip_norm": 1.0, "lr": 0.003, "batch": 16}, "effective_batch": 16}
    params = trial_params(outcome, summary)
    # an unset lr or batch is logged as what the probe resolved it to, not as "None"
    assert params["lr"] == 0.003 and params["batch"] == 16
    assert params["clip_norm"] == 1.0
    assert params["init_scale"] is None  # not resolved by the probe (fp32): stays unset


def test_trial_params_show_the_clip_policy_as_it_acted() -> None:
    from autotune.probe import resolve_knobs
    from autotune.tracking.runs import trial_params

    knobs = resolve_knobs({"clip_policy": "zclip", "zclip_z": 3.0, "clip_norm": 1.0}, 0.01)
    params = trial_params({"knobs": knobs}, {"knobs": knobs})
    assert params["clip_policy"] == "zclip" and params["zclip_z"] == 3.0
    assert params["clip"] == "zclip z 3 alpha 0.97 warm-up 25"  # clip_norm is not the policy's
    plain = trial_params({"knobs": resolve_knobs({"clip_norm": 0.5}, 0.01)}, {})
    assert plain["clip"] == "0.5 (global)"


def test_the_screens_verdicts_judged_again_replace_the_told_ones_on_the_trial_runs(
    study: tuple[Any, str, str, str], tmp_path: Path
) -> None:
    import optuna

    from autotune.study.attrs import SCREEN_FEASIBLE
    from autotune.study.writer import MlflowWriter

    client, experiment_id, parent, name = study
    for n in (1, 2):  # both told feasible (trial 1 before the baseline had finished)
        tracking.log_trial(client, experiment_id, parent, name, _outcome(n))
    tracking.log_trial(client, experiment_id, parent, name, _outcome(3, "diverged"))
    opt = optuna.create_study()
    opt.set_user_attr(SCREEN_FEASIBLE, {"1": False, "2": True, "3": False})
    writer = MlflowWriter(client, experiment_id, parent, name, tmp_path)

    def tags() -> dict[int, tuple[str | None, str | None]]:
        runs = client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
        return {
            int(r.data.tags["autotune.trial_number"]): (
                r.data.tags.get("autotune.feasible"),
                r.data.tags.get("autotune.feasible_told"),
            )
            for r in runs
        }

    assert tags() == {1: ("true", None), 2: ("true", None), 3: ("false", None)}
    for _ in range(2):  # a resumed study writes it again: unchanged
        writer.screen_verdicts(opt)  # queued behind the trials still being logged
        writer.drain()
        assert tags() == {1: ("false", "true"), 2: ("true", None), 3: ("false", None)}


def test_a_study_run_is_found_again_by_its_id_never_by_its_name(store: Any) -> None:
    """A review: a study of a name used before (its folder removed) logged its trials under the
    old study's parent run. Only the run the study itself recorded is continued."""
    name = "same-name"
    experiment_id = tracking.ensure_experiment(store, name)

    def run(run_id: str | None = None) -> str:
        return tracking.ensure_study_run(
            store, experiment_id, name, space_yaml="name: x\n", params={}, tags={}, run_id=run_id
        )

    first = run()
    second = run()  # a new study of the same name: a run of its own
    assert second != first
    assert run(first) == first and run(second) == second  # a resumed study: its own run
    other = tracking.ensure_experiment(store, "another-name")
    elsewhere = tracking.ensure_study_run(
        store, other, "another-name", space_yaml="x", params={}, tags={}
    )
    assert run(elsewhere) not in (elsewhere, first, second)  # another experiment's run
    assert run("0" * 32) not in (first, second)  # not in this store
    store.delete_run(first)
    assert run(first) != first  # deleted: a new one
