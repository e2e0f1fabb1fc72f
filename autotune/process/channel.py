"""The probe's report protocol: its private channel, the writer and the one parser.

A probe process reports (start, telemetry, summary, fingerprint, error, ...) on a channel of its
own, never on stdout or stderr: what a trial prints is its log, and nothing printed is ever
taken as a result. The channel is the write end of a pipe that the process that starts the probe
(the launcher, a zygote's request, a DDP supervisor, `autotune repro`) creates for that one
process, together with a random per-process nonce:

* a fresh process inherits the pipe's write end; `AUTOTUNE_REPORT_FD` names its number and
  `AUTOTUNE_REPORT_NONCE` holds the nonce. `Writer.from_env` takes both out of the environment
  and marks the descriptor close-on-exec before any workload code runs, so neither reaches a
  process the workload starts;
* a child forked by a zygote gets the write end with its fork request (SCM_RIGHTS) and the nonce
  in the request (see `autotune.process.zygote`).

One report is one line: the nonce, a space, and the report as a JSON object with an `event`.
`Channel.reports` yields the reports of lines that carry the nonce; any other line is dropped
and counted (`Channel.rejected`).

What this defends: a workload that prints anything, a summary-shaped line included, a line
without a newline, or binary garbage, cannot forge or garble a report; nor can a process the
workload starts, nor a stray write to the descriptor's number. What it does not: the workload
runs arbitrary Python in the probe's own process and could find the writer (or the descriptor
and the nonce) there and write a report on purpose. In-process forgery cannot be prevented;
results are as trustworthy as the workload code a user chose to run.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import json
import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

FD_ENV = "AUTOTUNE_REPORT_FD"
NONCE_ENV = "AUTOTUNE_REPORT_NONCE"
MAX_LINE = 1 << 26  # bytes of one report (a summary with long series is a few MB at most)
#: How `ChannelClosed` begins, in the log a probe process leaves (`closed_cause` finds it).
CLOSED = "autotune's report channel (fd "


class ChannelClosed(OSError):
    """The report channel's descriptor was closed under the probe (a workload that closes the
    descriptors it inherited: `os.closerange(3, ...)`): no report can reach the launcher."""

    def __init__(self, fd: int) -> None:
        super().__init__(
            errno.EBADF,
            f"{CLOSED}{fd}) was closed by the workload (e.g. os.closerange over inherited "
            f"descriptors): leave fd {fd} open; autotune marks it close-on-exec, so no "
            "process the workload starts holds it",
        )


def closed_cause(log_tail: str) -> str | None:
    """The `ChannelClosed` message in a probe process's log, if it left one: why the process
    ended without a summary."""
    at = log_tail.rfind(CLOSED)
    return log_tail[at:].splitlines()[0] if at >= 0 else None


def json_default(o: Any) -> Any:
    item = getattr(o, "item", None)  # NumPy scalars
    if callable(item):
        with contextlib.suppress(Exception):
            return item()
    return str(o)


def encode(msg: Mapping[str, Any], nonce: str) -> bytes:
    """One report as the line written on the channel."""
    return f"{nonce} {json.dumps(msg, default=json_default)}\n".encode()


def parse(line: bytes, nonce: str) -> dict[str, Any] | None:
    """The report on one channel line; None for a line without this channel's nonce, or one
    that is not a JSON object with an `event`."""
    head, sep, body = line.partition(b" ")
    if not sep or not hmac.compare_digest(head, nonce.encode()):
        return None
    try:
        msg = json.loads(body)
    except ValueError:
        return None
    if not isinstance(msg, dict) or not isinstance(msg.get("event"), str):
        return None
    return msg


class Writer:
    """The probe's side: `writer(msg)` writes one report on the channel (a `Report`)."""

    def __init__(self, fd: int, nonce: str) -> None:
        os.set_inheritable(fd, False)  # nothing the workload starts holds it
        self.fd = fd
        self.nonce = nonce
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> Writer | None:
        """The channel this process was started with (taken out of the environment), or None."""
        fd, nonce = os.environ.pop(FD_ENV, None), os.environ.pop(NONCE_ENV, None)
        if not fd or not nonce:
            return None
        return cls(int(fd), nonce)

    def __call__(self, msg: Mapping[str, Any]) -> None:
        view = memoryview(encode(msg, self.nonce))
        with self._lock:
            while view:
                try:
                    view = view[os.write(self.fd, view) :]
                except OSError as e:
                    if e.errno == errno.EBADF:
                        raise ChannelClosed(self.fd) from e
                    raise

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class Channel:
    """The reading side of one probe process's channel: a pipe and a fresh nonce.

    Start the process with `write_fd` inherited (`pass_fds`) and `env()` in its environment, or
    hand both to a zygote; then `close_child_end()` here, so that the channel ends when the
    process (and whatever kept the descriptor) has ended, and read `reports()`."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.nonce = secrets.token_hex(16)
        self.rejected = 0  # lines without the nonce, or not a report

    def env(self) -> dict[str, str]:
        return {FD_ENV: str(self.write_fd), NONCE_ENV: self.nonce}

    def close_child_end(self) -> None:
        if self.write_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.write_fd)
            self.write_fd = -1

    def reports(self) -> Iterator[dict[str, Any]]:
        """Every report until the channel ends (its write ends all closed); then closed."""
        with os.fdopen(self.read_fd, "rb", closefd=True) as f:
            self.read_fd = -1
            for line in f:
                msg = parse(line[:MAX_LINE], self.nonce)
                if msg is None:
                    self.rejected += 1
                else:
                    yield msg

    def close(self) -> None:
        self.close_child_end()
        if self.read_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
            self.read_fd = -1

    def rejected_note(self) -> str:
        """A line for the log tail when something wrote on the channel without the nonce."""
        if not self.rejected:
            return ""
        return f"[autotune] {self.rejected} line(s) on the report channel were not reports: ignored"


def run_process(
    args: Sequence[str], *, env: Mapping[str, str], timeout: float
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run `args` (a probe process) to its end with a channel; its output (the log) captured
    and its reports. Raises subprocess.TimeoutExpired as `subprocess.run` does."""
    channel = Channel()
    got: list[dict[str, Any]] = []
    try:
        proc = subprocess.Popen(
            list(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env={**env, **channel.env()},
            pass_fds=(channel.write_fd,),
            text=True,
            errors="replace",  # a stray byte a program prints: U+FFFD, never a dead reader
            start_new_session=True,  # a timeout kills what it started too
        )
    except BaseException:
        channel.close()
        raise
    channel.close_child_end()
    reader = threading.Thread(target=lambda: got.extend(channel.reports()), daemon=True)
    reader.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # the timeout, or an interrupt: nothing is left running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what it left running in its group ends with it
    reader.join(timeout=10)
    return subprocess.CompletedProcess(list(args), proc.returncode, out, err), got
