"""One rank of a DDP probe: the process group, the all-reduce check, sharding, evaluation.

`python -m autotune.process.ranks CONFIG.json`, started by `autotune.process.supervisor` with
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in its environment (`rank_main`), joins
the process group (nccl on GPUs, gloo on the CPU), checks one all-reduce of known values, then
runs the same `run_probe` loop as a single process, with a `RankContext` that wraps the model in
DDP (the DDP knobs go to its constructor), gives the rank its shard of each batch, averages the
reported loss over the ranks and adds a held-out evaluation. Each rank reports on a channel of
its own (`autotune.process.channel`); its output is its log.

Sharding is that of `torch.utils.data.DistributedSampler`: every rank draws the same seeded stream
of global batches of `micro_batch * world_size` samples and keeps its own slice, so the ranks see
disjoint data and together exactly what one process sees at that micro-batch. One process at
micro-batch `m * N` and N ranks at `m` therefore train on the same samples, step for step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.knobs import ENV_PREFIXES
from autotune.probe import ProbeConfig, run_probe
from autotune.probe.oom import is_oom
from autotune.probe.summary import ProbeStatus
from autotune.process import channel as report_channel
from autotune.process import memory_limit

if TYPE_CHECKING:
    import torch

    from autotune.probe.workload import Batch, Workload


#: Seconds a collective (and the rendezvous) may wait before it counts as a hang.
COMM_TIMEOUT_ENV = "AUTOTUNE_COMM_TIMEOUT_S"


DEFAULT_COMM_TIMEOUT_S = 120.0


#: Test hooks: the rank of this number sleeps before the all-reduce check / sends wrong values /
#: raises out-of-memory when its micro-batch is larger than the value.
STALL_ENV = "AUTOTUNE_TEST_STALL_RANK"


CORRUPT_ENV = "AUTOTUNE_TEST_CORRUPT_RANK"


OOM_ENV = "AUTOTUNE_TEST_OOM_ABOVE"


COMM_CAUSES = ("comm_incorrect", "comm_hang")


CHECK_ELEMENTS = 1 << 20  # 4 MiB of float32: more than one NCCL buffer and channel's worth


_INTERNAL_EVENTS = ("rank_up", "comm_ok")


class CommError(RuntimeError):
    """Communication between the ranks failed: `cause` is comm_incorrect or comm_hang."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


class RankFailure(RuntimeError):
    """A rank failed other than by communication; `cause` as run_trial_process names causes."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def comm_timeout_s() -> float:
    raw = os.environ.get(COMM_TIMEOUT_ENV)
    return float(raw) if raw else DEFAULT_COMM_TIMEOUT_S


@dataclass
class RankContext:
    """What `run_probe` needs to know to run as one rank of `world_size` (see its hooks)."""

    rank: int
    world_size: int
    cfg: ProbeConfig
    distributed: bool  # a process group is up (False: one process, no DDP)

    def wrap(self, model: torch.nn.Module, knobs: Mapping[str, Any]) -> torch.nn.Module:
        """DDP around `model` with the four DDP knobs; the model itself without a group."""
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        # PyTorch 2.13 renamed broadcast_buffers (the buffer sync before each forward).
        new_name = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
        sync: dict[str, Any] = {
            "forward_sync_buffers" if new_name else "broadcast_buffers": bool(
                knobs["broadcast_buffers"]
            )
        }
        return _ddp_class()(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=float(knobs["bucket_cap_mb"]),
            gradient_as_bucket_view=bool(knobs["gradient_as_bucket_view"]),
            static_graph=bool(knobs["static_graph"]),
            **sync,
        )

    def batches(self, workload: Workload, micro_batch: int, seed: int) -> Iterator[Batch]:
        """This rank's slice of each global batch of the seed's stream (see the module doc)."""
        limit = os.environ.get(OOM_ENV)
        if limit and micro_batch > int(limit):
            return _oom(micro_batch, int(limit))
        if self.world_size == 1:
            return workload.batches(micro_batch, seed)
        stream = workload.batches(micro_batch * self.world_size, seed)
        return shard_stream(stream, self.rank, self.world_size, micro_batch)

    def mean(self, values: np.ndarray) -> np.ndarray:
        """The mean of `values` over the ranks (one all-reduce for a whole telemetry chunk)."""
        if not self.distributed:
            return values
        import torch
        import torch.distributed as dist

        t = torch.as_tensor(values, dtype=torch.float64, device=_comm_device())
        dist.all_reduce(t)
        return np.asarray((t / self.world_size).cpu().numpy(), dtype=values.dtype)

    def finish(
        self, result: dict[str, Any], model: torch.nn.Module, workload: Workload
    ) -> dict[str, Any]:
        """Add the evaluation, the world size and the environment this rank saw."""
        import torch

        result["world_size"] = self.world_size
        result["rank"] = self.rank
        result["env_seen"] = env_seen(self.cfg.env)
        if result["status"] == ProbeStatus.OOM:  # the other ranks may be stuck: no collective now
            return result
        amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.cfg.precision)
        if self.distributed:
            sync_buffers(model)
        loss, count = evaluate(
            model,
            workload,
            self.cfg.micro_batch,
            amp,
            self.rank,
            self.world_size,
            all_reduce_sum if self.distributed else None,
        )
        result["metrics"]["eval_loss"] = loss if math.isfinite(loss) else None
        result["eval_samples"] = count
        return result


@functools.cache
def _ddp_class() -> type[torch.nn.parallel.DistributedDataParallel]:
    from torch.nn.parallel import DistributedDataParallel

    class ProbeDDP(DistributedDataParallel):
        """DDP whose `no_sync` waits for one synchronised forward/backward under static_graph:
        PyTorch's reducer records the static graph on the first iteration and fails an internal
        assert if that iteration runs inside no_sync (torch 2.13). The gradients are the same;
        the first micro-batch of the first step is all-reduced once more."""

        _forwards = 0

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            out = super().forward(*args, **kwargs)
            self._forwards += 1
            return out

        def no_sync(self) -> Any:
            if self.static_graph and self._forwards == 0:
                return contextlib.nullcontext()
            return super().no_sync()

    return ProbeDDP


def _oom(micro_batch: int, limit: int) -> Iterator[Batch]:
    import torch

    raise torch.OutOfMemoryError(
        f"{OOM_ENV}={limit}: a micro-batch of {micro_batch} does not fit (test hook)"
    )
    yield ()  # a generator: raised at the first batch, inside the probe's training loop


def shard_stream(
    stream: Iterator[Batch], rank: int, world_size: int, micro_batch: int
) -> Iterator[Batch]:
    """Rows [rank * micro_batch, (rank + 1) * micro_batch) of each global batch of `stream`."""
    lo, size = rank * micro_batch, micro_batch * world_size
    for batch in stream:
        if any(int(t.shape[0]) != size for t in batch):
            shapes = [tuple(t.shape) for t in batch]
            raise ValueError(
                f"a DDP probe splits each batch along dimension 0 into {world_size} shards: "
                f"every tensor of a batch of {size} needs {size} rows, got shapes {shapes}"
            )
        yield tuple(t[lo : lo + micro_batch] for t in batch)


def shard_indices(n: int, rank: int, world_size: int) -> list[tuple[int, bool]]:
    """DistributedSampler's split of `n` items: padded to a multiple of `world_size` by
    repeating from the start, every `world_size`-th from `rank`; each with whether it counts
    (False for a padding duplicate, which must not be counted twice)."""
    if n <= 0:
        return []
    total = math.ceil(n / world_size) * world_size
    return [(j % n, j < n) for j in range(rank, total, world_size)]


def evaluate(
    model: torch.nn.Module,
    workload: Workload,
    micro_batch: int,
    amp_dtype: torch.dtype | None,
    rank: int = 0,
    world_size: int = 1,
    reduce: Callable[[torch.Tensor], None] | None = None,
) -> tuple[float, int]:
    """Mean held-out loss over the workload's eval set and how many samples (or tokens) it
    weighs: each rank sums loss x weight and weight over its shard of the eval batches, `reduce`
    sums those two numbers over the ranks, and the mean is taken last (never a mean of means)."""
    import torch

    from autotune.probe.steps import to_device

    net: torch.nn.Module = getattr(model, "module", model)  # no DDP hooks in the eval forward
    device = next(net.parameters()).device
    batches = workload.eval_batches(micro_batch)
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    training = net.training
    net.eval()
    try:
        with (
            torch.no_grad(),
            torch.autocast(
                device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None
            ),
        ):
            for i, counted in shard_indices(len(batches), rank, world_size):
                if not counted:
                    continue
                batch = to_device(batches[i], device)
                weight = workload.tokens(batch) or workload.samples(batch)
                totals[0] += workload.loss(net, batch).double() * weight
                totals[1] += weight
    finally:
        net.train(training)
    if reduce is not None:
        reduce(totals)
    total, count = (float(x) for x in totals.cpu().tolist())
    return (total / count if count else math.nan), int(count)


def all_reduce_sum(t: torch.Tensor) -> None:
    import torch.distributed as dist

    dist.all_reduce(t)


def sync_buffers(model: torch.nn.Module) -> None:
    """Rank 0's buffers (e.g. BatchNorm statistics) everywhere, so every rank evaluates one
    model."""
    import torch.distributed as dist

    for buf in getattr(model, "module", model).buffers():
        dist.broadcast(buf, 0)


def env_seen(record: Mapping[str, str]) -> dict[str, str | None]:
    """The knob-prefixed environment of this process, read back, plus each recorded knob (None:
    unset here)."""
    names = set(record) | {k for k in os.environ if k.startswith(ENV_PREFIXES)}
    return {k: os.environ.get(k) for k in sorted(names)}


def check_allreduce(rank: int, world_size: int, device: torch.device) -> None:
    """Each rank sends (rank + 1) x v for a known integer vector v; every rank must get
    N(N+1)/2 x v exactly (float32 holds these integers exactly). CommError otherwise."""
    import torch
    import torch.distributed as dist

    base = (torch.arange(CHECK_ELEMENTS, device=device) % 251 + 1).float()
    sent = rank + 1 + (1 if os.environ.get(CORRUPT_ENV) == str(rank) else 0)
    t = base * sent
    dist.all_reduce(t)
    expected = base * (world_size * (world_size + 1) // 2)
    wrong = int((t != expected).sum().item())
    if wrong:
        raise CommError(
            "comm_incorrect",
            f"the all-reduce check returned {wrong} of {CHECK_ELEMENTS} elements wrong on rank "
            f"{rank} (each rank sent (rank + 1) x a known vector; expected the sum "
            f"{world_size * (world_size + 1) // 2} x it): the communication settings corrupt data",
        )


def _comm_device() -> torch.device:
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def cause_of(e: BaseException) -> str:
    """comm_incorrect/comm_hang/oom, or exception. A collective or the rendezvous that timed
    out is a hang (gloo raises RuntimeError naming itself, the store DistStoreError)."""
    import torch.distributed as dist

    cause = getattr(e, "cause", None)
    if isinstance(cause, str):
        return cause
    if is_oom(e) or memory_limit.thread_starved(e):  # gloo's threads' stacks, under the limit
        return "oom"
    text = str(e).lower()
    comm = isinstance(e, dist.DistError) or "gloo" in text or "nccl" in text
    if comm and ("timed out" in text or "timeout" in text):
        return "comm_hang"
    return "exception"


def rank_main(cfg_path: str) -> int:
    """`python -m autotune.process.ranks CONFIG.json` with RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR and MASTER_PORT set: one rank. Rank 0 reports everything; the others report
    only what the launcher combines (readiness, the check, their summary or error), on the
    report channel of their environment."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    channel = report_channel.Writer.from_env()
    if channel is None:
        print(f"a rank reports on the channel of {report_channel.FD_ENV}", file=sys.stderr)
        return 2

    def report(msg: dict[str, Any]) -> None:
        if rank == 0 or msg.get("event") in ("summary", "error", *_INTERNAL_EVENTS):
            if msg.get("event") == "summary" and rank != 0:
                msg = {k: v for k, v in msg.items() if k != "series"}
            channel({**msg, "rank": rank})

    memory_limit.settle_allocator()  # a rank is a cold probe process (autotune.process.malloc)
    try:
        import torch
        import torch.distributed as dist

        with open(cfg_path) as f:
            cfg = ProbeConfig.from_dict(json.load(f))
        device = torch.device("cuda", local) if cfg.device == "cuda" else torch.device("cpu")
        report({"event": "rank_up", "pid": os.getpid()})
        distributed = world > 1
        if distributed:
            if device.type == "cuda":
                torch.cuda.set_device(device)
            timeout = timedelta(seconds=comm_timeout_s())
            store = dist.TCPStore(
                os.environ["MASTER_ADDR"],
                int(os.environ["MASTER_PORT"]),
                world,
                is_master=False,
                timeout=timeout,
            )
            dist.init_process_group(
                "nccl" if device.type == "cuda" else "gloo",
                store=store,
                rank=rank,
                world_size=world,
                timeout=timeout,
            )
            if os.environ.get(STALL_ENV) == str(rank):
                time.sleep(10**6)  # test hook: a rank that never joins the collective
            check_allreduce(rank, world, device)
        report({"event": "comm_ok"})
        ctx = RankContext(rank=rank, world_size=world, cfg=cfg, distributed=distributed)
        run_probe(dataclasses.replace(cfg, device=str(device)), report, rank=ctx)
        if distributed:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
    except Exception as e:
        report(
            {
                "event": "error",
                "cause": cause_of(e),
                "error_type": type(e).__name__,
                "message": memory_limit.thread_starved(e) or str(e),
                "traceback": traceback.format_exc(limit=20),
            }
        )
        return 3
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: RANK=.. WORLD_SIZE=.. python -m autotune.process.ranks CONFIG.json")
        raise SystemExit(2)
    raise SystemExit(rank_main(sys.argv[1]))
