"""How a probe process's C allocator (glibc's malloc) holds and returns memory.

Two settings, one per case, set once at the start of the probe process (`autotune.process.entry`):

- `keep_freed()`, the default. A probe process starts cold: forked from a zygote that did the
  imports and nothing else, or fresh. glibc's defaults give freed memory at the top of its heap
  back to the kernel once 128 KiB of it is free, and serve blocks from 128 KiB up with pages of
  their own, raising that threshold only as blocks are freed. A training step frees and
  allocates the same tensors every step, so a cold process pays a page fault for every page of
  them again, step after step: measured with `benchmarks/fork_page_faults.py` (tiny_gpt tiny,
  2000 steps, one thread), a zygote's child took ~470-600k minor faults where a process that had
  run a probe before took ~6-12k, and ran 6-8% slower. Keeping what it frees (trim threshold
  256 MiB, top pad 64 MiB, mmap threshold 32 MiB) took it to ~15k faults and the warm process's
  time. The price: up to ~256 MiB that the process freed stays mapped until it ends.
- `fixed_mmap_threshold()`, under a memory limit (`autotune.process.memory_limit`): every block
  from 128 KiB up gets pages of its own, returned when freed, so the data memory a probe needs
  is its live tensors' at every length, not what its heap kept.

Both are no-ops (False) where the C library is not glibc (musl, macOS): another allocator.
"""

from __future__ import annotations

from collections.abc import Callable

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_DEFAULT = 128 * 1024  # glibc's default start; setting it stops the raising
KEEP_TRIM_THRESHOLD = 256 << 20
KEEP_TOP_PAD = 64 << 20
KEEP_MMAP_THRESHOLD = 32 << 20


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's `mallopt`, or None where this process's C library is another."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)  # this process's symbols, its C library's among them
    except OSError:
        return None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None or getattr(libc, "gnu_get_libc_version", None) is None:
        return None
    return mallopt


def keep_freed() -> bool:
    """Keep freed memory in the process for the next step (see the module). False where the C
    library is not glibc or it refused a setting."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return all(
        mallopt(param, value)
        for param, value in (
            (M_TRIM_THRESHOLD, KEEP_TRIM_THRESHOLD),
            (M_TOP_PAD, KEEP_TOP_PAD),
            (M_MMAP_THRESHOLD, KEEP_MMAP_THRESHOLD),
        )
    )


def fixed_mmap_threshold() -> bool:
    """Give every block of 128 KiB and up pages of its own, returned when freed (see the
    module). False where the C library is not glibc."""
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_DEFAULT))
