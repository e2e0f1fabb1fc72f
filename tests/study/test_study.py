"""`autotune study` end to end: real local Ray, a real SQLite Optuna storage, a real MLflow SQLite
store, all under tmp_path. Nothing is mocked.

Trials run one at a time on a 2-core machine; the `mlp` workload at 20-30 steps keeps a trial at
a few seconds (most of it the probe process importing torch).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

from autotune.study.records import screen_feasible

pytestmark = [
    pytest.mark.integration,
    # MLflow 3.17's own SQLAlchemy mapping warns on import; not ours to fix.
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),  # mlflow+pandas
]

DONE_STATES = ("COMPLETE", "FAIL")


def load_optuna(study_dir: Path, name: str) -> Any:
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{study_dir / 'optuna.db'}")


def mlflow_runs(uri: str, name: str) -> tuple[Any, Any, list[Any]]:
    """(client, the study's parent run, its child runs) from the tracking store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None, f"no MLflow experiment named {name!r} in {uri}"
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("autotune.role") == "study"]
    assert len(parents) == 1, f"expected one study run, got {[r.info.run_name for r in parents]}"
    parent = parents[0]
    children = [
        r
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
        and r.data.tags.get("autotune.role") != "verification"
    ]
    verifications = [r for r in runs if r.data.tags.get("autotune.role") == "verification"]
    assert len(children) + len(verifications) == len(runs) - 1, (
        "a run that is neither the study, its trial nor a verification"
    )
    return client, parent, children


def by_number(children: list[Any]) -> dict[int, Any]:
    numbers = [int(r.data.tags["autotune.trial_number"]) for r in children]
    assert len(set(numbers)) == len(numbers), f"a trial logged twice: {sorted(numbers)}"
    return dict(zip(numbers, children, strict=True))


def artifact_text(client: Any, run_id: str, path: str, dst: Path) -> str:
    import mlflow

    dst.mkdir(parents=True, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path=path, tracking_uri=client.tracking_uri, dst_path=str(dst)
    )
    return Path(local).read_text()


# ---------------------------------------------------------------------------------------------
# 1. The happy path
# ---------------------------------------------------------------------------------------------


def test_study_records_every_trial_in_optuna_and_mlflow(shared: h.FinishedStudy) -> None:
    n = shared.trials
    assert shared.study_dir == shared.folder / "autotune-studies" / shared.name
    assert shared.summary["counts"]["complete"] == n, shared.summary["counts"]

    study = load_optuna(shared.study_dir, shared.name)
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == list(range(n))
    assert all(t.state.name in DONE_STATES for t in trials)
    assert trials[0].user_attrs.get("autotune.baseline") is True
    assert trials[0].params == {}, "the baseline searches nothing: PyTorch's defaults"
    assert not any(t.user_attrs.get("autotune.baseline") for t in trials[1:])
    assert all(set(t.params) == {"clip_norm", "warmup_steps"} for t in trials[1:])
    assert sorted(p.name for p in (shared.study_dir / "trials").glob("*.json")) == [
        f"{i:04d}.json" for i in range(n)
    ]

    client, parent, children = mlflow_runs(shared.tracking_uri, shared.name)
    assert parent.info.run_name == shared.name
    assert parent.info.status == "FINISHED"
    runs = by_number(children)
    assert sorted(runs) == list(range(n))
    assert runs[0].info.run_name == "trial-0000-baseline"
    for number, run in runs.items():
        trial = trials[number]
        tags, params = run.data.tags, run.data.params
        assert tags["autotune.outcome"] == trial.user_attrs["autotune.outcome"] == "complete"
        assert tags["autotune.fp.hash"], f"trial {number}: no fingerprint hash"
        assert tags["autotune.fp.hash"] == trial.user_attrs["autotune.fp_hash"]
        assert tags["autotune.logged"] == "true"
        assert params["effective_batch"] == str(h.MICRO_BATCH)
        # knobs the space leaves unset read as what the probe ran with, not "None"
        assert params["batch"] == str(h.MICRO_BATCH) and float(params["lr"]) > 0
        for knob, value in trial.params.items():
            assert params[knob] == str(value), f"trial {number}: param {knob}"
        loss = client.get_metric_history(run.info.run_id, "loss")
        assert [m.step for m in sorted(loss, key=lambda m: m.step)] == list(range(shared.steps))
        assert run.data.metrics["loss_cv"] == pytest.approx(trial.values[0])

    show = h.autotune(["show", shared.name], shared.folder, timeout=120)
    assert show.returncode == 0, h.explain(show)
    assert f"study {shared.name}: {n}/{n} trials" in show.stdout
    assert "Pareto front" in show.stdout
    assert "baseline (trial 0" in show.stdout
    assert "at None steps" not in show.stdout, show.stdout

    as_json = h.autotune(["show", shared.name, "--json"], shared.folder, timeout=120)
    assert as_json.returncode == 0, h.explain(as_json)
    summary = json.loads(as_json.stdout)
    assert summary["study"] == shared.name
    assert summary["baseline"]["number"] == 0
    # no rungs: the study decides at the screen's length, and says so
    assert summary["vs_baseline"]["steps"] == shared.steps, summary["vs_baseline"]
    assert summary["pick"]["steps"] == shared.steps
    front = [row["number"] for row in summary["pareto"]]
    assert front and set(front) <= set(range(n))
    assert front == [row["number"] for row in shared.summary["pareto"]]


def test_optuna_dashboard_names_the_objectives(shared: h.FinishedStudy, tmp_path: Path) -> None:
    """optuna-dashboard, pointed at the study's storage, shows the objectives by metric name."""
    import urllib.request

    storage = f"sqlite:///{shared.study_dir / 'optuna.db'}"
    port = h.free_port()
    exe = Path(sys.executable).with_name("optuna-dashboard")
    log = tmp_path / "dashboard.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(exe), "--host", "127.0.0.1", "--port", str(port), storage],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return json.loads(r.read())

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                studies = get("/api/studies")["study_summaries"]
                break
            except OSError:  # not listening yet
                if server.poll() is not None or time.monotonic() > deadline:
                    why = log.read_text()
                    raise AssertionError(f"no answer from optuna-dashboard\n{why}") from None
                time.sleep(0.5)
        ids = [s["study_id"] for s in studies if s["study_name"] == shared.name]
        assert len(ids) == 1, studies
        detail = get(f"/api/studies/{ids[0]}")
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    metrics = [o["metric"] for o in shared.summary["objectives"]]
    assert detail["objective_names"] == metrics


# ---------------------------------------------------------------------------------------------
# 2. Failures are results with a cause; the study goes on
# ---------------------------------------------------------------------------------------------

FAILURE_SPACE = """\
name: failures
workload: {{name: {workload}, size: tiny}}
probe: {{steps: 20, micro_batch: 32, device: cpu, telemetry_every: 5}}
budget: {{trials: 5, trial_timeout_s: {timeout}}}
sampler: {{name: grid}}
env:
  HSA_AUTOTUNE_TEST_MODE: {{choices: [raise, hang, nan, kill]}}
"""

TIMEOUT_S = 20


def test_failures_are_recorded_with_their_cause(tmp_path: Path) -> None:
    from assets import behaving

    space = h.write(
        tmp_path,
        FAILURE_SPACE.format(workload=f"{h.BEHAVING}:make", timeout=TIMEOUT_S),
    )
    uri = h.sqlite_uri(tmp_path)
    token = h.new_token()
    result = h.autotune(
        ["study", "--space", str(space), "--tracking-uri", uri], tmp_path, token=token, timeout=400
    )
    assert result.returncode == 0, h.explain(result)
    assert "Traceback" not in result.stdout + result.stderr, h.explain(result)
    assert "study failures: 5/5 trials" in result.stdout, h.explain(result)
    study_dir = tmp_path / "autotune-studies" / "failures"
    assert study_dir.is_dir(), f"study folders: {sorted(tmp_path.glob('autotune-studies/*'))}"
    left = h.wait_gone(token, timeout=20)
    assert not left, f"processes left behind by the study: {left}"

    study = load_optuna(study_dir, "failures")
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == list(range(5))
    mode = {t.number: t.params.get(behaving.MODE_VAR, "ok") for t in trials}
    assert mode[0] == "ok" and trials[0].user_attrs["autotune.baseline"] is True
    assert sorted(mode.values()) == ["hang", "kill", "nan", "ok", "raise"]
    expected = {
        "ok": ("COMPLETE", "complete", None),
        "raise": ("FAIL", "failed", "exception"),
        "hang": ("FAIL", "failed", "timeout"),
        "nan": ("COMPLETE", "diverged", "nonfinite_loss"),
        "kill": ("FAIL", "failed", "killed"),
    }
    client, _, children = mlflow_runs(uri, "failures")
    runs = by_number(children)
    assert sorted(runs) == list(range(5)), "every trial, failed or not, has its MLflow run"
    number_of = {m: n for n, m in mode.items()}
    for number, trial in enumerate(trials):
        state, outcome, cause = expected[mode[number]]
        what = f"trial {number} ({mode[number]})"
        assert trial.state.name == state, what
        assert trial.user_attrs["autotune.outcome"] == outcome, what
        assert trial.user_attrs["autotune.cause"] == cause, what
        tags = runs[number].data.tags
        assert tags["autotune.outcome"] == outcome, what
        assert tags.get("autotune.cause") == cause, what
        # The baseline leaves a searched environment variable unset.
        assert runs[number].data.params.get(f"env.{behaving.MODE_VAR}", "ok") == mode[number]

    # raise: the exception's type and message, and the traceback in the log tail.
    raised = trials[number_of["raise"]]
    assert behaving.MESSAGE in raised.user_attrs["autotune.error"]
    run_id = runs[raised.number].info.run_id
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"error.txt", "log_tail.txt"} <= artifacts, artifacts
    assert behaving.MESSAGE in artifact_text(client, run_id, "error.txt", tmp_path / "got")
    assert "RuntimeError" in artifact_text(client, run_id, "log_tail.txt", tmp_path / "got")

    # hang: killed at the time limit together with the child process it started.
    hung = trials[number_of["hang"]]
    assert "time limit" in hung.user_attrs["autotune.error"]
    assert TIMEOUT_S <= hung.user_attrs["autotune.wall_s"] < TIMEOUT_S + 30
    record = json.loads((study_dir / "trials" / f"{hung.number:04d}.json").read_text())
    child = [
        int(line.split()[-1])
        for line in record["log_tail"].splitlines()
        if line.startswith(behaving.HANG_CHILD_MARKER)
    ]
    assert len(child) == 1, f"the hanging probe did not start its child: {record['log_tail']!r}"
    assert not h.pid_alive(child[0]), "the hanging probe's child outlived the trial"

    # nan: a measured, infeasible result with the step it diverged at.
    nan = runs[number_of["nan"]]
    assert nan.data.tags["autotune.divergence_cause"] == "nonfinite_loss"
    assert nan.data.tags["autotune.diverged_at_step"] == str(behaving.NAN_AT)
    assert nan.data.tags["autotune.feasible"] == "false"
    assert nan.data.metrics["nonfinite_steps"] >= 1
    assert study.trials[number_of["nan"]].user_attrs["autotune.feasible"] is False

    # kill: the signal is named.
    killed = trials[number_of["kill"]]
    assert "SIGKILL" in killed.user_attrs["autotune.error"]

    # The summary counts them, and only the baseline can be on the Pareto front.
    assert "1 complete, 1 diverged, 0 out of memory, 3 failed" in result.stdout
    show = h.autotune(["show", "failures", "--json"], tmp_path, timeout=120)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert summary["counts"] == {
        "complete": 1,
        "diverged": 1,
        "oom": 0,
        "failed": 3,
        "running": 0,
        "interrupted": 0,
    }
    assert [row["number"] for row in summary["pareto"]] == [0]


# ---------------------------------------------------------------------------------------------
# 3. The driver dies (SIGKILL), is interrupted (SIGINT), and the study still ends whole
# ---------------------------------------------------------------------------------------------


def _start(cmd: list[str], cwd: Path, token: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=h.cli_env(token),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _wait_for_record(
    proc: subprocess.Popen[bytes], trials_dir: Path, known: set[str], log: Path, timeout: float
) -> str:
    """Wait until a trial record not in `known` is written; return its file name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = sorted({p.name for p in trials_dir.glob("*.json")} - known)
        if new:
            return new[0]
        if proc.poll() is not None:
            raise AssertionError(
                f"the driver ended (status {proc.returncode}) before writing a new trial "
                f"record\n{log.read_text()[-6000:]}"
            )
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no new trial record within {timeout:.0f} s\n{log.read_text()[-6000:]}")


def _wait_for_probe(proc: subprocess.Popen[bytes], token: str, log: Path, timeout: float) -> None:
    """Wait until a probe process of this driver runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any("autotune.process." in cmd for _, cmd in h.tagged_processes(token)):
            return
        if proc.poll() is not None:
            raise AssertionError(
                f"the driver ended (status {proc.returncode}) before it started a probe\n"
                f"{log.read_text()[-6000:]}"
            )
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no probe started within {timeout:.0f} s\n{log.read_text()[-6000:]}")


def _mtimes(trials_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in trials_dir.glob("*.json")}


def test_resume_after_sigkill_and_sigint(tmp_path: Path) -> None:
    """Killed (SIGKILL) after trial 1, resumed by the same command and interrupted (SIGINT),
    then finished with --resume: nothing that finished runs again, and the resumed study
    continues its search (every trial a configuration of its own: the sampler does not start
    its draws over), its progress line counting the trials the stopped drivers finished. One
    study for both: each restart is one the search must continue across (these were two
    tests, each paying its own drivers)."""
    name, n = "resumed", 5
    space = h.write(tmp_path, h.mlp_space(name, trials=n, steps=20))
    uri = h.sqlite_uri(tmp_path)
    cmd = h.autotune_cmd("study", "--space", str(space), "--quiet", "--tracking-uri", uri)
    study_dir = tmp_path / "autotune-studies" / name
    trials_dir = study_dir / "trials"

    # Run 1: SIGKILL to the driver's whole process group once trial 1 is recorded.
    token1, log1 = h.new_token(), tmp_path / "run1.log"
    run1 = _start(cmd, tmp_path, token1, log1)
    try:
        _wait_for_record(run1, trials_dir, {"0000.json"}, log1, timeout=240)
        assert (trials_dir / "0001.json").exists()
    finally:
        os.killpg(run1.pid, signal.SIGKILL)
        run1.wait()
    assert run1.returncode == -signal.SIGKILL
    left = h.wait_gone(token1, timeout=30)
    assert not left, f"processes outlived the killed driver: {left}"
    time.sleep(2)
    after_kill = _mtimes(trials_dir)
    assert {"0000.json", "0001.json"} <= set(after_kill)

    # Run 2: the same command resumes; SIGINT (Ctrl-C, to the driver only) while a probe runs.
    token2, log2 = h.new_token(), tmp_path / "run2.log"
    run2 = _start(cmd, tmp_path, token2, log2)
    try:
        _wait_for_probe(run2, token2, log2, timeout=240)
        os.kill(run2.pid, signal.SIGINT)
        rc = run2.wait(timeout=120)
    finally:
        if run2.poll() is None:
            os.killpg(run2.pid, signal.SIGKILL)
    out2 = log2.read_text()
    assert rc == 130, f"exit status {rc} after SIGINT\n{out2[-6000:]}"
    assert "interrupted: " in out2 and "run the same command again" in out2, out2[-6000:]
    assert "Traceback" not in out2, out2[-6000:]
    left = h.wait_gone(token2, timeout=30)
    assert not left, f"processes outlived the interrupted driver: {left}"
    after_int = _mtimes(trials_dir)
    unchanged = {k: after_int.get(k) for k in after_kill}
    assert unchanged == after_kill, "a trial that had finished before SIGKILL ran again"
    assert len(after_int) < n, "the interruption came too late to test anything"

    # Run 3: --resume finishes the study (not --quiet: its progress lines are looked at below).
    token3 = h.new_token()
    loud = [a for a in cmd[3:] if a != "--quiet"]
    run3 = h.autotune([*loud, "--resume"], tmp_path, token=token3, timeout=400)
    assert run3.returncode == 0, h.explain(run3)
    assert f"study {name}: {n}/{n} trials" in run3.stdout, h.explain(run3)
    assert not h.wait_gone(token3, timeout=30)
    final = _mtimes(trials_dir)
    assert {k: final.get(k) for k in after_int} == after_int, (
        "a trial that had finished before SIGINT ran again"
    )
    assert sorted(final) == [f"{i:04d}.json" for i in range(n)]

    study = load_optuna(study_dir, name)
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == list(range(n)), "trials lost or added by the restarts"
    assert [t.state.name for t in trials if t.state.name not in DONE_STATES] == []
    assert trials[0].user_attrs["autotune.baseline"] is True
    configs = [tuple(sorted(t.params.items())) for t in trials[1:]]
    assert len(set(configs)) == n - 1, f"a configuration ran twice: {configs}"
    # The progress line's best so far counts the trials the stopped drivers finished too: after
    # the resumed run's first trial it is the best loss_cv of every trial finished by then.
    lines = run3.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if re.match(r"\s+trial\s+\d+\s", line))
    done = int(lines[first].split()[1])
    best = re.search(r"best loss_cv (\S+)", lines[first + 1])
    assert best is not None, h.explain(run3)
    judged = screen_feasible(study)
    feasible = [t.values[0] for t in trials[: done + 1] if t.values is not None and judged(t)]
    assert float(best.group(1)) == pytest.approx(min(feasible), rel=1e-3), lines[first : first + 2]

    _, _, children = mlflow_runs(uri, name)
    assert sorted(by_number(children)) == list(range(n))
    assert all(r.data.tags["autotune.logged"] == "true" for r in children)


def test_two_drivers_starting_a_new_study_meet_the_lock(tmp_path: Path) -> None:
    """Both start at once on a new study folder and a new tracking store: one runs the study,
    the other stops at the study lock before it touches a store (no schema-migration race).

    The study the winner runs also checks that an error on the worker is recorded with its
    cause: its trial 1's process cannot be started by the Ray worker (its environment is larger
    than the kernel takes, E2BIG) and fails with that exception named, not as a lost worker.
    (Two tests, each a study of a baseline at 10 steps, share this one.)"""
    name = "twice"
    big = "x" * 200_000  # one variable over the kernel's 128 KiB limit (MAX_ARG_STRLEN)
    text = h.mlp_space(name, trials=2, steps=10).replace("random", "grid")
    text += f"env:\n  HSA_AUTOTUNE_TEST_BIG: {{choices: [{big}]}}\n"
    space = h.write(tmp_path, text)
    cmd = h.autotune_cmd(
        "study", "--space", str(space), "--quiet", "--tracking-uri", h.sqlite_uri(tmp_path)
    )
    tokens = [h.new_token(), h.new_token()]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [_start(cmd, tmp_path, t, log) for t, log in zip(tokens, logs, strict=True)]
    try:
        codes = [p.wait(timeout=400) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    outs = [log.read_text() for log in logs]
    both = "\n--- the other driver\n".join(outs)[-8000:]
    assert sorted(codes) == [0, 2], both
    loser = outs[codes.index(2)]
    lines = [line for line in loser.splitlines() if line.startswith("autotune: error:")]
    assert len(lines) == 1 and "in use by another autotune driver" in lines[0], both
    for out in outs:
        assert "alembic" not in out.lower() and "Traceback" not in out, both
    assert f"study {name}: 2/2 trials" in outs[codes.index(0)], both
    for t in tokens:
        assert not h.wait_gone(t, timeout=30)
    study_dir = tmp_path / "autotune-studies" / name
    trials = load_optuna(study_dir, name).get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL"]
    # The error on the worker: recorded with its cause, the exception named.
    failed = trials[1].user_attrs
    assert failed["autotune.cause"] == "worker_error", failed
    assert failed["autotune.error"].startswith("OSError: "), failed["autotune.error"]
    assert "Argument list too long" in failed["autotune.error"]
    record = json.loads((study_dir / "trials" / "0001.json").read_text())
    assert "Traceback" in record["log_tail"] and "run_trial_process" in record["log_tail"]


# ---------------------------------------------------------------------------------------------
# 4-5. Bad services and bad input: one clear line, status 2, nothing written
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "named", "hidden"),
    [
        ("--tracking-uri", "http://127.0.0.1:9", "http://127.0.0.1:9", None),
        ("--address", "127.0.0.1:9", "127.0.0.1:9", None),
        ("--storage", "postgresql://u:p@127.0.0.1:9/x", "127.0.0.1:9", ":p@"),
        # an unencoded '@' in the password: refused, not tried at the host 'k5@127.0.0.1'
        ("--storage", "postgresql://u:Le@k5@127.0.0.1:9/x", "u:***@127.0.0.1:9/x", "k5"),
    ],
    ids=["tracking", "ray", "storage", "storage-at-in-password"],
)
def test_unreachable_service_fails_fast(
    tmp_path: Path, option: str, value: str, named: str, hidden: str | None
) -> None:
    space = h.write(tmp_path, h.mlp_space("unreachable", trials=2))
    args = ["study", "--space", str(space), option, value]
    if option != "--tracking-uri":
        args += ["--tracking-uri", h.sqlite_uri(tmp_path)]
    t0 = time.monotonic()
    result = h.autotune(args, tmp_path, timeout=60)
    elapsed = time.monotonic() - t0
    assert result.returncode == 2, h.explain(result)
    assert elapsed < 20, f"took {elapsed:.1f} s to give up"
    assert "Traceback" not in result.stderr, h.explain(result)
    lines = [line for line in result.stderr.splitlines() if line.startswith("autotune: error:")]
    assert len(lines) == 1 and named in lines[0], h.explain(result)
    if hidden:
        assert hidden not in result.stdout + result.stderr, "the password is shown"
    assert not (tmp_path / "autotune-studies").exists(), "a study folder was created"
    if option != "--tracking-uri":
        assert not (tmp_path / "mlflow.db").exists(), "a tracking store was created"


def tree(folder: Path) -> list[str]:
    """Every path under `folder`, relative, sorted: what a refused command must leave as it was."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--study-dir", "afile/x"], "afile is not a folder"),
        (["--study-dir", "/proc/autotune-nope"], "/proc/autotune-nope"),
        (["--storage", "sqlite:////nonexistent/dir/x.db"], "folder /nonexistent/dir does not"),
        (["--storage", "bogus://x"], "bogus://x: not a database URL"),
        (["--storage", "sqlite:///afile"], "afile: file is not a database"),
        (["--tracking-uri", "http://127.0.0.1:1"], "http://127.0.0.1:1"),
        (["--tracking-uri", "sqlite:///afile/m.db"], "afile is not a folder"),
        (["--tracking-uri", "file:afile/mlruns"], "afile is not a folder"),
        (["--tracking-uri", "afile"], "afile is not a folder"),
        (["--resume"], "--resume: no study 'r'"),
    ],
    ids=[
        "dir-under-file",
        "dir-unmakeable",
        "sqlite-no-folder",
        "bogus",
        "sqlite-junk",
        "tracking-http",
        "tracking-under-file",
        "tracking-file-store-under-file",
        "tracking-file-store-is-file",
        "resume-missing",
    ],
)
def test_a_bad_folder_store_or_resume_is_refused_before_anything_is_made(
    short_dir: Path, args: list[str], named: str
) -> None:
    """Refused before the lock and Ray: in seconds, one line, nothing made (not the study
    folder, not ./mlflow.db, not Ray's session folder, which a short folder holds)."""
    h.write(short_dir, h.mlp_space("r", trials=2))
    (short_dir / "afile").write_text("not a folder, not a database")
    before = tree(short_dir)
    t0 = time.monotonic()
    result = h.autotune(["study", "--space", "space.yaml", *args], short_dir, timeout=90)
    elapsed = time.monotonic() - t0
    assert result.returncode == 2, h.explain(result)
    assert "Traceback" not in result.stderr, h.explain(result)
    lines = [line for line in result.stderr.splitlines() if line.startswith("autotune: error:")]
    assert len(lines) == 1 and named in lines[0], h.explain(result)
    assert elapsed < 15, f"took {elapsed:.1f} s to give up (after starting Ray?)"
    assert tree(short_dir) == before, h.explain(result)
    assert not Path("/proc/autotune-nope").exists()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a path short enough that a study's Ray session folder goes inside its
    study folder (`session.init_ray`: ./autotune-studies/r/ray within 40 bytes)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="at", dir="/tmp") as short:
        yield Path(short)


def test_a_study_refused_under_the_lock_leaves_nothing_behind(
    tmp_path: Path, short_dir: Path
) -> None:
    """A study refused after the lock (here: one of that name with another space is in its
    storage) removes what the run made: the lock, Ray's session folder, a new ./mlflow.db."""
    import optuna

    h.write(tmp_path, h.mlp_space("other-space", trials=2))
    study_dir = short_dir / "s"
    study_dir.mkdir()
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    optuna.create_study(study_name="other-space", storage=storage).set_user_attr(
        "autotune.space", "another space"
    )
    before, here = tree(short_dir), tree(tmp_path)
    token = h.new_token()
    args = ["study", "--space", "space.yaml", "--study-dir", str(study_dir)]
    result = h.autotune(args, tmp_path, token=token, timeout=300)
    assert result.returncode == 2, h.explain(result)
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("autotune: error:")]
    assert len(lines) == 1 and "with a different space" in lines[0], h.explain(result)
    assert not h.wait_gone(token, timeout=30)
    assert tree(short_dir) == before, h.explain(result)
    assert tree(tmp_path) == here, h.explain(result)


def test_refused_environment_knob(tmp_path: Path) -> None:
    text = h.mlp_space("refused", trials=2) + "env:\n  LD_PRELOAD: x\n"
    space = h.write(tmp_path, text)
    result = h.autotune(
        ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path)],
        tmp_path,
        timeout=60,
    )
    assert result.returncode == 2, h.explain(result)
    assert "Traceback" not in result.stderr, h.explain(result)
    assert "env.LD_PRELOAD" in result.stderr and "refused" in result.stderr, h.explain(result)
    assert not (tmp_path / "autotune-studies").exists()
    assert not (tmp_path / "mlflow.db").exists()


# ---------------------------------------------------------------------------------------------
# The summary names what an infeasible baseline broke
# ---------------------------------------------------------------------------------------------


def test_summary_names_the_constraint_a_complete_baseline_breaks() -> None:
    import optuna

    from autotune import space as sp
    from autotune import study as st

    space = sp.load("gradclip")
    study = optuna.create_study(directions=list(st.directions(space)))  # type: ignore[arg-type]
    # PyTorch's defaults at an unstable lr: the loss blew up and had not come back after 150
    # steps (it ended above where it started): complete, measured, and it did not learn.
    for baseline, metrics in (
        (True, {"noise_per_drop": 0.16, "throughput": 900.0, "loss_drop": -1.22}),
        (False, {"noise_per_drop": 0.07, "throughput": 850.0, "loss_drop": 0.46}),
    ):
        trial = study.ask()
        cons = st.constraints_of(space, "complete", metrics)
        for key, value in {
            "autotune.baseline": baseline,
            "autotune.outcome": "complete",
            "autotune.metrics": metrics,
            "autotune.constraints": cons,
            "autotune.feasible": all(c <= 0 for c in cons),
        }.items():
            trial.set_user_attr(key, value)
        study.tell(trial, [metrics["noise_per_drop"], metrics["throughput"]])
    summary = st.summarize(study, space)
    assert summary["baseline"]["broken"] == ["loss_drop >= 0.05 (got -1.22)"]
    assert [row["number"] for row in summary["pareto"]] == [1]
    assert summary["pareto"][0]["broken"] == []
    text = st.format_summary(summary)
    assert "PyTorch defaults): complete (infeasible: breaks loss_drop >= 0.05 (got -1.22))" in text


def test_importances_rank_the_parameter_an_objective_depends_on() -> None:
    import optuna

    from autotune import study as st

    study = optuna.create_study(
        directions=["minimize", "maximize"], sampler=optuna.samplers.RandomSampler(seed=0)
    )
    for _ in range(80):
        t = study.ask()
        a = t.suggest_float("clip_norm", 0.1, 5.0)
        b = t.suggest_int("warmup_steps", 0, 100)
        t.set_user_attr("autotune.feasible", True)
        # loss_cv is lowest at small clip_norm whatever the warm-up. Throughput (maximised) is
        # highest at long warm-ups whatever the clipping, and its *worst* values, which an
        # evaluator that looks for low values would explain, come from clip_norm >= 4.5 alone.
        throughput = 0.0 if a >= 4.5 else 1.0 + b
        study.tell(t, [a, throughput])
    summary = {
        "objectives": [
            {"metric": "loss_cv", "direction": "minimize"},
            {"metric": "throughput", "direction": "maximize"},
        ]
    }
    imp = st.importances(study, summary)
    assert imp is not None
    assert list(imp["loss_cv"]) == ["clip_norm"], imp  # the warm-up is within chance there
    throughput = imp["throughput"]
    assert isinstance(throughput, dict), throughput
    assert throughput["warmup_steps"] > throughput.get("clip_norm", 0.0), throughput
