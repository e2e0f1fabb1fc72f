"""DDP probes: one probe run as N processes with DistributedDataParallel on this node.

`run_probe` hands a config with `world_size > 1` (or `oom_retry`, `measure_scaling`) to `launch`,
which runs in the probe's own process (the trial process of a study, or the CLI) and:

* hosts the rendezvous store on 127.0.0.1 and starts one `python -m autotune.distributed` process
  per rank, with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, the thread count and
  the trial's environment knobs in its environment before Python starts (NCCL/RCCL read them
  once per process). The ranks stay in the launcher's process group: a trial timeout that kills
  the group kills them too, and each rank also dies with the launcher (PR_SET_PDEATHSIG);
* relays rank 0's reports (start, telemetry, oom) and combines every rank's summary into one;
  each rank reports on a channel of its own (`autotune.report`), its output is its log;
* watches the ranks: a failed rank gets the others killed after a short grace, and a rank that
  never finishes the all-reduce check is a hang (`comm_hang`);
* retries once after an out-of-memory with half the micro-batch and twice the accumulation
  (`probe.oom_retry`), and times one process for `scaling_efficiency` (`probe.measure_scaling`).

Each rank joins the process group (nccl on GPUs, gloo on the CPU), checks one all-reduce of known
values, then runs the same `run_probe` loop as a single process, with a `RankContext` that wraps
the model in DDP (the DDP knobs go to its constructor), gives the rank its shard of each batch,
averages the reported loss over the ranks and adds a held-out evaluation.

`ray_train_probe` runs the same ranks as Ray Train workers (a TorchTrainer), which may sit on
different Ray nodes.

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
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune import report as report_protocol
from autotune.probe import ProbeConfig, Report, run_probe
from autotune.space import ENV_PREFIXES
from autotune.spare import die_with_parent

if TYPE_CHECKING:
    import torch

    from autotune.workload import Batch, Workload

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
FAILURE_GRACE_S = 3.0  # after one rank fails, the others get this long to report, then SIGKILL
SCALING_MIN_STEPS = 20  # the one-process run of measure_scaling: max(20, steps / 4) steps
TAIL_LINES = 40
_INTERNAL_EVENTS = ("rank_up", "comm_ok")
_CAUSE_RANK = {"comm_incorrect": 0, "comm_hang": 1, "oom": 2, "killed": 3, "crash": 3}


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


# ---------------------------------------------------------------------------------------------
# Inside a rank
# ---------------------------------------------------------------------------------------------


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
        if result["status"] == "oom":  # the other ranks may be stuck: no collective now
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

    from autotune.probe import _to_device

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
                batch = _to_device(batches[i], device)
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
    import torch
    import torch.distributed as dist

    cause = getattr(e, "cause", None)
    if isinstance(cause, str):
        return cause
    if isinstance(e, torch.OutOfMemoryError):
        return "oom"
    text = str(e).lower()
    comm = isinstance(e, dist.DistError) or "gloo" in text or "nccl" in text
    if comm and ("timed out" in text or "timeout" in text):
        return "comm_hang"
    return "exception"


def rank_main(cfg_path: str) -> int:
    """`python -m autotune.distributed CONFIG.json` with RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR and MASTER_PORT set: one rank. Rank 0 reports everything; the others report
    only what the launcher combines (readiness, the check, their summary or error), on the
    report channel of their environment."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    channel = report_protocol.Writer.from_env()
    if channel is None:
        print(f"a rank reports on the channel of {report_protocol.FD_ENV}", file=sys.stderr)
        return 2

    def report(msg: dict[str, Any]) -> None:
        if rank == 0 or msg.get("event") in ("summary", "error", *_INTERNAL_EVENTS):
            if msg.get("event") == "summary" and rank != 0:
                msg = {k: v for k, v in msg.items() if k != "series"}
            channel({**msg, "rank": rank})

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
                "message": str(e),
                "traceback": traceback.format_exc(limit=20),
            }
        )
        return 3
    return 0


# ---------------------------------------------------------------------------------------------
# The launcher
# ---------------------------------------------------------------------------------------------


def launch(cfg: ProbeConfig, emit: Report) -> dict[str, Any]:
    """Run `cfg` as `cfg.world_size` processes (or in this one, for one process with
    oom_retry); emit rank 0's reports and the combined summary, and return that summary.

    An out-of-memory is a result (status oom, after the retry if asked for); a failed
    all-reduce check raises CommError(comm_incorrect), a hang CommError(comm_hang), any other
    rank failure RankFailure (its cause and the rank's message)."""
    t0 = time.perf_counter()
    world = cfg.world_size
    base = _resolved(cfg)
    if world > 1:
        emit(
            {
                "event": "ddp",
                "world_size": world,
                "device": base.device,
                "backend": "nccl" if base.device == "cuda" else "gloo",
                "threads_per_rank": base.threads,
            }
        )
    result = _attempt(base, emit)
    result["oom_retried"] = False
    accum = int(base.knobs.get("accum_steps") or 1)
    if result["status"] == "oom" and cfg.oom_retry and base.micro_batch >= 2:
        retry = dataclasses.replace(
            base,
            micro_batch=base.micro_batch // 2,
            knobs={**base.knobs, "accum_steps": accum * 2},
        )
        emit(
            {
                "event": "oom_retry",
                "micro_batch": retry.micro_batch,
                "accum_steps": accum * 2,
                "effective_batch": retry.micro_batch * accum * 2 * world,
            }
        )
        _free_device_memory()
        result = _attempt(retry, emit)
        result["oom_retried"] = True
        base = retry
    if cfg.measure_scaling and result["status"] == "ok":
        _add_scaling(result, base)
    result["wall_s"] = time.perf_counter() - t0
    emit(result)
    return result


def _resolved(cfg: ProbeConfig) -> ProbeConfig:
    """The per-rank config: device cpu or cuda (rank r takes cuda:r of the visible GPUs) and the
    probe's threads shared out between the ranks."""
    import torch

    world = cfg.world_size
    if world == 1:
        return cfg
    device = cfg.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if device != "cuda":
            raise RankFailure(
                "exception",
                f"probe.device is {device!r}, but a DDP probe gives rank r the GPU cuda:r of "
                "those visible: set probe.device to cuda or auto",
            )
        visible = torch.cuda.device_count()
        if visible < world:
            raise RankFailure(
                "exception",
                f"probe.world_size {world} needs {world} GPUs (one per process), torch sees "
                f"{visible}: ask for budget.gpus_per_trial >= {world} or lower the world size",
            )
    threads = max(1, (cfg.threads or os.cpu_count() or 1) // world)
    return dataclasses.replace(cfg, device=device, threads=threads)


def _attempt(cfg: ProbeConfig, emit: Report) -> dict[str, Any]:
    if cfg.world_size == 1:
        return _run_here(cfg, emit)
    return _run_ranks(cfg, emit)


def _run_here(cfg: ProbeConfig, emit: Report) -> dict[str, Any]:
    """One process, in this one (oom_retry without DDP)."""

    def relay(msg: dict[str, Any]) -> None:
        if msg.get("event") != "summary":
            emit(msg)

    ctx = RankContext(rank=0, world_size=1, cfg=cfg, distributed=False)
    result = run_probe(cfg, relay, rank=ctx)
    result["rank_env"] = [result.pop("env_seen")]
    return result


def _free_device_memory() -> None:
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def rank_env(cfg: ProbeConfig, rank: int, world_size: int, port: int) -> dict[str, str]:
    """This process's environment, the trial's environment knobs, and the rank's variables."""
    env = dict(os.environ)
    env.update({k: str(v) for k, v in cfg.env.items()})
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    if cfg.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(cfg.threads)
    return env


@dataclass
class _Rank:
    proc: subprocess.Popen[str]
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    up: bool = False
    comm_ok: bool = False
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    streams: int = 2  # its log and its report channel, until each has ended
    eof: bool = False
    exited_at: float = 0.0
    killed: bool = False  # by the launcher: its exit is not a failure of its own


@dataclass
class _Failure:
    at: float
    rank: int | None
    cause: str
    message: str


def _read_log(r: int, proc: subprocess.Popen[str], q: queue.Queue[tuple[int, str, Any]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        q.put((r, "line", line.rstrip("\n")))
    q.put((r, "eof", None))


def _read_reports(
    r: int, channel: report_protocol.Channel, q: queue.Queue[tuple[int, str, Any]]
) -> None:
    for msg in channel.reports():
        q.put((r, "event", msg))
    if channel.rejected:
        q.put((r, "line", channel.rejected_note()))
    q.put((r, "eof", None))


def _run_ranks(cfg: ProbeConfig, emit: Report) -> dict[str, Any]:
    import torch.distributed as dist

    world, timeout = cfg.world_size, comm_timeout_s()
    # The launcher hosts the store on a port the kernel picks: no race for a free port.
    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, timedelta(seconds=timeout), wait_for_workers=False
    )
    with tempfile.NamedTemporaryFile(
        "w", suffix=".json", prefix="autotune-rank-", delete=False
    ) as f:
        json.dump(cfg.to_dict(), f)
        path = f.name
    q: queue.Queue[tuple[int, str, Any]] = queue.Queue()
    ranks: list[_Rank] = []
    try:
        for r in range(world):
            channel = report_protocol.Channel()
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "autotune.distributed", path],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**rank_env(cfg, r, world, store.port), **channel.env()},
                    pass_fds=(channel.write_fd,),
                    text=True,
                    bufsize=1,
                    preexec_fn=die_with_parent,  # in a rank: SIGKILL when the launcher dies
                )
            except BaseException:
                channel.close()
                raise
            channel.close_child_end()
            ranks.append(_Rank(proc))
            threading.Thread(target=_read_log, args=(r, proc, q), daemon=True).start()
            threading.Thread(target=_read_reports, args=(r, channel, q), daemon=True).start()
        failures = _supervise(ranks, q, emit, timeout)
    finally:
        for rk in ranks:
            _kill(rk)
        for rk in ranks:
            rk.proc.wait()
            if rk.proc.stdout is not None:
                rk.proc.stdout.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        del store
    return _combine(cfg, ranks, failures)


def _kill(rk: _Rank) -> None:
    if rk.proc.poll() is None:
        rk.killed = True
        with contextlib.suppress(ProcessLookupError):
            rk.proc.kill()


def _supervise(
    ranks: list[_Rank], q: queue.Queue[tuple[int, str, Any]], emit: Report, timeout: float
) -> list[_Failure]:
    """Read every rank until all have ended; kill them all once one has failed (after a grace)
    or when the all-reduce check outlasts the communication timeout."""
    failures: list[_Failure] = []
    check_deadline: float | None = None
    exited: set[int] = set()

    def fail(r: int | None, cause: str, message: str) -> None:
        failures.append(_Failure(time.monotonic(), r, cause, message))

    while not all(rk.eof and rk.proc.poll() is not None for rk in ranks):
        try:
            r, kind, payload = q.get(timeout=0.2)
        except queue.Empty:
            pass
        else:
            rk = ranks[r]
            if kind == "eof":
                rk.streams -= 1
                rk.eof = rk.streams == 0
            elif kind == "line":
                rk.tail.append(payload)
                sys.stderr.write(f"[rank {r}] {payload}\n")
            else:
                event = payload.get("event")
                if event == "rank_up":
                    rk.up = True
                    if all(x.up for x in ranks):
                        check_deadline = time.monotonic() + timeout + FAILURE_GRACE_S
                elif event == "comm_ok":
                    rk.comm_ok = True
                elif event == "summary":
                    rk.summary = payload
                    if payload.get("status") == "oom":
                        fail(r, "oom", "out of memory")
                elif event == "error":
                    rk.error = payload
                    fail(r, payload.get("cause") or "exception", _error_text(r, payload))
                    if payload.get("traceback"):
                        sys.stderr.write(f"[rank {r}] {payload['traceback']}\n")
                elif r == 0:
                    emit({k: v for k, v in payload.items() if k != "rank"})
        now = time.monotonic()
        for r, rk in enumerate(ranks):
            rc = rk.proc.poll()
            if rc is not None and not rk.eof:  # a child holding its stdout: stop waiting
                rk.exited_at = rk.exited_at or now
                rk.eof = now > rk.exited_at + FAILURE_GRACE_S
            if rc is None or r in exited or not rk.eof:
                continue
            exited.add(r)
            if rc != 0 and not rk.killed and rk.error is None and rk.summary is None:
                fail(r, *_death(r, rc, rk.tail))
        if (
            check_deadline is not None
            and now > check_deadline
            and not all(rk.comm_ok for rk in ranks)
            and not failures
        ):
            late = [r for r, rk in enumerate(ranks) if not rk.comm_ok]
            fail(
                None,
                "comm_hang",
                f"rank(s) {late} did not finish the all-reduce check within the "
                f"communication timeout of {timeout:g} s ({COMM_TIMEOUT_ENV})",
            )
            for rk in ranks:  # a hang the launcher saw itself: no rank is left to report
                _kill(rk)
        if failures and now > failures[0].at + FAILURE_GRACE_S:
            for rk in ranks:
                _kill(rk)
    return failures


def _death(r: int, rc: int, tail: deque[str]) -> tuple[str, str]:
    if rc < 0:
        sig = -rc
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        text = "\n".join(tail).lower()
        if "timeout" in text or "timed out" in text:  # the NCCL watchdog aborts on a timeout
            return "comm_hang", f"rank {r} died from {name} after a collective timed out"
        killed = sig in (signal.SIGKILL, signal.SIGTERM)
        return ("killed" if killed else "crash"), f"rank {r} died from {name}"
    return "crash", f"rank {r} exited with status {rc} without a summary"


def _error_text(r: int, err: Mapping[str, Any]) -> str:
    return f"rank {r}: {err.get('error_type', 'Error')}: {err.get('message', '')}"


def _combine(cfg: ProbeConfig, ranks: list[_Rank], failures: list[_Failure]) -> dict[str, Any]:
    """One summary from the ranks', or the failure that explains the others."""
    summaries = [rk.summary for rk in ranks]
    ooms = [s for s in summaries if s is not None and s.get("status") == "oom"]
    real = [f for f in failures if f.cause != "oom"]
    if ooms and not any(f.cause in COMM_CAUSES for f in real):
        out = dict(ooms[0])  # the others stopped because of it
        out.setdefault("series", {})
    elif failures or any(s is None for s in summaries):
        f = _root(failures)
        if f is None:
            raise RankFailure("crash", "a rank ended without a summary")
        if f.cause in COMM_CAUSES:
            raise CommError(f.cause, f.message)
        raise RankFailure(f.cause, f.message)
    else:
        out = dict(summaries[0] or {})
    full = [s for s in summaries if s is not None]
    out.pop("rank", None)
    out.pop("env_seen", None)
    out["world_size"] = cfg.world_size
    out["threads_per_rank"] = cfg.threads
    out["rank_env"] = [s.get("env_seen") or {} for s in full]
    out["ranks"] = [
        {
            "rank": s.get("rank"),
            "status": s.get("status"),
            "steps_run": s.get("steps_run"),
            "peak_mem_mb": (s.get("metrics") or {}).get("peak_mem_mb"),
            "wall_s": s.get("wall_s"),
        }
        for s in full
    ]
    peaks = [p["peak_mem_mb"] for p in out["ranks"] if p["peak_mem_mb"] is not None]
    if peaks:
        out["metrics"] = {**(out.get("metrics") or {}), "peak_mem_mb": max(peaks)}
    return out


def _root(failures: list[_Failure]) -> _Failure | None:
    """The failure that explains the others: a communication fault first, then an
    out-of-memory, a death, and else the earliest exception (a peer's 'connection closed'
    follows it)."""
    if not failures:
        return None
    return min(failures, key=lambda f: (_CAUSE_RANK.get(f.cause, 4), f.at))


def _add_scaling(result: dict[str, Any], cfg: ProbeConfig) -> None:
    """Time one process at the same per-rank micro-batch and threads: scaling_efficiency =
    throughput(N) / (N x throughput(1))."""
    metrics = result.setdefault("metrics", {})
    world = cfg.world_size
    if world == 1:
        metrics["scaling_efficiency"] = 1.0
        return
    steps = min(cfg.steps, max(SCALING_MIN_STEPS, cfg.steps // 4))
    single = dataclasses.replace(
        cfg, world_size=1, steps=steps, oom_retry=False, measure_scaling=False
    )
    info: dict[str, Any] = {"steps": steps, "throughput_n": metrics.get("throughput")}
    try:
        one = _run_ranks(single, lambda _msg: None)
        info["throughput_1"] = (one.get("metrics") or {}).get("throughput")
    except Exception as e:
        info["error"] = f"{type(e).__name__}: {e}"
    thr_n, thr_1 = info.get("throughput_n"), info.get("throughput_1")
    efficiency = None
    if thr_n and thr_1:
        efficiency = float(thr_n) / (world * float(thr_1))
    metrics["scaling_efficiency"] = efficiency
    result["scaling"] = info


# ---------------------------------------------------------------------------------------------
# The same probe under Ray Train (ranks on several Ray nodes)
# ---------------------------------------------------------------------------------------------


def ray_train_probe(
    cfg: ProbeConfig, *, storage_path: str, placement: str = "SPREAD"
) -> dict[str, Any]:
    """Run `cfg` as `cfg.world_size` Ray Train workers (a TorchTrainer; the caller has called
    `ray.init`), spread over the cluster's nodes. Each worker's environment holds the trial's
    environment knobs before it starts (`worker_runtime_env`); Ray Train sets up the process
    group (gloo on CPUs, nccl on GPUs, with the communication timeout) and gives each worker its
    device from the GPUs Ray made visible to it. Returns the combined summary, as `launch` does
    (without oom_retry and measure_scaling)."""
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.train.v2.api.config import RunConfig, ScalingConfig  # Ray Train v2 (Ray 2.60)

    use_gpu = cfg.device.startswith("cuda")
    trainer = TorchTrainer(
        _ray_train_worker,
        train_loop_config={"probe": cfg.to_dict()},
        torch_config=TorchConfig(
            backend="nccl" if use_gpu else "gloo", timeout_s=int(comm_timeout_s())
        ),
        scaling_config=ScalingConfig(
            num_workers=cfg.world_size,
            use_gpu=use_gpu,
            resources_per_worker={"CPU": float(cfg.threads or 1)},
            placement_strategy=placement,
        ),
        run_config=RunConfig(  # type: ignore[arg-type]  # v2 config; the stub names v1
            storage_path=storage_path,
            worker_runtime_env={
                "env_vars": {
                    **{k: str(v) for k, v in cfg.env.items()},
                    "OMP_NUM_THREADS": str(cfg.threads or 1),
                }
            },
        ),
    )
    result = trainer.fit()
    if result.error is not None:
        raise RankFailure(cause_of(result.error), f"Ray Train: {result.error}")
    if result.checkpoint is None:
        raise RankFailure("crash", "Ray Train finished without rank 0's summary")
    with result.checkpoint.as_directory() as folder:
        summary: dict[str, Any] = json.loads((Path(folder) / "summary.json").read_text())
    return summary


def _ray_train_worker(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch.distributed as dist

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    cfg = dataclasses.replace(
        ProbeConfig.from_dict(config["probe"]), device=str(device), world_size=world
    )
    check_allreduce(rank, world, device)
    result = run_probe(cfg, None, rank=RankContext(rank, world, cfg, distributed=True))
    mine = {k: v for k, v in result.items() if k != "series"}
    mine["node"] = ray.get_runtime_context().get_node_id()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        result.pop("env_seen", None)
        result.pop("rank", None)
        result["world_size"] = world
        result["rank_env"] = [g.get("env_seen") for g in gathered]
        result["ranks"] = [
            {"rank": g.get("rank"), "status": g.get("status"), "node": g.get("node")}
            for g in gathered
        ]
    # Ray Train v2 keeps only metrics that come with a checkpoint: rank 0's summary is one.
    with tempfile.TemporaryDirectory(prefix="autotune-summary-") as folder:
        checkpoint = None
        if rank == 0:
            text = json.dumps(result, default=report_protocol.json_default)
            (Path(folder) / "summary.json").write_text(text)
            checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report({"status": result["status"]}, checkpoint=checkpoint)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: RANK=.. WORLD_SIZE=.. python -m autotune.distributed CONFIG.json")
        raise SystemExit(2)
    raise SystemExit(rank_main(sys.argv[1]))
