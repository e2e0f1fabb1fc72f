"""The memory a probe process may use, when the machine gives it less than it has.

`AUTOTUNE_PROBE_MEMORY_MB=N` in the environment of `autotune study`, `verify` or `migrate` (or
of a Ray worker) gives each probe process N MiB of data memory for the probe itself: its model,
optimizer state, data and activations. The process first does the imports every probe process
does (`autotune.process.entry.preload`: torch and autotune), then limits its data memory
(`RLIMIT_DATA`: its heap and private writable mappings) to what it holds at that point plus N
MiB. An allocation past it fails as it fails on a device with that much memory: torch's CPU
allocator raises, and the probe classes that as `oom` (`autotune.probe.oom`), as it classes a
GPU's out-of-memory. What it stands for: a smaller machine, container or device, the case where
a recipe's micro-batch no longer fits (`autotune migrate`). Only the probe is limited, not Ray,
Optuna or MLflow. Linux (on macOS the N MiB are the whole process's); elsewhere it is ignored.

The limit counts from the imports because a probe process starts two ways: forked from a
worker's zygote, which did them already and whose mappings the child inherits, or fresh. An
absolute limit gave the two paths ~40 MiB apart (measured on long_signal wide, batch 64: a
zygote's child needed ~387 MiB at micro-batch 64 where a fresh process needed ~345), as far
apart as two micro-batches: a study's trial ran out of memory where `migrate`'s check of the
same configuration fit.

Under such a limit a probe process built on glibc also gets a fixed mmap threshold (128 KiB,
`autotune.process.malloc`; without a limit it keeps what it frees instead): every allocation
from there up gets pages of its own, returned when it is freed. glibc's default
raises the threshold as blocks are freed and serves them from a heap that keeps what it freed,
so a run's data memory grew with its steps (measured on a workload with ~1 MiB of activations a
sample, micro-batch 16: ~400 MiB needed at 6 steps, ~455 at 120) and whether a micro-batch fit
depended on how long the probe ran, more than on the micro-batch. With the fixed threshold the
need is the live tensors' and nearly the same at every length (long_signal wide, batch 64, over
the imports, at 10 steps and at 120, fresh and forked: +49-56 MiB at micro-batch 16, +65-72 at
32, +97-104 at 64; `benchmarks/memory_limit_need.py` bisects it).
The price: a probe of small tensors pays a page fault per fresh allocation (that workload at
micro-batch 16: -39% throughput; at 128, whose blocks were past glibc's ceiling anyway,
unchanged), so throughput under a limit is this limited machine's, not the unlimited one's.
benchmarks/RESULTS.md, "The limit measures the tensors".
"""

from __future__ import annotations

import os

from autotune.process.malloc import fixed_mmap_threshold, keep_freed

ENV = "AUTOTUNE_PROBE_MEMORY_MB"
#: The largest limit taken (4 PiB): the process's limit in bytes, what it holds now included,
#: must fit the C long `setrlimit` takes (2^63 bytes); a larger value limits nothing anyway.
MAX_MB = 1 << 42


def limit_mb(environ: dict[str, str] | None = None) -> int | None:
    """The limit the environment asks for, in MiB; None when unset or empty. A value that is
    not a positive whole number, or is past `MAX_MB`, is a ValueError naming the variable."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not raw:
        return None
    try:
        mb = int(raw)
    except ValueError:
        mb = 0
    if mb <= 0:
        raise ValueError(f"{ENV}={raw!r}: give the probe's memory in MiB, a positive whole number")
    if mb > MAX_MB:
        raise ValueError(
            f"{ENV}={raw!r}: more than a process can be limited to (at most {MAX_MB} MiB, 4 "
            "PiB); give the probe's memory in MiB, or unset it for no limit"
        )
    return mb


def apply(environ: dict[str, str] | None = None) -> int | None:
    """Limit this process's data memory as the environment asks: what it holds now plus the N
    MiB (see the module; call it once the probe process's imports are done). The N MiB, or
    None."""
    mb = limit_mb(environ)
    if mb is None:
        return None
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    cap = data_now() + (mb << 20)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    fixed_mmap_threshold()
    return mb


def settle_allocator(environ: dict[str, str] | None = None) -> bool:
    """The C allocator's setting for a probe process whose limit, if any, is already in place
    (a DDP rank inherits its launcher's `RLIMIT_DATA`, but not its `mallopt` settings, which
    a new program starts without): under a limit every large block gets pages of its own
    (`fixed_mmap_threshold`), else freed memory is kept for the next step (`keep_freed`).
    False where the C library is not glibc."""
    return fixed_mmap_threshold() if limit_mb(environ) is not None else keep_freed()


#: What a thread that could not start raises, lower case: Python's `threading`, and C++'s
#: `std::thread` (c10d's store, gloo's workers), whose `pthread_create` fails with EAGAIN.
THREAD_START_FAILED = ("can't start new thread", "resource temporarily unavailable")
#: What glibc prints as it ends a process (status 127) whose new thread's own data did not fit.
TLS_FAILED = "cannot allocate memory for thread-local data"


def thread_starved(e: BaseException, environ: dict[str, str] | None = None) -> str | None:
    """Under the limit, `e` a thread that could not start: the out-of-memory message naming the
    limit; else None. A thread's stack (8 MiB by default) is data memory `RLIMIT_DATA` counts,
    and a DDP probe starts threads (its store's, gloo's, the launcher's readers) where one
    process starts none, so it ran out there first, as a bare "can't start new thread"."""
    text = str(e).lower()
    if not isinstance(e, RuntimeError | OSError):
        return None
    if not any(m in text for m in THREAD_START_FAILED):
        return None
    return _starved(str(e), environ)  # the type is named beside it


def crash_starved(log: str, environ: dict[str, str] | None = None) -> str | None:
    """Under the limit, a process that ended without a report because glibc could not give a
    new thread its thread-local data (`log`: what it printed last): the out-of-memory message
    naming the limit; else None."""
    return _starved(TLS_FAILED, environ) if TLS_FAILED in log.lower() else None


def _starved(detail: str, environ: dict[str, str] | None) -> str | None:
    try:
        mb = limit_mb(environ)
    except ValueError:  # checked before any probe runs: not the failure to report here
        return None
    if mb is None:
        return None
    return (
        f"out of memory under {ENV}={mb}: a thread could not start ({detail}); each thread's "
        f"stack is data memory the limit counts: raise {ENV} or drop it"
    )


def data_now() -> int:
    """The data memory this process holds now, in bytes (Linux: `VmData`, what `RLIMIT_DATA`
    is checked against); 0 where it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return 0
