"""Start one probe in its own process, watch it, and say what became of it.

Runs on a Ray worker (possibly on another node). Each trial's probe is its own process, whose
environment holds the trial's environment knobs before torch starts, and whose whole process
group is killed when it outlives the trial's time limit.

Starting Python and importing torch (and torch._dynamo, which the first optimizer pulls in)
costs seconds per trial. So with `spare=True` (Ray Tune trials) a worker keeps a *zygote*, a
fork server (`python -m autotune.spare --zygote`) that did those imports once, and each trial's
probe is a child it forks: a trial starts in ~10 ms instead of seconds, the import is paid once
per worker and environment, and nothing ever imports torch beside a measured training loop
(throughput is an objective: a second process importing torch on a 2-core machine slowed a
running probe by 10-30% in our measurements). The child is a probe process as a fresh one
would be (its own process group, SIGKILL when its parent dies, its output on a pipe that only
it holds, its exit status reported as `Popen.returncode` reports it): see `autotune.spare`.

Either way the probe reports on a channel of its own (`autotune.report`): a pipe and a nonce
made for that one trial. What the probe process prints is its log (the tail is kept for the
failure's cause), never a report.

A zygote serves only trials whose environment (`probe_env`) is exactly the one it was started
with: environment knobs (NCCL_*, HSA_*, ...) are read by libraries when torch and its device
runtimes start, which in a forked child has already happened. A trial of another environment,
or one that finds the zygote dead, replaces it with a new one (the import is then on that
trial's path, as for a fresh process). The zygote never initialises CUDA/ROCm, which cannot be
used in a child forked after that. A fork request that fails (zygote dead or unresponsive)
costs no trial: the zygote is discarded, the trial runs in a fresh process, and a new zygote is
started once that trial's training loop has ended (its summary is reported). With
`spare=False` every trial gets a fresh process (`python -m autotune.spare`, config path on
stdin).

Nothing outlives the worker: the zygote dies with it (PR_SET_PDEATHSIG), its children with the
zygote; `discard_zygote()` kills it.
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
from typing import IO, Any, Protocol

from autotune import space as sp
from autotune.report import Channel
from autotune.spare import MAX_MESSAGE, ZYGOTE_ARG, die_with_parent

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
ZYGOTE_READY_S = 180.0  # for a new zygote's imports; past that, the trial runs in a fresh one
FORK_REPLY_S = 20.0  # for the zygote's answer to a fork request (it takes milliseconds)

# Processes are started from one long-lived thread: PR_SET_PDEATHSIG fires when the *thread*
# that forked the child ends, and Ray Tune runs each trial in a thread of its own.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autotune-spawner")
_ZYGOTE: Zygote | None = None  # this worker's zygote
_ZYGOTE_LOCK = threading.Lock()


def probe_env(env_knobs: Mapping[str, str], threads: int | None) -> dict[str, str]:
    """The probe process's environment: this one, minus every knob-prefixed variable, plus the
    trial's environment knobs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(sp.ENV_PREFIXES)}
    env.update({k: str(v) for k, v in env_knobs.items()})
    env["PYTHONUNBUFFERED"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def _popen(
    args: list[str], env: Mapping[str, str], stdin: int, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[str]:
    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            pass_fds=pass_fds,
            env=dict(env),
            text=True,
            bufsize=1,
            start_new_session=True,  # the probe and all it starts are one process group
            preexec_fn=die_with_parent,  # in the probe process: SIGKILL when the worker dies
        )

    return _SPAWNER.submit(start).result()


class ProbeProcess(Protocol):
    """What `_watch` needs of a probe process: a `subprocess.Popen`, or a `ForkedProbe`."""

    pid: int
    returncode: int | None
    stdout: IO[str] | None

    def wait(self, timeout: float | None = None) -> int: ...


class ForkedProbe:
    """A probe process forked by a zygote, with the surface of `subprocess.Popen` that `_watch`
    uses. Its exit status comes from the zygote, which reaps it."""

    def __init__(self, pid: int, stdout: IO[str], status: socket.socket, zygote_pid: int):
        self.pid = pid
        self.stdout: IO[str] | None = stdout
        self.returncode: int | None = None
        self.zygote_pid = zygote_pid
        self._status = status

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status as `Popen.returncode` (-N: died from signal N); raises
        `subprocess.TimeoutExpired` if it still runs after `timeout` seconds."""
        if self.returncode is not None:
            return self.returncode
        try:
            self._status.settimeout(None if timeout is None else max(timeout, 1e-6))
            data = self._status.recv(MAX_MESSAGE)
        except TimeoutError:
            raise subprocess.TimeoutExpired(f"probe {self.pid}", timeout or 0) from None
        except OSError:
            data = b""
        try:
            wait_status = json.loads(data).get("status") if data else None
        except ValueError:
            wait_status = None
        # No status: the zygote died, and the child with it (SIGKILL, PR_SET_PDEATHSIG).
        self.returncode = (
            os.waitstatus_to_exitcode(wait_status) if wait_status is not None else -signal.SIGKILL
        )
        self._status.close()
        return self.returncode


class Zygote:
    """This worker's fork server for one environment (see `autotune.spare`)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = _popen(
                [sys.executable, "-m", "autotune.spare", ZYGOTE_ARG], env, theirs.fileno()
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pid = self.proc.pid
        self.ctl = ours
        self.ready = False
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        # Its own output (an import error, say) is read and dropped: a trial it fails runs in a
        # fresh process, whose log tail shows the same error.
        with contextlib.suppress(Exception):
            assert self.proc.stdout is not None
            for _line in self.proc.stdout:
                pass
            self.proc.stdout.close()
            self.proc.wait()  # reaped, whether killed or gone on its own

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _wait_ready(self, timeout: float) -> bool:
        if not self.ready:
            self.ctl.settimeout(timeout)
            msg = json.loads(self.ctl.recv(MAX_MESSAGE) or b"{}")
            self.ready = msg.get("ready") == self.pid
        return self.ready

    def fork(self, cfg_path: str, channel: Channel) -> ForkedProbe | None:
        """A child running the probe of `cfg_path`, reporting on `channel`; None if the zygote
        did not make one."""
        fds: list[int] = []
        status: socket.socket | None = None
        try:
            if not self._wait_ready(ZYGOTE_READY_S):
                return None
            out_r, out_w = os.pipe()
            fds += [out_r, out_w]
            status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with theirs:
                req = json.dumps({"cfg": cfg_path, "cwd": os.getcwd(), "nonce": channel.nonce})
                fds_out = [out_w, theirs.fileno(), channel.write_fd]
                socket.send_fds(self.ctl, [req.encode()], fds_out, socket.MSG_NOSIGNAL)
            channel.close_child_end()  # the zygote passes it on to the child only
            os.close(out_w)  # the child holds the only write end
            fds.remove(out_w)
            status.settimeout(FORK_REPLY_S)
            pid = json.loads(status.recv(MAX_MESSAGE) or b"{}").get("pid")
            if not isinstance(pid, int) or pid <= 0:
                return None
            stdout = os.fdopen(out_r, "r", encoding="utf-8", errors="replace")
            fds.remove(out_r)
            child = ForkedProbe(pid, stdout, status, self.pid)
            status = None
            return child
        except (OSError, ValueError):  # dead, unresponsive, or a garbled answer
            return None
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if status is not None:
                status.close()

    def retire(self) -> None:
        """Stop its serving; it leaves once no child of its own runs (at once, between trials)."""
        with contextlib.suppress(OSError):
            self.ctl.close()

    def kill(self) -> None:
        """Kill it now; its children die with it (PR_SET_PDEATHSIG)."""
        _kill(self.proc)
        with contextlib.suppress(OSError):
            self.ctl.close()


def _zygote_for(env: Mapping[str, str]) -> tuple[Zygote | None, bool]:
    """With `_ZYGOTE_LOCK` held: this worker's zygote for `env` and whether it was there
    already. Otherwise the one there is retired (of another environment: it leaves at once when
    idle) or reaped (dead), and a new one is started (None if that failed)."""
    global _ZYGOTE
    zygote = _ZYGOTE
    if zygote is not None and zygote.env == dict(env) and zygote.alive():
        return zygote, True
    if zygote is not None:
        if zygote.alive():
            zygote.retire()
        else:
            zygote.kill()
    _ZYGOTE = None
    with contextlib.suppress(OSError):
        _ZYGOTE = Zygote(env)
    return _ZYGOTE, False


def _fork_from_zygote(
    env: Mapping[str, str], cfg_path: str, channel: Channel
) -> tuple[ForkedProbe | None, bool]:
    """(this trial's probe forked by the worker's zygote for `env`, whether that zygote was
    there before this trial); (None, _) if the fork failed (the zygote is then discarded)."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        zygote, there = _zygote_for(env)
        child = zygote.fork(cfg_path, channel) if zygote is not None else None
        if child is None and zygote is not None:
            zygote.kill()
            _ZYGOTE = None
        return child, there


def start_zygote(env: Mapping[str, str]) -> None:
    """Start a zygote for `env` (replacing this worker's zygote) unless one is there."""
    with _ZYGOTE_LOCK:
        _zygote_for(env)


def discard_zygote() -> None:
    """Kill this worker's zygote, if any (and the probes it runs)."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        zygote, _ZYGOTE = _ZYGOTE, None
    if zygote is not None:
        zygote.kill()


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
    except (OSError, ValueError):  # it died meanwhile
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
    """Run one probe in a process of its own; return `{outcome, cause, error, log_tail,
    summary, fingerprint, wall_s, node, zygote, spare, start_s}`. Never raises for what the
    probe does.

    With `spare=True` the probe is forked by this worker's zygote for the trial's environment
    (started first if need be), else, or if that fails, it is a fresh process. `zygote`: the
    pid of the zygote that forked it (None: a fresh process); `spare`: that zygote was there
    before this trial (its imports were not on this trial's path); `start_s`: seconds from
    asking for the process to the probe's `start` event."""
    env = probe_env(env_knobs, threads)
    with tempfile.NamedTemporaryFile(
        "w", suffix=".json", prefix="autotune-probe-", delete=False
    ) as f:
        json.dump({**probe, "threads": threads or probe.get("threads")}, f)
        cfg_path = f.name
    t0 = time.time()
    proc: ProbeProcess | None = None
    zygote_there = False
    channel = Channel()
    if spare:
        proc, zygote_there = _fork_from_zygote(env, cfg_path, channel)
    if proc is None:
        channel.close()  # a zygote that failed may hold its write end: a new channel
        channel = Channel()
        try:
            fresh = _popen(
                [sys.executable, "-m", "autotune.spare"],
                {**env, **channel.env()},
                subprocess.PIPE,
                (channel.write_fd,),
            )
        finally:
            channel.close_child_end()
        _hand_over(fresh, cfg_path)
        proc = fresh
    forked = isinstance(proc, ForkedProbe)
    started: list[float] = []

    def event(msg: dict[str, Any]) -> None:
        if msg.get("event") == "start" and not started:
            started.append(time.time())
        # A zygote that failed is replaced once this trial's loop is over (see above).
        if spare and not forked and msg.get("event") == "summary":
            with contextlib.suppress(Exception):
                start_zygote(env)
        if on_event is not None:
            on_event(msg)

    try:
        out = _watch(proc, channel, timeout_s, event)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(cfg_path)
    out["wall_s"] = time.time() - t0
    out["zygote"] = proc.zygote_pid if isinstance(proc, ForkedProbe) else None
    out["spare"] = forked and zygote_there
    out["start_s"] = started[0] - t0 if started else None
    return out


def _watch(
    proc: ProbeProcess,
    channel: Channel,
    timeout_s: float,
    on_event: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    events: dict[str, dict[str, Any]] = {}

    def read_log() -> None:  # whatever it prints: its log, never a report
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip()[:2000])

    def read_reports() -> None:
        for msg in channel.reports():
            events[msg["event"]] = msg
            if on_event is not None:
                with contextlib.suppress(Exception):
                    on_event(msg)

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    reports = threading.Thread(target=read_reports, daemon=True)
    reports.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the probe and anything it started
        except ProcessLookupError:  # no group (yet): the process alone
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        reports.join(timeout=10)  # the probe held the only write end: it ends with it
        reader.join(timeout=10)
        # Still reading: a process that left the probe's group holds its output open. Closing
        # the stream would wait for the reader's lock for ever; the reader ends with the pipe.
        if not reader.is_alive():
            with contextlib.suppress(Exception):
                if proc.stdout is not None:
                    proc.stdout.close()
    if channel.rejected:
        tail.append(channel.rejected_note())
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
        early = " (the workload ended the process early)" if rc == 0 else ""
        out.update(
            outcome="failed",
            cause="crash",
            error=f"the probe process exited with status {rc} without a summary{early}",
        )
    return out
