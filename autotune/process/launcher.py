"""Start one probe in its own process, watch it, and say what became of it.

Runs on a Ray worker (possibly on another node). Each trial's probe is its own process, whose
environment holds the trial's environment knobs before torch starts, and whose whole process
group is killed when it outlives the trial's time limit.

Starting Python and importing torch (and torch._dynamo, which the first optimizer pulls in)
costs seconds per trial. So with `spare=True` (a study's probes on CPU workers) a worker keeps
a *zygote*, a fork server (`python -m autotune.process.zygote`) that did those imports once, and
each trial's probe is a child it forks: a trial starts in ~10 ms instead of seconds, the import
is paid once per worker and environment, and nothing ever imports torch beside a measured loop
(throughput is an objective: a second process importing torch on a 2-core machine slowed a
running probe by 10-30% in our measurements). The child is a probe process as a fresh one
would be (its own process group, SIGKILL when its parent dies, its output on a pipe that only
it holds, its exit status reported as `Popen.returncode` reports it): see
`autotune.process.zygote`.

Either way the probe reports on a channel of its own (`autotune.process.channel`): a pipe and a
nonce made for that one trial. What the probe process prints is its log (the tail is kept for the
failure's cause), never a report.

A zygote serves only trials whose environment (`probe_env`) is exactly the one it was started
with: environment knobs (NCCL_*, HSA_*, ...) are read by libraries when torch and its device
runtimes start, which in a forked child has already happened. A trial of another environment,
or one that finds the zygote dead, replaces it with a new one (the import is then on that
trial's path, as for a fresh process). The zygote never initialises CUDA/ROCm, which cannot be
used in a child forked after that. A fork request that fails (zygote dead or unresponsive)
costs no trial: the zygote is discarded, the trial runs in a fresh process, and a new zygote is
started once that trial's training loop has ended (its summary is reported). With
`spare=False` every trial gets a fresh process (`python -m autotune.process.entry -`, config
path on stdin).

Nothing outlives the worker: the zygote dies with it (PR_SET_PDEATHSIG), its children with the
zygote; `autotune.process.zygotes.discard_zygote()` kills it. Which zygotes a process keeps,
and for how long: `autotune.process.zygotes`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import IO, Any, Protocol

from autotune.errors import WorkloadError
from autotune.probe.config import ProbeConfig
from autotune.probe.outcome import Outcome
from autotune.probe.summary import ProbeStatus
from autotune.process import memory_limit, probe_file
from autotune.process.channel import Channel, closed_cause
from autotune.process.entry import STDIN_ARG
from autotune.process.env import process_env
from autotune.process.partial import PartialSeries
from autotune.process.spawn import kill_group, popen, python_module
from autotune.process.zygote import ForkedProbe
from autotune.process.zygotes import fork_from_zygote, start_zygote

LOG_TAIL_LINES = 60
FAILED_CAUSES = (
    "exception",
    "timeout",
    "killed",
    "crash",
    "worker_died",  # the Ray worker never returned (autotune.study.workers)
    "worker_error",  # autotune's side of the probe raised on its Ray worker
    "comm_hang",  # a collective that never finished (DDP probes: autotune.process.supervisor)
    "comm_incorrect",  # an all-reduce of known values gave a wrong answer
    "no_reports",  # a training script that never called trial.report (autotune.probe.script)
    "bad_report",  # a training script's report out of order or not a number
)


def probe_env(env_knobs: Mapping[str, str], threads: int | None) -> dict[str, str]:
    """The probe process's environment: this one, minus every knob-prefixed variable, plus the
    trial's environment knobs."""
    return process_env(env_knobs, threads, clean=True)


class ProbeProcess(Protocol):
    """What `_watch` needs of a probe process: a `subprocess.Popen`, or a `ForkedProbe`."""

    pid: int
    returncode: int | None
    stdout: IO[str] | None

    def wait(self, timeout: float | None = None) -> int: ...


def _hand_over(proc: subprocess.Popen[str], cfg_path: str) -> bool:
    stdin: IO[str] | None = proc.stdin
    try:
        assert stdin is not None
        stdin.write(cfg_path + "\n")
        stdin.close()
        return True
    except (OSError, ValueError):  # it died meanwhile
        kill_group(proc)
        return False


def run_trial_process(
    probe: Mapping[str, Any],
    env_knobs: Mapping[str, str],
    *,
    timeout_s: float,
    threads: int | None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    spare: bool = False,
    extra_env: Mapping[str, str] | None = None,
    on_log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run one probe in a process of its own; return `{outcome, cause, error, log_tail,
    summary, fingerprint, wall_s, node, zygote, spare, start_s}`. Never raises for what the
    probe does.

    With `spare=True` the probe is forked by this worker's zygote for the trial's environment
    (started first if need be), else, or if that fails, it is a fresh process. `zygote`: the
    pid of the zygote that forked it (None: a fresh process); `spare`: that zygote was there
    before this trial (its imports were not on this trial's path); `start_s`: seconds from
    asking for the process to the probe's `start` event. `extra_env`: variables of autotune's
    own for the process (not knobs: never recorded), e.g. the zygote's `AUTOTUNE_PRELOAD`.
    `on_log(line)`: each line the probe process prints, as it comes (`autotune probe`)."""
    env = {**probe_env(env_knobs, threads), **(extra_env or {})}
    cfg_path = probe_file.write({**probe, "threads": threads or probe.get("threads")})
    t0 = time.time()
    proc: ProbeProcess | None = None
    zygote_there = False
    channel = Channel()
    if spare:
        proc, zygote_there = fork_from_zygote(env, cfg_path, channel)
    if proc is None:
        channel.close()  # a zygote that failed may hold its write end: a new channel
        channel = Channel()
        try:
            fresh = popen(
                python_module("autotune.process.entry", STDIN_ARG),
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
        multi = int(probe.get("world_size") or 1) > 1  # DDP: a collective may hang
        out = _watch(proc, channel, timeout_s, event, on_log, multi=multi)
    finally:
        probe_file.remove(cfg_path)
    out["wall_s"] = time.time() - t0
    out["zygote"] = proc.zygote_pid if isinstance(proc, ForkedProbe) else None
    out["spare"] = forked and zygote_there
    out["start_s"] = started[0] - t0 if started else None
    return out


class ProbeFailed(WorkloadError):
    """A probe run apart (`run_apart`) that gave no result: `out`, what `run_trial_process`
    said of it (its cause and error). One line, as the CLI prints a user error."""

    def __init__(self, out: Mapping[str, Any]) -> None:
        self.out = dict(out)
        super().__init__(f"the probe failed ({out.get('cause')}): {out.get('error')}")

    def record(self) -> dict[str, Any]:
        """The failure as `autotune probe --json` prints it."""
        return {
            "status": Outcome.FAILED.value,
            "cause": self.out.get("cause"),
            "error": self.out.get("error"),
        }


def run_apart(
    cfg: ProbeConfig,
    report: Callable[[dict[str, Any]], None] | None = None,
    *,
    timeout_s: float,
    on_log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The probe `cfg` in a process of its own, as a trial runs it (`run_trial_process`: its
    environment knobs, threads and time limit): its summary, or `ProbeFailed` when it gave
    none (it raised, reported badly, crashed, called os._exit, ran past `timeout_s`)."""
    out = run_trial_process(
        cfg.to_dict(),
        cfg.env,
        timeout_s=timeout_s,
        threads=cfg.threads,
        on_event=report,
        on_log=on_log,
    )
    if out["summary"] is None or out["outcome"] == Outcome.FAILED:
        raise ProbeFailed(out)
    return dict(out["summary"])


def _watch(
    proc: ProbeProcess,
    channel: Channel,
    timeout_s: float,
    on_event: Callable[[dict[str, Any]], None] | None,
    on_log: Callable[[str], None] | None = None,
    *,
    multi: bool = False,
) -> dict[str, Any]:
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    events: dict[str, dict[str, Any]] = {}
    partial = PartialSeries()  # the steps reported, for a probe that ends without a summary
    said = threading.Event()  # its summary or error came, or its report stream ended

    def read_log() -> None:  # whatever it prints: its log, never a report
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip()[:2000])
            if on_log is not None:
                with contextlib.suppress(Exception):
                    on_log(line.rstrip("\n"))

    def read_reports() -> None:
        try:
            for msg in channel.reports():
                events[msg["event"]] = msg
                if msg["event"] == "telemetry":
                    partial.add(msg)
                elif msg["event"] in ("summary", "error"):
                    said.set()  # the probe's last word: nothing more is waited for
                if on_event is not None:
                    with contextlib.suppress(Exception):
                        on_event(msg)
        finally:
            said.set()  # the stream ended: nothing more to wait for either

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    reports = threading.Thread(target=read_reports, daemon=True)
    reports.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
        # What the probe started and left running in its group (a forked helper, a data loader
        # pool never shut down) ends with it: it would hold the next trials' cores.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the probe and anything it started
        except ProcessLookupError:  # no group (yet): the process alone
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    except BaseException:  # e.g. Ctrl-C in `autotune probe`: the probe goes with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        # The probe held the only write ends: they end with it, unless a process it started
        # left its group holding them (a `setsid` child): once the probe has said how it ended
        # (its summary or its error), nothing more is waited for than its last lines.
        said.wait(timeout=10.0)
        reports.join(timeout=1.0)  # its last lines after its last word
        said_it = "summary" in events or "error" in events
        reader.join(timeout=2 if said_it else 10)
        # Still reading: a process that left the probe's group holds its output open. Closing
        # the stream would wait for the reader's lock for ever; the reader ends with the pipe.
        if not reader.is_alive():
            with contextlib.suppress(Exception):
                if proc.stdout is not None:
                    proc.stdout.close()
    if channel.rejected:
        tail.append(channel.rejected_note())
    out = outcome_of(proc.returncode, timed_out, timeout_s, events, "\n".join(tail), multi=multi)
    kept = partial.record() if out["summary"] is None else None
    if kept is not None:  # its curve up to where it ended (logged with the failed trial)
        out["partial"] = kept
    return out


def outcome_of(
    rc: int | None,
    timed_out: bool,
    timeout_s: float,
    events: Mapping[str, dict[str, Any]],
    log_tail: str,
    *,
    multi: bool = False,
) -> dict[str, Any]:
    """What became of a probe process, from its exit status and the events it reported.
    `multi`: a probe of several processes (DDP), whose time-out may be a hung collective."""
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
            outcome=Outcome.FAILED.value,
            cause="timeout",
            error=f"the probe ran past the trial time limit of {timeout_s:g} s and was "
            f"killed ({'hung collective or too slow' if multi else 'too slow, or stuck'}: "
            "raise budget.trial_timeout_s)",
        )
    elif summary is not None and rc == 0:
        status = summary["status"]
        out["outcome"] = Outcome.of_status(status)
        out["cause"] = (
            summary.get("divergence_cause")
            if status == ProbeStatus.DIVERGED
            else ("oom" if status == ProbeStatus.OOM else None)
        )
    elif "error" in events:
        err = events["error"]
        cause = err.get("cause") or "exception"
        # autotune's own findings (a script that never reported, a bad report, a script that
        # exited non-zero) say what was missing; an exception of the workload's is named by its
        # type (its ScriptFailure is autotune's wording, not a type the user raised)
        own = cause in ("no_reports", "bad_report") or err.get("error_type") == "ScriptFailure"
        out.update(
            # out of memory in the workload's setup is `oom`, as in a step (with no summary)
            outcome=Outcome.OOM.value if cause == "oom" else Outcome.FAILED.value,
            cause=cause,
            error=err["message"] if own else f"{err['error_type']}: {err['message']}",
        )
        out["log_tail"] = (out["log_tail"] + "\n" + err.get("traceback", "")).strip()
    elif rc is not None and rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        killed = -rc in (signal.SIGKILL, signal.SIGTERM)
        out.update(
            outcome=Outcome.FAILED.value,
            cause="killed" if killed else "crash",
            error=f"the probe process died from {name}"
            + (" (killed: out of memory, or stopped from outside)" if killed else ""),
        )
    elif starved := memory_limit.crash_starved(log_tail):  # glibc ended it: no thread fit
        out.update(outcome=Outcome.OOM.value, cause="oom", error=starved)
    else:
        early = " (the workload ended the process early)" if rc == 0 else ""
        closed = closed_cause(log_tail)
        out.update(
            outcome=Outcome.FAILED.value,
            cause="crash",
            error=f"the probe process exited with status {rc} without a summary{early}"
            + (f": {closed}" if closed else ""),
        )
    return out
