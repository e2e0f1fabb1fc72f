"""Run a user's training script as a probe (`run_script`): in this process, under `runpy`,
while its `ScriptSession` (`autotune.probe.script`) is current, watched for a first report; what
it raised sorted into a result (diverged, oom) or a failure naming its cause."""

from __future__ import annotations

import atexit
import os
import runpy
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.probe.config import ProbeConfig, Report
from autotune.probe.first_report import GUIDE
from autotune.probe.oom import is_oom
from autotune.probe.script import Diverged, ScriptFailure, ScriptSession, current, set_current
from autotune.probe.script_exit import summary_on_os_exit
from autotune.probe.script_values import short_run

_SCRATCH: list[str] = []  # `scratch_folder`s of the script now running


def scratch_folder(prefix: str) -> str:
    """A new temporary folder for what the running script's framework must be given a place
    for (a Trainer's output_dir, in a study where nothing is saved there): removed when the
    script ends under `run_script` (a probe process leaves by `os._exit`, with no exit
    handlers), or at this process's exit when no script runs under it."""
    import tempfile

    made = tempfile.mkdtemp(prefix=prefix)
    if current() is not None:
        _SCRATCH.append(made)
    else:
        atexit.register(shutil.rmtree, made, True)
    return made


def run_script(
    cfg: ProbeConfig,
    report: Report | None = None,
    *,
    clock: Callable[[], float] = time.perf_counter,
    on_stuck: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the training script `cfg.script` in this process; return the summary of its reports.

    A divergence is a result (`status: diverged`); an out-of-memory is `status: oom`. A script
    that raises propagates its exception; one that never reports, reports badly, or ends
    before its planned steps unasked (`script_values.short_run`), raises a
    `ScriptFailure`/`BadReport` whose `cause` the probe process's entry records. With
    `cfg.first_report_s` (run in the main thread), a script whose first report has not come
    that many seconds after its start is stopped (SIGINT to this thread) with a `no_reports`
    failure naming the API it forgot; `on_stuck(why)` if it has not ended 30 s later."""
    import torch

    if cfg.script is None:
        raise ValueError("run_script needs a ProbeConfig with a script")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    session = ScriptSession(cfg, report, clock=clock)
    main = threading.current_thread() is threading.main_thread()
    watched = bool(cfg.first_report_s) and main
    before = signal.getsignal(signal.SIGINT) if main else None
    noted = _SigintNote()
    mask = None
    try:
        if watched:  # SIGINT raises KeyboardInterrupt here, even where the parent blocked it
            signal.signal(signal.SIGINT, noted.handler)
            mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            session.watch(float(cfg.first_report_s or 0), on_stuck)
        elif main and before is signal.default_int_handler:  # the same, noted
            signal.signal(signal.SIGINT, noted.handler)
        elif main and before == signal.SIG_IGN:  # a background job's: no Ctrl-C can come
            noted.ignored = True
        _run(cfg, session, noted)
    except KeyboardInterrupt:  # the watch's signal, landed as the script was ending
        if session.stalled is not None:
            raise session.stalled from None
        raise
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if before is not None:
            signal.signal(signal.SIGINT, before)
    return _checked(cfg, session)


class _SigintNote:
    """A SIGINT handler that raises KeyboardInterrupt, as Python's default one does, and notes
    that a signal came: a KeyboardInterrupt with no SIGINT behind it is the script's own
    `raise KeyboardInterrupt`, a failure of the script (`script_raised`), while a real Ctrl-C or
    the first-report watch's SIGINT interrupts the trial."""

    def __init__(self) -> None:
        self.signalled = False
        self.ignored = False  # SIGINT ignored (inherited): any KeyboardInterrupt is the script's

    def handler(self, signum: int, frame: Any) -> None:
        self.signalled = True
        raise KeyboardInterrupt

    def script_raised(self, e: KeyboardInterrupt) -> ScriptFailure | None:
        """The failure of a script that raised KeyboardInterrupt itself; None when a signal
        came, or when the script put in a SIGINT handler of its own (a framework's), which may
        have raised it for a signal this one never saw: an interrupt, as before."""
        now = signal.getsignal(signal.SIGINT)
        kept = now == self.handler or (self.ignored and now == signal.SIG_IGN)
        if self.signalled or not kept:
            return None
        first = str(e).strip().splitlines()[0] if str(e).strip() else "raised by the script"
        return ScriptFailure("exception", first, error_type=type(e).__name__)


def _checked(cfg: ProbeConfig, session: ScriptSession) -> dict[str, Any]:
    """The summary of a script that has ended (returned, or called `os._exit(0)`), or the
    failure that ends its probe instead."""
    if session.stalled is not None:  # the script caught the interrupt and ended
        raise session.stalled
    if session.failure is not None:
        raise session.failure
    if not session.trial_called:
        raise ScriptFailure("no_reports", f"the script never called autotune.trial() ({GUIDE})")
    if session.reports == 0:
        raise ScriptFailure(
            "no_reports",
            "the script called autotune.trial() but never trial.report(step, loss=...): "
            + session.first.forgotten(),
        )
    if session.ended_early():
        raise short_run(session.reports, cfg.steps)
    return session.finish()


def exit_text(code: object) -> str:
    """Why a script that called `sys.exit(code)` failed: an int is its status; anything else
    (`sys.exit("message")`) is printed by Python, which exits with status 1."""
    if isinstance(code, int):
        return f"the script exited with status {int(code)}"
    return f"the script exited with status 1: {code}"


def _run(cfg: ProbeConfig, session: ScriptSession, noted: _SigintNote) -> None:
    """The script under `runpy`, as `__main__` in its folder with its arguments, while
    `session` is current; what it raised, sorted into a result or a failure (`noted`: whether
    a KeyboardInterrupt came from a SIGINT)."""

    assert cfg.script is not None
    saved = sys.argv, list(sys.path), os.getcwd()
    folder = str(Path(cfg.script).parent)
    sys.argv = [cfg.script, *cfg.args]
    sys.path.insert(0, folder)
    os.chdir(folder)
    set_current(session)
    try:
        # os._exit(0) after the last report: the summary is made before the process ends
        with summary_on_os_exit(lambda: _checked(cfg, session)):
            runpy.run_path(cfg.script, run_name="__main__")
    except Diverged:
        pass  # the session has the cause
    except SystemExit as e:  # sys.exit(0) / sys.exit() is a normal end
        if session.stalled is not None:  # a framework that exits on an interrupt (Lightning)
            raise session.stalled from None
        if e.code not in (0, None) and session.cause is None and session.failure is None:
            raise ScriptFailure("exception", exit_text(e.code)) from None
    except KeyboardInterrupt as e:
        if session.stalled is not None:
            raise session.stalled from None
        raised = noted.script_raised(e)
        if raised is not None:  # `raise KeyboardInterrupt` in the script: its own failure
            raise raised from e
        raise  # the trial was interrupted, not failed by the script
    except BaseException as e:
        if is_oom(e):  # a CUDA/ROCm OOM, or the CPU allocator's (autotune.probe.oom)
            session.oom(e)
            return
        if session.stalled is not None:  # e.g. the script wrapped the interrupt
            raise session.stalled from None
        if session.failure is not None:
            raise session.failure from None  # a bad report the script swallowed
        if session.cause is None:
            raise
        # diverged first, then the script raised (e.g. its own NaN check): a divergence
    finally:
        session.first.end()  # no interrupt from the watch from here on
        sys.argv, sys.path[:] = saved[0], saved[1]
        os.chdir(saved[2])
        set_current(None)
        while _SCRATCH:
            shutil.rmtree(_SCRATCH.pop(), ignore_errors=True)
