"""Which exceptions are an out-of-memory: the device's (`torch.OutOfMemoryError`, CUDA's and
ROCm's) and the host's.

On a CPU torch raises a plain `RuntimeError` when its allocator cannot get memory (a machine,
a container or a process limit with less memory than the step needs): `DefaultCPUAllocator:
can't allocate memory` or `... not enough memory`. It is the same event as a GPU's OOM (the
micro-batch does not fit here), so the probe classes it the same: `status: oom`, a result. A
`MemoryError` from Python or NumPy is one too.
"""

from __future__ import annotations

# What torch's CPU allocator says (c10/core/impl/alloc_cpu.cpp, CPUAllocator.cpp) when the
# allocation fails; lower case.
CPU_ALLOCATOR_MESSAGES = (
    "defaultcpuallocator: can't allocate memory",
    "defaultcpuallocator: not enough memory",
)


def is_oom(e: BaseException) -> bool:
    """Whether `e` says the process ran out of memory (device or host)."""
    import torch

    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    if isinstance(e, RuntimeError):
        text = str(e).lower()
        return any(m in text for m in CPU_ALLOCATOR_MESSAGES)
    return False
