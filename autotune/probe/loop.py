"""The training probe: a short, instrumented training run that applies every knob honestly.

One readable loop (`run_probe`) in the manner of nanoGPT's train.py; the pieces of a step are in
`autotune.probe.steps`, the telemetry in `autotune.probe.telemetry`. It reports through one
callable, `report(dict)`, so the same code runs in a unit test, in a trial process under Ray,
and in `autotune verify`. It imports neither Ray, Optuna nor MLflow, and runs in the process it
is called in: the probe process's entry (`autotune.process.entry`) is what runs a DDP probe (or
one with `oom_retry` or `measure_scaling`) as several processes, each back in here as one rank.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.probe import checkpoint, divergence, metrics, reference
from autotune.probe.config import ProbeConfig, Rank, Report
from autotune.probe.steps import (
    NoGradient,
    NonFiniteLoss,
    build_optimizer,
    build_scaler,
    clip_gradients,
    forward_backward,
    lr_at,
    peak_memory_mb,
    pick_device,
    resolve_knobs,
    seed_everything,
    set_deterministic,
    start_timer,
    stop_timer,
    to_device,
)
from autotune.probe.telemetry import Chunk, anomaly, finite_or_none, flush, thresholds

if TYPE_CHECKING:
    import torch


def run_probe(
    cfg: ProbeConfig, report: Report | None = None, rank: Rank | None = None
) -> dict[str, Any]:
    """Train `cfg.workload` for `cfg.steps` optimizer steps with `cfg.knobs`; return the summary.

    Reports `{"event": "start"}`, then `{"event": "telemetry", ...}` at each of the first
    `metrics.throughput_warmup_steps(steps)` steps and every `telemetry_every` steps after,
    then `{"event": "summary", ...}` (also the return value). A diverged run is a result
    (`status: diverged`), not an exception; an out-of-memory is `status: oom`.
    Exceptions from the workload propagate.

    Runs in this process, as one `rank` of a DDP probe if given. A config that needs several
    processes (`world_size > 1`, `oom_retry`, `measure_scaling`) is refused without a rank:
    `autotune.process.entry.run` runs those.
    """
    import torch

    from autotune.probe.workload import resolve

    if rank is None and needs_processes(cfg):
        raise ValueError(
            "run_probe runs one process: a probe with world_size > 1, oom_retry or "
            "measure_scaling is run by autotune.process.entry.run"
        )
    emit: Report = report or (lambda _msg: None)
    world = rank.world_size if rank is not None else 1
    t_start = time.perf_counter()
    determinism = set_deterministic() if cfg.deterministic else {}
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    device = pick_device(cfg.device)
    workload = resolve(cfg.workload, cfg.size)
    k = resolve_knobs(cfg.knobs, workload.default_lr, cfg.micro_batch)
    accum = int(k["accum_steps"])
    fp16 = cfg.precision == "fp16"
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.precision)

    # Same seed, same init and same data order in every trial: the knobs are the only difference.
    seed_everything(cfg.seed)
    model = workload.build_model().to(device)
    model.train()
    # The initial loss of every loss metric and of the explosion test: the untrained model on the
    # held-out set (the same samples in the same chunks whatever the seed and the micro-batch),
    # the run left as it was (buffers, RNGs).
    ref = _reference(model, workload, cfg, device, amp_dtype, rank)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    if rank is not None:
        model = rank.wrap(model, k)  # DistributedDataParallel with the DDP knobs
    optimizer = build_optimizer(params, k, device)
    scaler = build_scaler(k, device, enabled=fp16)
    clip, per_layer = float(k["clip_norm"]), k["clip_mode"] == "per_layer"
    data: Iterator[tuple[torch.Tensor, ...]] = (
        workload.batches(cfg.micro_batch, cfg.seed)
        if rank is None
        else rank.batches(workload, cfg.micro_batch, cfg.seed)  # this rank's shard
    )
    one = torch.ones((), device=device)
    # Loss explosion is judged against the reference, measured before any update: a run that
    # blows up within its first few steps must not inflate its own reference.
    # A clipped run's step is bounded whatever its gradient norm: its loss judges it.
    monitor = divergence.DivergenceMonitor(
        cfg.precision,
        initial_loss=ref.loss,
        thresholds=thresholds(cfg.divergence),
        clipping=float(k["clip_norm"]) > 0,
    )
    stop_early = divergence.stop_mode(cfg.divergence.get("stop_early", True))
    # Most divergent runs blow up within their first steps: the telemetry is fetched (and the
    # monitor fed) at every step while the throughput metric still ignores the step times, then
    # every `telemetry_every` steps. A run that diverges at step 3 stops at step 3, not 10.
    check_each_step_until = metrics.throughput_warmup_steps(cfg.steps)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ident = checkpoint.identity(cfg, k, device, schedule_length(cfg), model)
    start = _continuation(cfg, rank, ident, (model, optimizer, scaler, data, accum))
    series: dict[str, list[np.ndarray]] = {}
    # as the shorter probe ran them: what a probe that fails on its first own step reports
    samples_per_step, tokens_per_step = start.per_step
    if start.step:  # the steps a shorter probe ran: recorded, and seen by the monitor again
        s = start.series
        monitor.update(s["loss"], s["grad_norm"], s["scale"], s["skipped"])
        series = {name: [arr] for name, arr in s.items()}

    emit(_start_event(cfg, device, workload, k, world, start.step))
    chunk = Chunk()
    cause: str | None = None
    diverged_at: int | None = None
    found: dict[str, Any] | None = None
    status = "ok"
    step = 0
    try:
        for step in range(start.step, cfg.steps):
            lr = _lr(step, k, schedule_length(cfg))
            for group in optimizer.param_groups:
                group["lr"] = lr
            timer = start_timer(device)

            batches = [to_device(next(data), device) for _ in range(accum)]
            loss_sum, samples, tokens = forward_backward(
                model, workload, batches, scaler, amp_dtype
            )
            # Clip on the unscaled gradients (unscale_ divides them by the current scale).
            scaler.unscale_(optimizer)
            try:
                grad_norm, layer_norms, clipped = clip_gradients(params, clip, per_layer)
            except NoGradient:  # a loss on no parameter: NaN is a divergence, else a bug
                if not bool(torch.isfinite(loss_sum).all()):
                    raise NonFiniteLoss(loss_sum) from None
                raise
            scale = scaler._scale.detach().clone() if fp16 and scaler._scale is not None else one
            scaler.step(optimizer)  # skipped by the scaler when the gradients hold inf/NaN
            scaler.update()
            optimizer.zero_grad(set_to_none=True)

            chunk.step_time.append(stop_timer(device, timer))
            chunk.add(loss_sum, grad_norm, layer_norms, clipped, scale, lr)
            samples_per_step, tokens_per_step = samples * world, tokens * world

            # Chunks end at the same steps whether the probe started at 0 or continued.
            if (
                step < check_each_step_until
                or (step + 1 - check_each_step_until) % cfg.telemetry_every == 0
                or step == cfg.steps - 1
            ):
                first = step + 1 - len(chunk)
                hit = flush(chunk, first, rank, monitor, fp16, series, emit)
                if hit is not None and cause is None:
                    cause, diverged_at = hit[0], first + hit[1]
                g = monitor.grad_event_step  # the first gradient spike: where the layers are
                if found is None and g is not None and first <= g < first + len(chunk):
                    found = anomaly(named, chunk.layer_norms[g - first], g)
                chunk = Chunk()
                if monitor.should_stop(stop_early):
                    break
    except torch.OutOfMemoryError as e:
        status, cause = "oom", "oom"
        emit({"event": "oom", "step": step, "message": str(e).splitlines()[0]})
    except NonFiniteLoss as e:
        # A NaN/inf loss detached from the graph: no gradient to clip or step with. The step
        # is recorded as it was (its loss, no gradient norm) and judged like any other; not
        # averaged over DDP ranks, whose peers may be waiting in their backward.
        nan, no = torch.full((), math.nan, device=device), torch.zeros((), dtype=torch.bool)
        chunk.add(e.loss, nan, torch.zeros(0), no.to(device), one, lr)
        chunk.step_time.append(stop_timer(device, timer))
        first = step + 1 - len(chunk)
        hit = flush(chunk, first, None, monitor, fp16, series, emit)
        if hit is not None and cause is None:
            cause, diverged_at = hit[0], first + hit[1]
    if cause is not None and status != "oom":
        status = "diverged"

    data_series = {name: np.concatenate(parts) for name, parts in series.items()}
    steps_run = len(data_series.get("loss", ()))
    saved = None
    # a diverged run that ran on (the baseline) is continued too: it is the yardstick above
    if cfg.save_state and status in ("ok", "diverged") and steps_run == cfg.steps:
        path = checkpoint.rank_path(cfg.save_state, _rank_index(rank))
        per_step = (samples_per_step, tokens_per_step)
        run = (model, optimizer, scaler, data_series, per_step)
        saved = _save(path, ident, cfg.steps, *run, copies=world)
    result = {
        "event": "summary",
        "status": status,
        "diverged": status == "diverged",
        "divergence_cause": cause if status == "diverged" else None,
        "diverged_at_step": diverged_at,
        **monitor.record(),
        "metrics": summary_metrics(
            cfg,
            _own_timing(data_series, start.step),
            samples_per_step,
            tokens_per_step,
            device,
            ref.loss,
        ),
        "initial_reference": ref.record(),
        "anomaly": found,
        "series": {name: arr.tolist() for name, arr in data_series.items()},
        "knobs": k,
        **_run_facts(cfg, workload, device, accum, world, steps_run),
        "samples_per_step": samples_per_step,
        "tokens_per_step": tokens_per_step,
        "samples_seen": samples_per_step * steps_run,
        "tokens_seen": tokens_per_step * steps_run,
        # Continuation: the steps inherited from a shorter probe, and what this process ran.
        "resumed_from_step": start.step,
        "samples_run": samples_per_step * (steps_run - start.step),
        "continuation": start.record(cfg.resume_from),
        "state_saved": saved,
        "determinism": determinism,
        "wall_s": time.perf_counter() - t_start,
    }
    if rank is not None:
        result = rank.finish(result, model, workload)  # evaluation, world size, env read back
    emit(result)
    return result


def needs_processes(cfg: ProbeConfig) -> bool:
    """Whether `cfg` runs as processes started for it (DDP ranks, an OOM retry, a timing of
    one process), which `autotune.process` does, rather than in the calling one."""
    return cfg.world_size > 1 or cfg.oom_retry or cfg.measure_scaling


def schedule_length(cfg: ProbeConfig) -> int:
    """The `total` of the LR schedule: the target's length in a study (the probe is its first
    `steps`), the probe's own steps otherwise."""
    return cfg.steps if cfg.schedule_steps is None else cfg.schedule_steps


def _lr(step: int, k: dict[str, Any], total: int) -> float:
    return lr_at(
        step,
        peak=float(k["lr"]),
        warmup=int(k["warmup_steps"]),
        schedule=str(k["schedule"]),
        total=total,
        min_ratio=float(k["min_lr_ratio"]),
    )


def _reference(
    model: torch.nn.Module,
    workload: Any,
    cfg: ProbeConfig,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    rank: Rank | None,
) -> reference.Reference:
    """The held-out reference (`autotune.probe.reference`), read in the study's chunks
    (`cfg.reference_chunk`), not the trial's micro-batch; the ranks of a DDP probe (each reads
    the same held-out set in the same chunks) take their mean, so that each judges its steps
    against the same number (a rank without one, all of them step 0's)."""
    chunk, samples = cfg.reference_chunk, cfg.reference_total
    ref = reference.held_out(model, workload, chunk, device, amp_dtype, samples)
    if rank is None or rank.world_size == 1:
        return ref
    mean = float(rank.mean(np.array([math.nan if ref.loss is None else ref.loss]))[0])
    if not math.isfinite(mean):
        why = ref.why or "another rank's is not"
        return reference.Reference(None, "step0", ref.batches, why, ref.samples, chunk)
    return reference.Reference(mean, "held_out", ref.batches, None, ref.samples, chunk)


def _continuation(
    cfg: ProbeConfig, rank: Rank | None, ident: str, run: tuple[Any, ...]
) -> checkpoint.Continuation:
    """Where the probe starts: from the state at `cfg.resume_from` when it may continue it
    (`autotune.probe.checkpoint`), else from step 0 (with the reason, when it was asked to)."""
    if cfg.resume_from is None:
        return checkpoint.Continuation()
    path = checkpoint.rank_path(cfg.resume_from, _rank_index(rank))
    state = checkpoint.unsupported(cfg) or checkpoint.load(path, ident, cfg.steps)
    if rank is not None and rank.world_size > 1:  # every rank continues, or none does
        everyone = rank.mean(np.array([0.0 if isinstance(state, str) else 1.0]))[0] == 1.0
        if not everyone and not isinstance(state, str):
            state = "another rank's state is missing or unusable"
    if isinstance(state, str):
        return checkpoint.Continuation(why=state)
    return checkpoint.restore(state, *run)


def _rank_index(rank: Rank | None) -> int | None:
    """The rank whose state file this process reads and writes (None: one process)."""
    return rank.rank if rank is not None and rank.world_size > 1 else None


def _own_timing(data_series: dict[str, np.ndarray], resumed: int) -> dict[str, np.ndarray]:
    """The series the summary metrics read: a continued probe's throughput is this process's
    own (the inherited step times ran in another process, under other load), after a warm-up
    of its own steps, as a probe from step 0 leaves out its first ones."""
    times = data_series.get("step_time")
    if not resumed or times is None:
        return data_series
    own = times.copy()
    own[: resumed + metrics.throughput_warmup_steps(len(times) - resumed)] = math.nan
    return {**data_series, "step_time": own}


def _save(path: str, ident: str, steps: int, *run: Any, copies: int) -> dict[str, Any]:
    """Write the state for a longer probe to continue (room checked for `copies`: one per
    rank); a failure costs that probe a restart, not this one its result."""
    model, optimizer, scaler, series, per_step = run
    try:
        checkpoint.save(
            path, ident, steps, model, optimizer, scaler, series, per_step, copies=copies
        )
    except checkpoint.NoRoom as e:
        return {"path": path, "saved": False, "why": str(e)}
    except (OSError, RuntimeError) as e:
        return {"path": path, "saved": False, "why": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"path": path, "saved": True, "why": None}


def _start_event(
    cfg: ProbeConfig,
    device: torch.device,
    workload: Any,
    k: dict[str, Any],
    world: int,
    resumed: int = 0,
) -> dict[str, Any]:
    return {
        "event": "start",
        "device": str(device),
        "workload": workload.name,
        "size": workload.size,
        "knobs": k,
        "steps": cfg.steps,
        "resumed_from_step": resumed,
        "precision": cfg.precision,
        "effective_batch": cfg.micro_batch * int(k["accum_steps"]) * world,
    }


def summary_metrics(
    cfg: ProbeConfig,
    data_series: dict[str, np.ndarray],
    samples_per_step: int,
    tokens_per_step: int,
    device: torch.device,
    initial: float | None = None,
) -> dict[str, Any]:
    """The summary metrics of the recorded series (`initial`: the reference loss), and the peak
    memory (JSON: no NaN)."""
    summary = (
        metrics.summarize(
            data_series,
            samples_per_step=samples_per_step,
            tokens_per_step=tokens_per_step,
            precision=cfg.precision,
            reference=initial,
        )
        if data_series
        else {}
    )
    summary["peak_mem_mb"] = peak_memory_mb(device)
    return finite_or_none(summary)


def _run_facts(
    cfg: ProbeConfig, workload: Any, device: torch.device, accum: int, world: int, steps_run: int
) -> dict[str, Any]:
    """How the probe ran, as the summary records it."""
    return {
        "env": dict(cfg.env),
        "workload": workload.name,
        "size": workload.size,
        "device": str(device),
        "precision": cfg.precision,
        "seed": cfg.seed,
        "steps_planned": cfg.steps,
        "schedule_steps": schedule_length(cfg),
        "steps_run": steps_run,
        "micro_batch": cfg.micro_batch,
        "accum_steps": accum,
        "effective_batch": cfg.micro_batch * accum * world,
    }
