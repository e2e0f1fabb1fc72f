"""Start one probe in a fresh process, watch it, and say what became of it.

Runs on a Ray worker (possibly on another node). Each trial's probe is its own process, whose
environment holds the trial's environment knobs before Python starts, and whose whole process
group is killed when it outlives the trial's time limit.

Starting Python and importing torch (and torch._dynamo, which the first optimizer pulls in)
costs seconds per trial. So when a trial's training loop has ended (its summary is reported),
the worker starts a *spare* for the next trial: a process with the same environment that does
those imports (`autotune.spare`) and then waits on its stdin for a config path. The import thus
runs while the trial process exits and the driver records the trial and asks Optuna for the next
one, never beside a measured training step (throughput is an objective: a second process
importing torch on a 2-core machine slowed a running probe by 10-30% in our measurements). The
next trial on this worker takes the spare if its environment is exactly the trial's (always,
when no environment knob is searched), waiting for it to finish importing if need be;
otherwise the spare is discarded and a fresh process started. The knobs reach the spare with the
config; its environment was set before it started, as for a fresh process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from autotune import space as sp
from autotune.probe import LINE_PREFIX
from autotune.spare import READY_LINE

LOG_TAIL_LINES = 60
FAILED_CAUSES = (
    "exception",
    "timeout",
    "killed",
    "crash",
    "worker_died",
    "comm_hang",  # a collective that never finished (DDP probes: autotune.distributed)
    "comm_incorrect",  # an all-reduce of known values gave a wrong answer
)

# Processes are started from one long-lived thread: PR_SET_PDEATHSIG fires when the *thread*
# that forked the child ends, and Ray Tune runs each trial in a thread of its own.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autotune-spawner")
_SPARE: dict[str, Any] = {}  # {"env": dict, "proc": Popen}
_SPARE_LOCK = threading.Lock()


def _die_with_parent() -> None:
    """In the probe process: get SIGKILL when the process that started it dies (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def probe_env(env_knobs: Mapping[str, str], threads: int | None) -> dict[str, str]:
    """The probe process's environment: this one, minus every knob-prefixed variable, plus the
    trial's environment knobs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(sp.ENV_PREFIXES)}
    env.update({k: str(v) for k, v in env_knobs.items()})
    env["PYTHONUNBUFFERED"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def _popen(args: list[str], env: Mapping[str, str], stdin: int) -> subprocess.Popen[str]:
    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            env=dict(env),
            text=True,
            bufsize=1,
            start_new_session=True,  # the probe and all it starts are one process group
            preexec_fn=_die_with_parent,
        )

    return _SPAWNER.submit(start).result()


def start_spare(env: Mapping[str, str]) -> None:
    """Start a spare probe process with this environment (replacing any other spare)."""
    discard_spare()
    proc = _popen([sys.executable, "-m", "autotune.spare"], env, subprocess.PIPE)
    ready = threading.Event()

    def wait_ready() -> None:
        with contextlib.suppress(Exception):
            assert proc.stdout is not None
            if proc.stdout.readline().strip() == READY_LINE:
                ready.set()

    threading.Thread(target=wait_ready, daemon=True).start()
    with _SPARE_LOCK:
        _SPARE.update(env=dict(env), proc=proc, ready=ready)


def take_spare(env: Mapping[str, str], wait_s: float = 60.0) -> subprocess.Popen[str] | None:
    """The spare if its environment is exactly `env` and it is alive, once it has finished its
    imports (waiting up to `wait_s`: it started before a fresh process would); else None (and
    any spare is discarded)."""
    with _SPARE_LOCK:
        spare = dict(_SPARE)
        _SPARE.clear()
    proc = spare.get("proc")
    if proc is None:
        return None
    if spare["env"] == dict(env) and proc.poll() is None and spare["ready"].wait(wait_s):
        return proc
    _kill(proc)
    return None


def discard_spare() -> None:
    with _SPARE_LOCK:
        proc = _SPARE.get("proc")
        _SPARE.clear()
    if proc is not None:
        _kill(proc)


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the probe and anything it started
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)
    for stream in (proc.stdin, proc.stdout):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.close()


def _hand_over(proc: subprocess.Popen[str], cfg_path: str) -> bool:
    stdin: IO[str] | None = proc.stdin
    try:
        assert stdin is not None
        stdin.write(cfg_path + "\n")
        stdin.close()
        return True
    except (OSError, ValueError):  # the spare died meanwhile
        _kill(proc)
        return False


def run_trial_process(
    probe: Mapping[str, Any],
    env_knobs: Mapping[str, str],
    *,
    timeout_s: float,
    threads: int | None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    spare: bool = False,
) -> dict[str, Any]:
    """Run one probe in a fresh process; return `{outcome, cause, error, log_tail, summary,
    fingerprint, wall_s, node, spare}`. Never raises for what the probe does.

    With `spare=True` a waiting spare process of the same environment is used if there is one,
    and a new spare is started for the next trial once this one has ended."""
    env = probe_env(env_knobs, threads)
    with tempfile.NamedTemporaryFile(
        "w", suffix=".json", prefix="autotune-probe-", delete=False
    ) as f:
        json.dump({**probe, "threads": threads or probe.get("threads")}, f)
        cfg_path = f.name
    t0 = time.time()
    proc = take_spare(env) if spare else None
    used_spare = proc is not None and _hand_over(proc, cfg_path)
    if not used_spare:
        proc = _popen([sys.executable, "-m", "autotune.spare"], env, subprocess.PIPE)
        _hand_over(proc, cfg_path)
    assert proc is not None

    def event(msg: dict[str, Any]) -> None:
        # The next trial's process starts once this one's training loop is over (see above).
        if spare and msg.get("event") == "summary":
            with contextlib.suppress(Exception):
                start_spare(env)
        if on_event is not None:
            on_event(msg)

    try:
        out = _watch(proc, timeout_s, event)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(cfg_path)
    out["wall_s"] = time.time() - t0
    out["spare"] = used_spare
    return out


def _watch(
    proc: subprocess.Popen[str],
    timeout_s: float,
    on_event: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    events: dict[str, dict[str, Any]] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.rstrip() == READY_LINE:
                continue
            if line.startswith(LINE_PREFIX):
                try:
                    msg = json.loads(line[len(LINE_PREFIX) :])
                except json.JSONDecodeError:
                    tail.append(line.rstrip()[:500])
                    continue
                events[msg.get("event", "?")] = msg
                if on_event is not None:
                    with contextlib.suppress(Exception):
                        on_event(msg)
            else:
                tail.append(line.rstrip()[:2000])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the probe and anything it started
        proc.wait()
    finally:
        reader.join(timeout=10)
        with contextlib.suppress(Exception):
            if proc.stdout is not None:
                proc.stdout.close()
    return outcome_of(proc.returncode, timed_out, timeout_s, events, "\n".join(tail))


def outcome_of(
    rc: int | None,
    timed_out: bool,
    timeout_s: float,
    events: Mapping[str, dict[str, Any]],
    log_tail: str,
) -> dict[str, Any]:
    """What became of a probe process, from its exit status and the events it reported."""
    summary = events.get("summary")
    out: dict[str, Any] = {
        "summary": summary,
        "fingerprint": (events.get("fingerprint") or {}).get("fingerprint"),
        "log_tail": log_tail,
        "error": None,
        "cause": None,
        "node": socket.gethostname(),
    }
    if timed_out:
        out.update(
            outcome="failed",
            cause="timeout",
            error=f"the probe ran past the trial time limit of {timeout_s:g} s and was "
            "killed (hung collective or too slow: raise budget.trial_timeout_s)",
        )
    elif summary is not None and rc == 0:
        status = summary["status"]
        out["outcome"] = {"ok": "complete"}.get(status, status)
        out["cause"] = (
            summary.get("divergence_cause")
            if status == "diverged"
            else ("oom" if status == "oom" else None)
        )
    elif "error" in events:
        err = events["error"]
        out.update(
            outcome="failed",
            cause=err.get("cause") or "exception",
            error=f"{err['error_type']}: {err['message']}",
        )
        out["log_tail"] = (out["log_tail"] + "\n" + err.get("traceback", "")).strip()
    elif rc is not None and rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        killed = -rc in (signal.SIGKILL, signal.SIGTERM)
        out.update(
            outcome="failed",
            cause="killed" if killed else "crash",
            error=f"the probe process died from {name}"
            + (" (killed: out of memory, or stopped from outside)" if killed else ""),
        )
    else:
        out.update(
            outcome="failed",
            cause="crash",
            error=f"the probe process exited with status {rc} without a summary",
        )
    return out
