"""DDP probes: one probe run as N processes with DistributedDataParallel on this node.

`autotune.process.entry.run` hands a config with `world_size > 1` (or `oom_retry`,
`measure_scaling`) to `launch`, which runs in the probe's own process (the trial process of a
study, or the CLI) and:

* hosts the rendezvous store on 127.0.0.1 and starts one `python -m autotune.process.ranks`
  process per rank, with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, the thread count
  and the trial's environment knobs in its environment before Python starts (NCCL/RCCL read them
  once per process). The ranks stay in the launcher's process group: a trial timeout that kills
  the group kills them too, and each rank also dies with the launcher (PR_SET_PDEATHSIG). What a
  rank leaves running when it ends (a helper it started, holding the rank's log pipe open) is
  adopted by the launcher and ended (`autotune.process.leftovers`): the probe ends when its ranks
  do, as a one-process probe does;
* relays rank 0's reports (start, telemetry, oom) and combines every rank's summary into one;
  each rank reports on a channel of its own (`autotune.process.channel`), its output is its log;
* watches the ranks: a failed rank gets the others killed after a short grace, and a rank that
  never finishes the all-reduce check is a hang (`comm_hang`);
* retries once after an out-of-memory with half the micro-batch and twice the accumulation
  (`probe.oom_retry`), and times one process for `scaling_efficiency` (`probe.measure_scaling`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from autotune.probe import ProbeConfig, Report, run_probe
from autotune.probe.summary import ProbeStatus
from autotune.process import channel as report_channel
from autotune.process import leftovers, probe_file
from autotune.process.env import process_env
from autotune.process.rank_failures import Failure, death, error_text, named, root
from autotune.process.ranks import (
    COMM_CAUSES,
    COMM_TIMEOUT_ENV,
    CommError,
    RankContext,
    RankFailure,
    comm_timeout_s,
)
from autotune.process.spawn import die_with_parent, python_module

FAILURE_GRACE_S = 3.0  # after one rank fails, the others get this long to report, then SIGKILL
READER_STACK = 512 << 10  # bytes: a reader's stack (reading lines, parsing flat JSON)
SCALING_MIN_STEPS = 20  # the one-process run of measure_scaling: max(20, steps / 4) steps
TAIL_LINES = 40


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
    if result["status"] == ProbeStatus.OOM and cfg.oom_retry and base.micro_batch >= 2:
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
    if cfg.measure_scaling and result["status"] == ProbeStatus.OK:
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
    env = process_env(cfg.env, cfg.threads)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
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
    log_reader: threading.Thread | None = None
    eof: bool = False
    exited_at: float = 0.0
    killed: bool = False  # by the launcher: its exit is not a failure of its own


def _read_log(r: int, proc: subprocess.Popen[str], q: queue.Queue[tuple[int, str, Any]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        q.put((r, "line", line.rstrip("\n")))
    q.put((r, "eof", None))


def _read_reports(
    r: int, channel: report_channel.Channel, q: queue.Queue[tuple[int, str, Any]]
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
    path = probe_file.write(cfg.to_dict(), probe_file.RANKS)
    q: queue.Queue[tuple[int, str, Any]] = queue.Queue()
    ranks: list[_Rank] = []
    was = leftovers.adopt_orphans()  # the ranks' orphans: this process's, to be ended
    before = leftovers.children()  # not the ranks'
    try:
        for r in range(world):
            channel = report_channel.Channel()
            try:
                proc = subprocess.Popen(
                    python_module("autotune.process.ranks", path),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**rank_env(cfg, r, world, store.port), **channel.env()},
                    pass_fds=(channel.write_fd,),
                    text=True,
                    errors="replace",  # a stray byte a program prints: U+FFFD, never a dead reader
                    bufsize=1,
                    preexec_fn=die_with_parent,  # in a rank: SIGKILL when the launcher dies
                )
            except BaseException:
                channel.close()
                raise
            channel.close_child_end()
            reader = threading.Thread(target=_read_log, args=(r, proc, q), daemon=True)
            ranks.append(_Rank(proc, log_reader=reader))
            _start_small(reader)
            _start_small(threading.Thread(target=_read_reports, args=(r, channel, q), daemon=True))

        def end_left() -> None:  # what the ended ranks left running (a live rank is kept)
            leftovers.end_children(before | {rk.proc.pid for rk in ranks})

        failures = _supervise(ranks, q, emit, timeout, end_left)
    finally:
        for rk in ranks:
            _stop_rank(rk)
        for rk in ranks:
            rk.proc.wait()
        leftovers.end_children(before)
        leftovers.adopt_orphans(was)
        for rk in ranks:
            _close_log(rk)
        probe_file.remove(path)
        del store
    return _combine(cfg, ranks, failures)


def _start_small(thread: threading.Thread) -> None:
    """Start one of the launcher's readers on a stack of READER_STACK, not the process's 8 MiB:
    under AUTOTUNE_PROBE_MEMORY_MB a thread's stack is data memory the limit counts, and the
    readers of a 2-rank probe took 32 MiB of what the limit gives the probe (it failed with
    "can't start new thread" at 30 MiB, where the same probe in one process fit)."""
    was = threading.stack_size(READER_STACK)
    try:
        thread.start()
    finally:
        threading.stack_size(was)


def _close_log(rk: _Rank) -> None:
    """Close the rank's log once read to its end. A process that left with `setsid` may hold
    it open: closing it then would wait for the reader's lock for ever (it ends with the pipe)."""
    assert rk.log_reader is not None and rk.proc.stdout is not None
    rk.log_reader.join(timeout=1.0)
    if not rk.log_reader.is_alive():
        rk.proc.stdout.close()


def _stop_rank(rk: _Rank) -> None:
    if rk.proc.poll() is None:
        rk.killed = True
        with contextlib.suppress(ProcessLookupError):
            rk.proc.kill()


def _supervise(
    ranks: list[_Rank],
    q: queue.Queue[tuple[int, str, Any]],
    emit: Report,
    timeout: float,
    end_left: Callable[[], None],
) -> list[Failure]:
    """Read every rank until all have ended (`end_left()` as each does); kill them all once one
    has failed (after a grace) or when the all-reduce check outlasts the communication timeout."""
    failures: list[Failure] = []
    check_deadline: float | None = None
    exited: set[int] = set()

    def fail(r: int | None, cause: str, message: str) -> None:
        failures.append(Failure(time.monotonic(), r, cause, message))

    while not all(rk.eof and rk.proc.poll() is not None for rk in ranks):
        try:
            r, kind, payload = q.get(timeout=0.2)
        except queue.Empty:
            pass
        else:
            if _on_message(ranks, r, kind, payload, emit, fail):
                check_deadline = time.monotonic() + timeout + FAILURE_GRACE_S
        now = time.monotonic()
        _reap(ranks, exited, now, fail, end_left)
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
                _stop_rank(rk)
        if failures and now > failures[0].at + FAILURE_GRACE_S:
            for rk in ranks:
                _stop_rank(rk)
    return failures


def _on_message(
    ranks: list[_Rank],
    r: int,
    kind: str,
    payload: Any,
    emit: Report,
    fail: Callable[[int | None, str, str], None],
) -> bool:
    """Take one message of rank `r` (an end of stream, an output line or a report); True when it
    was the last rank to come up (the all-reduce check's clock starts)."""
    rk = ranks[r]
    if kind == "eof":
        rk.streams -= 1
        rk.eof = rk.streams == 0
        return False
    if kind == "line":
        rk.tail.append(payload)
        sys.stderr.write(f"[rank {r}] {payload}\n")
        return False
    event = payload.get("event")
    if event == "rank_up":
        rk.up = True
        return all(x.up for x in ranks)
    if event == "comm_ok":
        rk.comm_ok = True
    elif event == "summary":
        rk.summary = payload
        if payload.get("status") == ProbeStatus.OOM:
            fail(r, "oom", "out of memory")
    elif event == "error":
        rk.error = payload
        fail(r, payload.get("cause") or "exception", error_text(r, payload))
        if payload.get("traceback"):
            sys.stderr.write(f"[rank {r}] {payload['traceback']}\n")
    elif r == 0:
        emit({k: v for k, v in payload.items() if k != "rank"})
    return False


def _reap(
    ranks: list[_Rank],
    exited: set[int],
    now: float,
    fail: Callable[[int | None, str, str], None],
    end_left: Callable[[], None],
) -> None:
    """Note the ranks that have ended; one that ended without a report is a failure, whatever
    its exit status (a workload's os._exit(0) included: the others' errors follow from it)."""
    for r, rk in enumerate(ranks):
        rc = rk.proc.poll()
        if rc is not None and not rk.eof:
            if not rk.exited_at:  # a helper it started may hold its log open: ended
                rk.exited_at = now
                end_left()
            # one that left with setsid escapes that: stop waiting for its log's end
            rk.eof = now > rk.exited_at + FAILURE_GRACE_S
        if rc is None or r in exited or not rk.eof:
            continue
        exited.add(r)
        if not rk.killed and rk.error is None and rk.summary is None:
            fail(r, *death(r, rc, rk.tail))


def _combine(cfg: ProbeConfig, ranks: list[_Rank], failures: list[Failure]) -> dict[str, Any]:
    """One summary from the ranks', or the failure that explains the others."""
    summaries = [rk.summary for rk in ranks]
    ooms = [s for s in summaries if s is not None and s.get("status") == ProbeStatus.OOM]
    real = [f for f in failures if f.cause != "oom"]
    if ooms and not any(f.cause in COMM_CAUSES for f in real):
        out = dict(ooms[0])  # the others stopped because of it
        out.setdefault("series", {})
    elif failures or any(s is None for s in summaries):
        f = root(failures)
        if f is None:
            raise RankFailure("crash", "a rank ended without a summary")
        silent = [r for r, rk in enumerate(ranks) if rk.killed and not (rk.error or rk.summary)]
        if f.cause in COMM_CAUSES:
            raise CommError(f.cause, named(f, silent))
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
