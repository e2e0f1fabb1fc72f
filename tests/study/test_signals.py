"""Ctrl-C (SIGINT) and SIGTERM stop `autotune study` in every phase (`study/signals.py`): one
"interrupted" line, the summary so far, status 130 or 143, and the same command with --resume
finishes the study. Real local Ray, SQLite Optuna and MLflow; the signal is sent once the
phase's line is printed, as a user would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from assets import studies as h

from autotune.study import signals

# A screen of 4 trials at 30 steps, one rung to 90 steps (beside it the baseline's seeds), and
# the best two configurations verified over 6 seeds: every phase lasts long enough to be stopped.
# Two, not one: the baseline's seeds run beside the top rung, so a study whose best configuration
# is the baseline (throughput decides it on a busy machine) would have nothing left to verify.
SPACE = """\
name: {name}
workload: {{name: mlp, size: tiny}}
probe: {{steps: 30, batch: 32, device: cpu, telemetry_every: 10, threads: 1}}
budget: {{trials: 4, trial_timeout_s: 120, target_steps: 90}}
rungs: {{eta: 2, min_promote: 2, grow: always}}
sampler: {{name: random, seed: 0}}
verify: {{top_k: 2, seeds: 6}}
knobs:
  clip_norm: {{low: 0.1, high: 5.0, log: true}}
  warmup_steps: {{low: 0, high: 10}}
"""


def _ignore_sigint() -> None:
    """As a shell starts a script's background job (`autotune study ... &`): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_at(
    cmd: list[str],
    cwd: Path,
    line: str,
    sig: int,
    *,
    as_job: bool = False,
    group: bool = False,
    seen: dict[str, float] | None = None,
    token: str | None = None,
) -> tuple[int, str]:
    """Run `cmd` in its own process group; once its output shows `line`, send `sig` (SIGINT
    to the group, as Ctrl-C does; SIGTERM to the driver, as `timeout` does, or with `group` to
    the whole group, as a batch scheduler cancelling the job does) and wait for its end: (exit
    status, output). `seen` gets the driver's pid and the seconds from the signal to the end
    (`took`); `token` is the run's `AUTOTUNE_TEST_TOKEN` (a new one by default)."""
    log = cwd / f"run-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=h.cli_env(token or h.new_token()),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_ignore_sigint if as_job else None,
        )
    try:
        deadline = time.monotonic() + 300
        while line not in log.read_text():
            assert proc.poll() is None, f"ended before {line!r}\n{log.read_text()[-6000:]}"
            assert time.monotonic() < deadline, f"no {line!r} in 300 s\n{log.read_text()[-6000:]}"
            time.sleep(0.1)
        sent = time.monotonic()
        if sig == signal.SIGINT or group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        rc = proc.wait(timeout=120)
        if seen is not None:
            seen.update(pid=proc.pid, took=time.monotonic() - sent)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return rc, log.read_text()


def _stopped(rc: int, out: str, status: int, said: str, name: str) -> None:
    assert rc == status, f"exit status {rc}, not {status}\n{out[-6000:]}"
    assert said in out, f"no {said!r}\n{out[-6000:]}"
    assert f"study {name}: " in out.split(said, 1)[1], f"no summary after the stop\n{out[-6000:]}"
    assert "Traceback" not in out and "SIGTERM received" not in out, out[-6000:]


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy")
@pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes")
def test_sigterm_stops_the_screen_and_the_rungs(tmp_path: Path) -> None:
    """Ray's core worker set a SIGTERM handler of its own that aborted the driver (status 134,
    a crash report, the MLflow run left RUNNING); SIGTERM now stops as Ctrl-C does, status 143,
    in the screen and (resumed) in the rungs.

    Ray starts in a thread of the driver (`study/ray_start.py`), where Ray sets no Python
    SIGTERM handler, and its core worker sets a C++ one that aborts (status 134, which a test
    took for a clean stop): the driver's own (`study/signals.py`) stops the study as a Ctrl-C
    does (status 143), its `finally` clauses run and nothing it started outlives it. (That was
    `test_study.py`'s test of a study of its own stopped while a probe ran, checked here.)"""
    from mlflow.tracking import MlflowClient

    name, uri = "termed", h.sqlite_uri(tmp_path)
    space = h.write(tmp_path, SPACE.format(name=name))
    cmd = h.autotune_cmd("study", "--space", str(space), "--tracking-uri", uri)
    token = h.new_token()
    rc, out = _stop_at(cmd, tmp_path, "trial   1  complete", signal.SIGTERM, token=token)
    _stopped(rc, out, 143, "interrupted: ", name)
    assert "SIGTERM handler is not set" not in out, "Ray's note about its thread reached the user"
    left = h.wait_gone(token, timeout=30)
    assert not left, f"processes outlived the terminated driver: {left}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], "tags.`autotune.role` = 'study'")
    assert [r.info.status for r in runs] == ["FINISHED"], "the study's MLflow run not ended"

    rc, out = _stop_at([*cmd, "--resume"], tmp_path, "rung 1:", signal.SIGTERM)
    _stopped(rc, out, 143, "interrupted during the rungs", name)


@pytest.mark.integration
def test_sigterm_to_the_whole_process_group_ends_the_driver_at_once(tmp_path: Path) -> None:
    """A SIGTERM to the driver's process group (a batch scheduler cancelling the job) reaches
    the local Ray's own processes too: its GCS stops answering, and the driver waited 60 s in
    Ray's code before Ray ended it (status 1, no word of why). Now it says so and exits 143 at
    once, its MLflow runs ended KILLED; the same command with --resume finishes the study.
    Where the driver was not waiting inside Ray's code it stops as on a SIGTERM of its own,
    with its summary; it then skipped `ray.shutdown()` of a GCS already gone, which waited ~8 s
    after the summary (so the bound below), and ended the raylet's agents that outlive it.

    Then Ctrl-C, in the rungs and (resumed) in the verification, and resumed to the end
    (`_ctrl_c_stops_the_rungs_and_the_verification`): the --resume that finishes the study
    stopped by the group's SIGTERM is those three runs. (Two tests, each a study of this
    space from its start, share this one.)"""
    name = "group"
    space = h.write(tmp_path, SPACE.format(name=name))
    cmd = h.autotune_cmd("study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path))
    seen: dict[str, float] = {}
    rc, out = _stop_at(cmd, tmp_path, "trial   1  complete", signal.SIGTERM, group=True, seen=seen)
    assert rc == 143, f"exit status {rc}\n{out[-6000:]}"  # Ray's end after 60 s: status 1
    assert "the local Ray was stopped by a SIGTERM" in out or "interrupted: " in out, out[-6000:]
    assert "Failed to connect to GCS" not in out, out[-6000:]
    # ~2.5 s on an idle 2-core machine, 8-9 s while the driver waited for Ray's shutdown
    took = seen["took"]
    assert took < 7.0, f"{took:.1f} s from the signal to the end\n{out[-3000:]}"
    # The raylet's agents do not outlive the study (they never end on their own; an idle
    # worker left by the raylet ends within seconds). A guard: a driver that ended before its
    # raylet had (no wait for it) left both agents running once by hand, not reproduced here.
    deadline = time.monotonic() + 20
    while (left := _session_processes(int(seen["pid"]))) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left
    # ended KILLED before the exit (`signals.on_abort`), not left RUNNING in the MLflow UI
    assert _mlflow_running(h.sqlite_uri(tmp_path), name) == []
    done = _ctrl_c_stops_the_rungs_and_the_verification(cmd, tmp_path, name)
    assert f"study {name}: 4/4 trials" in done.stdout, h.explain(done)


def _ctrl_c_stops_the_rungs_and_the_verification(
    cmd: list[str], cwd: Path, name: str
) -> subprocess.CompletedProcess[str]:
    """Stopped in the rungs, then (resumed) in the verification, then resumed to the end; the
    last run. The driver starts with SIGINT ignored, as a script's background job does: Ray
    Tune's handler took SIGINT for the screen and kept it after, so both stops were ignored.
    (The study was stopped in its screen: the first run here runs the rest of it with Tune.)"""
    rc, out = _stop_at([*cmd, "--resume"], cwd, "rung 1:", signal.SIGINT, as_job=True)
    _stopped(rc, out, 130, "interrupted during the rungs", name)

    rc, out = _stop_at([*cmd, "--resume"], cwd, "verifying", signal.SIGINT, as_job=True)
    assert "rung 1:" in out, f"the resumed study did not finish the rungs\n{out[-6000:]}"
    _stopped(rc, out, 130, "interrupted during verification", name)

    done = h.autotune([*cmd[3:], "--resume"], cwd, timeout=400)
    assert done.returncode == 0, h.explain(done)
    assert "rung 1:" not in done.stdout, f"the rungs ran again\n{h.explain(done)}"
    assert "verified with seeds [1, 2, 3, 4, 5, 6]" in done.stdout, h.explain(done)
    return done


def _session_processes(driver: int) -> list[str]:
    """The Ray processes (`ray::...`, not zombies) still running with a file open in the Ray
    session of the driver `driver` (Ray names the session's folder after the driver's pid)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            if not cmd.startswith(b"ray::"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if "/session_" in target and f"_{driver}/" in target:
                    found.append(f"{entry.name} {cmd.split(bytes(1))[0].decode()}")
                    break
    return found


def _raylet_of(pid: int) -> int | None:
    """The raylet the driver `pid` started (its child), if it is running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except (OSError, IndexError):
            continue
        if int(stat[1]) == pid and cmd.endswith(b"/raylet") and stat[0] != "Z":
            return int(entry.name)
    return None


@pytest.mark.integration
def test_the_local_raylet_ending_ends_the_driver_at_once(tmp_path: Path) -> None:
    """A SIGTERM to the process group once left the GCS answering and the raylet ended: the
    driver waited for ever in Tune's clean-up (removing a placement group asks the raylet), no
    line, no end (seen in a test run killed from outside). The raylet is watched as the GCS is:
    killed under a running screen, the driver says so and exits within seconds."""
    space = h.write(tmp_path, SPACE.format(name="raylet"))
    cmd = h.autotune_cmd("study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path))
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=h.cli_env(h.new_token()), stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while "trial   1  complete" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-6000:]
            time.sleep(0.1)
        raylet = _raylet_of(proc.pid)
        assert raylet is not None, "no raylet found under the driver"
        os.kill(raylet, signal.SIGKILL)
        killed = time.monotonic()
        rc = proc.wait(timeout=60)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = log.read_text()
    assert rc == 1, f"exit status {rc}\n{out[-6000:]}"
    assert "the local Ray's node manager (raylet) ended (status -9)" in out, out[-6000:]
    assert took < 20, f"{took:.0f} s after the raylet ended\n{out[-6000:]}"
    assert _mlflow_running(h.sqlite_uri(tmp_path), "raylet") == []  # ended KILLED before it


def test_a_signal_after_ray_is_up_is_noted_not_raised() -> None:
    """Once Ray is up a signal only notes the stop (the phases stop at their next probe); the
    handlers found before are put back on leaving, and the status says which signal it was."""
    found: Callable[..., object] | int | None = signal.getsignal(signal.SIGTERM)
    with signals.handled():
        signals.defer()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert signals.stopping() and signals.exit_status() == 143
    assert signal.getsignal(signal.SIGTERM) == found
    with signals.handled():  # another study in the same process starts afresh
        assert not signals.stopping()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert signals.exit_status() == 130


# One baseline and one searched trial, each probe a few seconds: long enough to be stopped in.
SHORT = """\
name: {name}
workload: {{name: mlp, size: tiny}}
probe: {{steps: {steps}, batch: 32, device: cpu, telemetry_every: 10, threads: 1}}
budget: {{trials: 2, trial_timeout_s: 120}}
sampler: {{name: random, seed: 0}}
verify: {{top_k: 0}}
knobs:
  clip_norm: {{low: 0.1, high: 5.0, log: true}}
"""


def _mlflow_running(uri: str, name: str) -> list[str]:
    """The study's MLflow runs (by name) left RUNNING."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'")
    return [r.info.run_name for r in runs]


# The driver with no grace for the MLflow writes queued at a stop (`writer.STOP_GRACE_S`, 10 s
# by default: as a stop lands while a long series is logged): a real `autotune study` process.
_NO_GRACE = (
    "import runpy, autotune.study.writer as w; w.STOP_GRACE_S = 0.0; "
    "runpy.run_module('autotune', run_name='__main__', alter_sys=True)"
)


@pytest.mark.integration
def test_a_stop_during_the_last_writes_leaves_no_mlflow_run_running(tmp_path: Path) -> None:
    """A Ctrl-C while the last trial's run was logged: the driver gave up on the write (its
    grace over), skipped the summary, and left the study's run and the trial's RUNNING in MLflow
    for ever. Both are ended KILLED; --resume logs the trial again and ends the study's run."""
    name, uri = "stopped-writes", h.sqlite_uri(tmp_path)
    space = h.write(tmp_path, SHORT.format(name=name, steps=1500).replace("trials: 2", "trials: 1"))
    args = ["study", "--space", str(space), "--tracking-uri", uri]
    cmd = [sys.executable, "-c", _NO_GRACE, *args]
    rc, out = _stop_at(cmd, tmp_path, "baseline   0  complete", signal.SIGINT)
    assert rc in (0, 130) and "Traceback" not in out, f"exit status {rc}\n{out[-6000:]}"
    assert "could not be logged to MLflow" in out, f"the write was not cut short\n{out[-6000:]}"
    assert _mlflow_running(uri, name) == [], out[-6000:]

    done = h.autotune([*args, "--resume"], tmp_path, timeout=400)
    assert done.returncode == 0, h.explain(done)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id])
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [
        ("stopped-writes", "FINISHED"),
        ("trial-0000-baseline", "FINISHED"),
    ], runs
