"""The zygote: a fork server that did a probe process's imports once, and forks each trial's
probe from there (a trial starts in ~10 ms instead of seconds).

`python -m autotune.process.zygote` is the server (`ForkServer`), started by a worker with the
exact environment of its trials. It does the imports of `autotune.process.entry.preload` once,
then those of the modules named in `AUTOTUNE_PRELOAD` (comma-separated; set by the study for a
training script: `autotune.recipe.trial` and the space's `workload.preload`; one that fails to
import is skipped with one line on its stderr, and a trial imports it on demand), writes
`{"ready": pid}` on its stdin (a Unix SOCK_SEQPACKET socket to the launcher) and then serves
requests from it. A request is `{"cfg": PATH, "cwd": DIR, "nonce": NONCE}` with three file
descriptors (SCM_RIGHTS): the write end of a pipe that becomes the child's stdout and stderr (its
log), a status socket of this trial, and the write end of the trial's report channel
(`autotune.process.channel`; the nonce is that channel's). The zygote forks a child, writes
`{"pid": PID}` on the status socket, reaps the child when it ends (SIGCHLD wakes it; between
trials it sleeps in `select`) and writes `{"pid": PID, "status": WAIT_STATUS}` there. The child
is a probe process as a fresh one would be (`autotune.process.entry.main`): its own session and
process group, SIGKILL when the zygote dies (PR_SET_PDEATHSIG; the zygote gets the same from the
worker), the signal handling it had before the zygote changed it, stdin from /dev/null, stdout
and stderr on the pipe, the requested working directory; it leaves with `os._exit` once its
reports are flushed.

End of its input (the launcher closed the socket, or died) makes the zygote stop serving; it
leaves once no child of its own runs any more.

The launcher's side is `Zygote` (one zygote, for one environment) and `ForkedProbe` (a child it
forked, with the surface of `subprocess.Popen` the launcher watches). `autotune.process.zygotes`
says which zygotes a process keeps (a Ray worker one; `verify` and `migrate` one per environment
for the command), `autotune.process.launcher` which probe gets a forked process.

The zygote never initialises CUDA/ROCm: a device runtime cannot be used in a child forked
after it was initialised. `preload()` touches the CPU only (no `torch.cuda` call, not even
`is_available`), and `_check_no_device_runtime`, run after both preloads, refuses to serve if
something did (a module of `AUTOTUNE_PRELOAD`, say): the zygote leaves with one line on its
stderr, and the trials run in fresh processes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections import deque
from collections.abc import Mapping, Sequence
from typing import IO, Any

from autotune.process.channel import Channel
from autotune.process.entry import leave, preload
from autotune.process.spawn import die_with_parent, kill_group, popen, python_module

MAX_MESSAGE = 1 << 16  # bytes of one request or reply (JSON)
ZYGOTE_READY_S = 180.0  # for a new zygote's imports; past that, the trial runs in a fresh one
FORK_REPLY_S = 20.0  # for the zygote's answer to a fork request (it takes milliseconds)
PRELOAD_ENV = "AUTOTUNE_PRELOAD"  # modules the zygote imports too (comma-separated)
#: What every training script imports after its fork, unless its zygote did: the trial API.
SCRIPT_PRELOAD = ("autotune.recipe.trial",)
LOG_LINES = 50  # of the zygote's own output, kept by its worker (`Zygote.log`)
NO_DEVICE_RC = 3  # the zygote's exit status when it refused to serve (CUDA initialised)


def _check_no_device_runtime() -> None:
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError("the zygote initialised CUDA/ROCm: its children could not use it")


def script_preload_env(preload: Sequence[str]) -> dict[str, str]:
    """autotune's own variable for a training script's probe process (not a knob, never
    recorded): the modules its zygote imports once (`PRELOAD_ENV`), the trial API and the
    script's `workload.preload`, so that each forked probe does not import them again. A study's
    workers and `verify` / `migrate` of a script recipe alike."""
    names = dict.fromkeys((*SCRIPT_PRELOAD, *preload))
    return {PRELOAD_ENV: ",".join(names)}


def preload_modules(names: str) -> list[str]:
    """Import each module of `names` (comma-separated dotted names); one that fails is skipped
    with one line on stderr. Returns the names imported."""
    done = []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        try:
            importlib.import_module(name)
        except (Exception, SystemExit) as e:  # a module's import may raise anything
            first = (str(e).splitlines() or [""])[0][:300]
            print(
                f"autotune zygote: preload of {name!r} skipped: {type(e).__name__}: {first}",
                file=sys.stderr,
                flush=True,
            )
            continue
        done.append(name)
    return done


# ---------------------------------------------------------------------------------------------
# The zygote process: the fork server
# ---------------------------------------------------------------------------------------------


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.send(json.dumps(msg).encode(), socket.MSG_NOSIGNAL)


class ForkServer:
    """The zygote process's side: serves fork requests on its control socket."""

    def __init__(self, ctl: socket.socket) -> None:
        self.ctl = ctl
        self.pid = os.getpid()
        self.children: dict[int, socket.socket] = {}  # pid -> its trial's status socket
        self.serving = True
        self.sigchld_before = signal.getsignal(signal.SIGCHLD) or signal.SIG_DFL
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes `select` through wake_w
        self.sel = selectors.DefaultSelector()
        self.sel.register(ctl, selectors.EVENT_READ)
        self.sel.register(self.wake_r, selectors.EVENT_READ)

    def run(self) -> int:
        _send(self.ctl, {"ready": self.pid})
        while self.serving or self.children:
            for key, _ in self.sel.select():
                if key.fileobj is self.ctl:
                    self.request()
                else:
                    with contextlib.suppress(OSError):
                        while os.read(self.wake_r, 512):
                            pass
                self.reap()
        return 0

    def request(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.ctl, MAX_MESSAGE, 4)
        except OSError:
            data, fds = b"", []
        if not data:  # the launcher closed its end, or died
            self.serving = False
            self.sel.unregister(self.ctl)
            self.ctl.close()
            return
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            return
        out_fd, status_fd, report_fd = fds
        status = socket.socket(fileno=status_fd)
        try:
            req = json.loads(data)
            for stream in (sys.stdout, sys.stderr):  # nothing of ours in the child's output
                stream.flush()
            pid = os.fork()
        except Exception as e:
            with contextlib.suppress(OSError):
                _send(status, {"error": f"{type(e).__name__}: {e}"})
            status.close()
            os.close(out_fd)
            os.close(report_fd)
            return
        if pid == 0:
            self.child(req, out_fd, status, report_fd)  # never returns
        os.close(out_fd)  # the child's output ends when the child (and what it started) ends
        os.close(report_fd)
        self.children[pid] = status
        with contextlib.suppress(OSError):
            _send(status, {"pid": pid})

    def reap(self) -> None:
        while self.children:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            status = self.children.pop(pid, None)
            if status is not None:
                with contextlib.suppress(OSError):
                    _send(status, {"pid": pid, "status": wait_status})
                status.close()

    def child(
        self, req: dict[str, Any], out_fd: int, status: socket.socket, report_fd: int
    ) -> None:
        rc = 70
        try:
            os.setsid()  # its own process group: a trial timeout kills the group
            die_with_parent()
            if os.getppid() != self.pid:  # the zygote died before the line above
                os._exit(rc)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, self.sigchld_before)
            self.sel.close()
            for sock in (self.ctl, status, *self.children.values()):
                sock.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            os.close(out_fd)
            cwd = req.get("cwd")
            if cwd:
                start_cwd = os.getcwd()
                os.chdir(cwd)
                if sys.path and sys.path[0] == start_cwd:  # `python -m` put the cwd there
                    sys.path[0] = os.getcwd()
            import importlib

            importlib.invalidate_caches()  # files written since the zygote looked are seen
            from autotune.process import channel as report_channel
            from autotune.process import entry

            rc = entry.main([str(req["cfg"])], report_channel.Writer(report_fd, str(req["nonce"])))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            with contextlib.suppress(Exception):
                traceback.print_exc()
        leave(rc)


def serve() -> int:
    """The zygote's main: its requests come on stdin, a Unix socket to the launcher."""
    preload()
    preload_modules(os.environ.get(PRELOAD_ENV, ""))
    try:
        _check_no_device_runtime()
    except RuntimeError as e:
        print(
            f"autotune zygote: not serving: {e} (trials run in fresh processes)",
            file=sys.stderr,
            flush=True,
        )
        return NO_DEVICE_RC
    ctl = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the children's stdin; the socket is only ours
    os.close(null)
    return ForkServer(ctl).run()


# ---------------------------------------------------------------------------------------------
# The launcher's side: a zygote, and the probes it forks
# ---------------------------------------------------------------------------------------------


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
    """A fork server for one environment (see the module's doc)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.log: deque[str] = deque(maxlen=LOG_LINES)  # the tail of its own output
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = popen(python_module("autotune.process.zygote"), env, theirs.fileno())
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
        # Its own output (an import error, a skipped preload) is read and its tail kept: a trial
        # it fails runs in a fresh process, whose log tail shows the same error.
        with contextlib.suppress(Exception):
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log.append(line.rstrip("\n"))
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
        kill_group(self.proc)
        with contextlib.suppress(OSError):
            self.ctl.close()


if __name__ == "__main__":
    leave(serve())
