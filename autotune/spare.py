"""The probe's process: a fresh Python per trial, or a child forked by a *zygote*.

Both run `autotune.probe.main([CONFIG])` after the imports of `_imports()` (torch, torch._dynamo,
the probe, the fingerprint, the workload resolver), and leave with `os._exit` once their
reports are flushed: tearing down an interpreter that has imported torch takes most of a
second, and nothing is left to clean up. `autotune.launcher` says which one a trial gets.

`python -m autotune.spare` is a fresh probe process: it does the imports and reads its config
path on stdin (end of input without a line ends it quietly); its report channel comes in its
environment (`autotune.report`).

`python -m autotune.spare --zygote` is a fork server, started by a worker with the exact
environment of its trials. It does the imports once, writes `{"ready": pid}` on its stdin
(a Unix SOCK_SEQPACKET socket to the launcher) and then serves requests from it. A request is
`{"cfg": PATH, "cwd": DIR, "nonce": NONCE}` with three file descriptors (SCM_RIGHTS): the
write end of a pipe that becomes the child's stdout and stderr (its log), a status socket of this
trial, and the write end of the trial's report channel (`autotune.report`; the nonce is that
channel's). The zygote
forks a child, writes `{"pid": PID}` on the status socket, reaps the child when it ends
(SIGCHLD wakes it; between trials it sleeps in `select`) and writes `{"pid": PID, "status":
WAIT_STATUS}` there. The child is a probe process as a fresh one would be: its own session and
process group, SIGKILL when the zygote dies (PR_SET_PDEATHSIG; the zygote gets the same from
the worker), the signal handling it had before the zygote changed it, stdin from /dev/null,
stdout and stderr on the pipe, the requested working directory.

End of its input (the launcher closed the socket, or died) makes the zygote stop serving; it
leaves once no child of its own runs any more.

The zygote never initialises CUDA/ROCm: a device runtime cannot be used in a child forked
after it was initialised. `_imports()` touches the CPU only (no `torch.cuda` call, not even
`is_available`), and `_check_no_device_runtime` refuses to serve if something did.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import traceback
from typing import Any

ZYGOTE_ARG = "--zygote"
MAX_MESSAGE = 1 << 16  # bytes of one request or reply (JSON)


def _imports() -> None:
    import torch

    # torch.optim imports torch._dynamo the first time an optimizer is built: ~2 s of a
    # trial's start on a CPU. A throwaway optimizer does that here.
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])

    from autotune import fingerprint, probe, workload  # noqa: F401


def die_with_parent() -> None:
    """In a child: get SIGKILL when the thread that started it ends (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _check_no_device_runtime() -> None:
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError("the zygote initialised CUDA/ROCm: its children could not use it")


def _leave(rc: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(rc)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == [ZYGOTE_ARG]:
        _leave(serve())
    _imports()
    line = sys.stdin.readline().strip()
    if not line:
        return 0
    from autotune import probe

    _leave(probe.main([line]))
    return 0  # not reached


# ---------------------------------------------------------------------------------------------
# The zygote
# ---------------------------------------------------------------------------------------------


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.send(json.dumps(msg).encode(), socket.MSG_NOSIGNAL)


class _Zygote:
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
            from autotune import probe, report

            rc = probe.main([str(req["cfg"])], report.Writer(report_fd, str(req["nonce"])))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            with contextlib.suppress(Exception):
                traceback.print_exc()
        _leave(rc)


def serve() -> int:
    """The zygote's main: its requests come on stdin, a Unix socket to the launcher."""
    _imports()
    _check_no_device_runtime()
    ctl = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the children's stdin; the socket is only ours
    os.close(null)
    return _Zygote(ctl).run()


if __name__ == "__main__":
    raise SystemExit(main())
