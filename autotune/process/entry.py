"""The probe process's entry: one probe, its reports on the process's report channel.

`run(cfg, report)` is the one place that chooses how a probe runs: in this process
(`autotune.probe.run_probe`), or, for `world_size > 1`, `oom_retry` or `measure_scaling`, as DDP
ranks started and watched by `autotune.process.supervisor`.

`python -m autotune.process.entry CONFIG.json` runs one probe in this process and writes its
reports on the report channel it was started with (`autotune.process.channel`); what the
workload prints is its log. Started without a channel (by hand), it writes them to stdout for a
person to read.

`python -m autotune.process.entry -` is a fresh probe process of the launcher: it does the
imports of `preload()` first, then reads its config path on stdin (end of input without a line
ends it quietly), and leaves with `os._exit` once its reports are flushed: tearing down an
interpreter that has imported torch takes most of a second, and nothing is left to clean up.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from autotune.probe import ProbeConfig, Report, needs_processes, run_probe
from autotune.probe.oom import is_oom
from autotune.process import channel as report_channel
from autotune.process import malloc, memory_limit

STDIN_ARG = "-"  # the config path comes on stdin, after the imports


def run(
    cfg: ProbeConfig, report: Report | None = None, *, own_process: bool = False
) -> dict[str, Any]:
    """Run the probe `cfg` and return its summary: in this process, or as the processes it
    needs (DDP ranks, an OOM retry, a timing of one process). `own_process`: this process is
    the probe's alone (`main`): a script stuck past its first-report time ends it."""
    if cfg.script is not None:  # a user's training script, run here (autotune.probe.script)
        from autotune.probe.script_run import run_script

        stuck = _stuck(report) if own_process and report is not None else None
        return run_script(cfg, report, on_stuck=stuck)
    if needs_processes(cfg):
        from autotune.process import supervisor

        return supervisor.launch(cfg, report or (lambda _msg: None))
    return run_probe(cfg, report)


def _stuck(emit: Report) -> Callable[[str], None]:
    """What a probe process does with a script that ignored the interrupt of its first-report
    watch: report the failure, and leave."""

    def stuck(why: str) -> None:
        emit(
            {
                "event": "error",
                "cause": "no_reports",
                "error_type": "ScriptFailure",
                "message": why + " (the script did not stop on the interrupt: ended)",
                "traceback": "",
            }
        )
        leave(3)

    return stuck


def run_here(cfg: ProbeConfig, report: Report | None = None) -> dict[str, Any]:
    """`run` for a command that runs the probe in its own process (`autotune probe`, `repro`):
    an exception from the workload is a WorkloadError naming it, not a traceback."""
    from autotune.errors import AutotuneError, WorkloadError

    try:
        return run(cfg, report)
    except AutotuneError:
        raise
    except Exception as e:
        raise WorkloadError(
            f"the probe of workload '{cfg.workload}' raised {type(e).__name__}: {e}"
        ) from e


def preload() -> None:
    """The imports of a probe process, done before its config is known (see
    `autotune.process.zygote`): torch, torch._dynamo, the probe, the fingerprint, the workload
    resolver. CPU only: no `torch.cuda` call."""
    import torch

    # torch.optim imports torch._dynamo the first time an optimizer is built: ~2 s of a
    # trial's start on a CPU. A throwaway optimizer does that here.
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])

    from autotune import fingerprint, probe  # noqa: F401
    from autotune.probe import workload  # noqa: F401


def leave(rc: int) -> None:
    """End the process now, its output flushed (no interpreter teardown)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(rc)


def print_report(msg: dict[str, Any]) -> None:
    """Reports of a probe started by hand, without a channel: for a person, never parsed."""
    sys.stdout.write(json.dumps(msg, default=report_channel.json_default) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None, channel: Report | None = None) -> int:
    """`python -m autotune.process.entry CONFIG.json` (or `-`: the path on stdin): one probe,
    its reports on `channel` (default: the channel of this process's environment, else
    stdout)."""
    args = sys.argv[1:] if argv is None else argv
    if args == [STDIN_ARG]:
        preload()
        line = sys.stdin.readline().strip()
        if not line:
            return 0
        leave(main([line], channel))
    emit: Report = channel or report_channel.Writer.from_env() or print_report
    if len(args) != 1:
        print("usage: python -m autotune.process.entry CONFIG.json", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        cfg = ProbeConfig.from_dict(json.load(f))
    try:
        if memory_limit.limit_mb() is not None:
            preload()  # a fresh process's imports, as a zygote's child has them: the N MiB
            memory_limit.apply()  # are the probe's own (AUTOTUNE_PROBE_MEMORY_MB)
        else:  # a cold process: its steps' memory kept from one step to the next
            malloc.keep_freed()
        from autotune import fingerprint

        emit({"event": "fingerprint", "fingerprint": fingerprint.collect()})
        run(cfg, emit, own_process=True)
    except Exception as e:
        # Out of memory outside the training steps (the workload's model or data, before the
        # first step): the same event as in a step (`autotune.probe.oom`), classed `oom`.
        # Under AUTOTUNE_PROBE_MEMORY_MB, a DDP launcher's thread that could not start too.
        starved = memory_limit.thread_starved(e)
        oom = is_oom(e) or starved is not None
        message = starved or (f"out of memory before the first step: {e}" if oom else str(e))
        emit(
            {
                "event": "error",
                "cause": "oom" if oom else getattr(e, "cause", None) or "exception",
                # a ScriptFailure may name the script's own exception (KeyboardInterrupt)
                "error_type": getattr(e, "error_type", None) or type(e).__name__,
                "message": message,
                # the innermost frames: the line that raised, deep in a script's framework
                "traceback": traceback.format_exc(limit=-30),
            }
        )
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
