"""Which failure of a DDP probe's ranks is the trial's: each rank's failure as the launcher
(`autotune.process.supervisor`) saw it, and the one that explains the others.

One rank's fault shows up on its peers as errors of their own: a rank that ends makes the others'
next collective fail with gloo's 'Connection reset by peer'; a rank that stops in its own code
makes the others' collective time out. The trial's error names the rank that started it.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.process import channel as report_channel
from autotune.process import memory_limit

# Lower first: a communication fault explains everything after it, then an out-of-memory, then a
# rank's death; an exception (4) is often a peer's, so the earliest one is taken last of all.
_CAUSE_RANK = {"comm_incorrect": 0, "comm_hang": 1, "oom": 2, "killed": 3, "crash": 3}


@dataclass
class Failure:
    at: float
    rank: int | None
    cause: str
    message: str


def death(r: int, rc: int, tail: Sequence[str]) -> tuple[str, str]:
    """The cause and message of rank `r`, which ended with status `rc` and no report."""
    if rc < 0:
        sig = -rc
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        text = "\n".join(tail).lower()
        if "timeout" in text or "timed out" in text:  # the NCCL watchdog aborts on a timeout
            return "comm_hang", f"rank {r} died from {name} after a collective timed out"
        killed = sig in (signal.SIGKILL, signal.SIGTERM)
        return ("killed" if killed else "crash"), f"rank {r} died from {name}"
    starved = memory_limit.crash_starved("\n".join(tail))  # glibc ended it: no thread fit
    if starved:
        return "oom", f"rank {r}: {starved}"
    why = report_channel.closed_cause("\n".join(tail))
    early = " (the workload ended the process early)" if rc == 0 else ""
    closed = f": {why}" if why else ""
    return "crash", f"rank {r} exited with status {rc} without a summary{early}{closed}"


def error_text(r: int, err: Mapping[str, Any]) -> str:
    return f"rank {r}: {err.get('error_type', 'Error')}: {err.get('message', '')}"


def root(failures: list[Failure]) -> Failure | None:
    """The failure that explains the others: a communication fault first, then an
    out-of-memory, a death, and else the earliest exception (a peer's 'connection closed'
    follows it)."""
    if not failures:
        return None
    return min(failures, key=lambda f: (_CAUSE_RANK.get(f.cause, 4), f.at))


def named(f: Failure, silent: Sequence[int]) -> str:
    """`f`'s message, naming the rank(s) that hung when `f` is a peer's timed-out collective.

    A rank stuck outside the collectives (in its own code) never reports again: its peers' next
    collective times out, and the launcher kills it after the grace, having heard nothing from
    it. `silent`: those ranks, killed by the launcher without an error or a summary. Ranks that
    all time out in collectives that do not match say so themselves, and none is silent: the
    message is then the first timeout's, which cannot tell which rank went astray."""
    hung = [r for r in silent if r != f.rank]
    if f.cause != "comm_hang" or f.rank is None or not hung:
        return f.message
    who = f"rank {hung[0]}" if len(hung) == 1 else f"ranks {hung}"
    return f"{who} hung (silent until killed, after its peers' collective timed out): {f.message}"
