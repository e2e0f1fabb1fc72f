"""The training probe: a short, instrumented training run that applies every knob honestly.

One readable loop (`run_probe`: set up, train, summarise) in the manner of nanoGPT's train.py;
the pieces of a step are in `autotune.probe.steps`, the telemetry in `autotune.probe.telemetry`,
the summary's type in `autotune.probe.summary`. It reports through one callable,
`report(dict)`, so the same code runs in a unit test, in a trial process under Ray, and in
`autotune verify`. It imports neither Ray, Optuna nor MLflow, and runs in the process it is
called in: the probe process's entry (`autotune.process.entry`) is what runs a DDP probe (or one
with `oom_retry` or `measure_scaling`) as several processes, each back in here as one rank.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.probe import checkpoint, divergence, metrics, reference, stopping
from autotune.probe.config import ProbeConfig, Rank, Report
from autotune.probe.oom import is_oom
from autotune.probe.steps import (
    NoGradient,
    NonFiniteLoss,
    apply_clipping,
    build_optimizer,
    build_scaler,
    clip_policy,
    clips,
    forward_backward,
    lr_at,
    pick_device,
    resolve_knobs,
    seed_everything,
    set_deterministic,
    start_timer,
    stop_timer,
    to_device,
)
from autotune.probe.summary import (
    Continued,
    DivergenceRecord,
    ProbeStatus,
    ProbeSummary,
    summary_metrics,
)
from autotune.probe.telemetry import Chunk, anomaly, fetch_after, flush, thresholds

if TYPE_CHECKING:
    import torch


def run_probe(
    cfg: ProbeConfig, report: Report | None = None, rank: Rank | None = None
) -> dict[str, Any]:
    """Train `cfg.workload` for `cfg.steps` optimizer steps with `cfg.knobs`; return the summary.

    Reports `{"event": "start"}`, then `{"event": "telemetry", ...}` at each of the first
    `metrics.throughput_warmup_steps(steps)` steps and every `telemetry_every` steps after,
    then `{"event": "summary", ...}` (a `ProbeSummary`'s dict, also the return value). A
    diverged run is a result (`status: diverged`), not an exception; an out-of-memory is
    `status: oom`. Exceptions from the workload propagate.

    Runs in this process, as one `rank` of a DDP probe if given. A config that needs several
    processes (`world_size > 1`, `oom_retry`, `measure_scaling`) is refused without a rank:
    `autotune.process.entry.run` runs those.
    """
    if rank is None and needs_processes(cfg):
        raise ValueError(
            "run_probe runs one process: a probe with world_size > 1, oom_retry or "
            "measure_scaling is run by autotune.process.entry.run"
        )
    emit: Report = report or (lambda _msg: None)
    t_start = time.perf_counter()
    run = _prepare(cfg, rank)
    emit(_start_event(cfg, run.device, run.workload, run.k, run.world, run.start.step))
    progress = _Progress(per_step=run.start.per_step)
    _train(run, progress, emit)
    result = _summary(run, progress, t_start).to_dict()
    if rank is not None:
        result = rank.finish(result, run.model, run.workload)  # evaluation, world size, env
    emit(result)
    return result


@dataclass
class _Run:
    """What a probe trains with, set up by `_prepare`: the model, its optimizer and data, the
    divergence monitor, and where it starts (step 0, or a shorter probe's state)."""

    cfg: ProbeConfig
    rank: Rank | None
    device: torch.device
    workload: Any
    k: dict[str, Any]  # the knobs, resolved
    amp_dtype: torch.dtype | None
    ref: reference.Reference
    model: torch.nn.Module
    named: list[tuple[str, torch.nn.Parameter]]  # the trained parameters, by name
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scaler: Any
    data: Iterator[tuple[torch.Tensor, ...]]
    one: torch.Tensor
    monitor: divergence.DivergenceMonitor
    stop_early: bool | str
    ident: str  # the state's identity (`checkpoint.identity`)
    start: checkpoint.Continuation
    series: dict[str, list[np.ndarray]]  # the recorded steps, chunk by chunk
    determinism: dict[str, Any]
    clipper: Any  # the clipping policy (`autotune.probe.clipping`), its state this run's

    @property
    def world(self) -> int:
        return self.rank.world_size if self.rank is not None else 1

    @property
    def accum(self) -> int:
        return int(self.k["accum_steps"])

    @property
    def fp16(self) -> bool:
        return self.cfg.precision == "fp16"


@dataclass
class _Progress:
    """What the steps change: the step, its LR and timer, the chunk not fetched yet, the first
    divergence (cause, step) and gradient spike's layers, an OOM, the batch per step."""

    per_step: tuple[int, int]  # samples and tokens per optimizer step (all ranks)
    step: int = 0
    lr: float = 0.0
    timer: Any = None
    chunk: Chunk = field(default_factory=Chunk)
    cause: str | None = None
    diverged_at: int | None = None
    found: dict[str, Any] | None = None
    oom: bool = False


def _prepare(cfg: ProbeConfig, rank: Rank | None) -> _Run:
    """Seed, build the model, its reference loss, optimizer, scaler and data, and continue a
    shorter probe's state when asked to: what `_train` needs."""
    import torch

    from autotune.probe.workload import resolve

    determinism = set_deterministic() if cfg.deterministic else {}
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    device = pick_device(cfg.device)
    workload = resolve(cfg.workload, cfg.size)
    k = resolve_knobs(cfg.knobs, workload.default_lr, cfg.micro_batch)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.precision)

    # Same seed, same init and same data order in every trial: the knobs are the only difference.
    seed_everything(cfg.seed)
    model = workload.build_model().to(device)
    model.train()
    # The initial loss of every loss metric and of the explosion test: the untrained model on the
    # held-out set (the same samples in the same chunks whatever the seed and the micro-batch),
    # the run left as it was (buffers, RNGs).
    ref = reference.of_probe(model, workload, cfg, device, amp_dtype, rank)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    if not params:
        raise ValueError(
            f"workload {cfg.workload}: build_model() returned a model with no trainable "
            "parameters: there is nothing for the optimizer to train"
        )
    if rank is not None:
        model = rank.wrap(model, k)  # DistributedDataParallel with the DDP knobs
    optimizer = build_optimizer(params, k, device)
    scaler = build_scaler(k, device, enabled=cfg.precision == "fp16")
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
        clipping=clips(k),
    )
    stop_early = stopping.stop_mode(cfg.divergence.get("stop_early", True))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ident = checkpoint.identity(cfg, k, device, schedule_length(cfg), model)
    run = (model, optimizer, scaler, data, int(k["accum_steps"]))
    start = _continuation(cfg, rank, ident, run)
    series: dict[str, list[np.ndarray]] = {}
    clipper = clip_policy(k)
    if start.step:  # the steps a shorter probe ran: recorded, and seen by the monitor again
        s = start.series
        monitor.update(s["loss"], s["grad_norm"], s["scale"], s["skipped"])
        series = {name: [arr] for name, arr in s.items()}
        clipper.replay(s["grad_norm"].tolist())  # zclip's EMAs, autoclip's history
    return _Run(
        cfg=cfg, rank=rank, device=device, workload=workload, k=k, amp_dtype=amp_dtype, ref=ref,
        model=model, named=named, params=params, optimizer=optimizer, scaler=scaler, data=data,
        one=one, monitor=monitor, stop_early=stop_early, ident=ident, start=start, series=series,
        determinism=determinism, clipper=clipper,
    )  # fmt: skip


def _train(run: _Run, p: _Progress, emit: Report) -> None:
    """Run the optimizer steps from `run.start.step` on, fetching the telemetry in chunks and
    stopping at a divergence (as `divergence.stop_early` says); an OOM or a NaN loss without a
    graph ends the steps, with what they ran recorded."""
    import torch

    cfg = run.cfg
    # Most divergent runs blow up within their first steps: the telemetry is fetched (and the
    # monitor fed) at every step while the throughput metric still ignores the step times, then
    # every `telemetry_every` steps. A run that diverges at step 3 stops at step 3, not 10.
    check_each_step_until = metrics.throughput_warmup_steps(cfg.steps)
    try:
        for step in range(run.start.step, cfg.steps):
            p.step = step
            _step(run, p)
            if fetch_after(step, cfg.steps, cfg.telemetry_every, check_each_step_until):
                first = _flush(run, p, emit, run.rank)
                g = run.monitor.grad_event_step  # the first gradient spike: where the layers are
                if p.found is None and g is not None and first <= g < first + len(p.chunk):
                    p.found = anomaly(run.named, p.chunk.layer_norms[g - first], g)
                p.chunk = Chunk()
                if run.monitor.should_stop(run.stop_early):
                    break
    except NonFiniteLoss as e:
        # A NaN/inf loss detached from the graph: no gradient to clip or step with. The step
        # is recorded as it was (its loss, no gradient norm) and judged like any other; not
        # averaged over DDP ranks, whose peers may be waiting in their backward.
        nan, no = torch.full((), math.nan, device=run.device), torch.zeros((), dtype=torch.bool)
        p.chunk.add(e.loss, nan, torch.zeros(0), no.to(run.device), run.one, p.lr)
        p.chunk.step_time.append(stop_timer(run.device, p.timer))
        _flush(run, p, emit, None)
    except Exception as e:  # after NonFiniteLoss: anything else but an OOM goes on up
        if not is_oom(e):  # a CUDA/ROCm OOM, or the CPU allocator's (autotune.probe.oom)
            raise
        p.oom, p.cause = True, "oom"
        emit({"event": "oom", "step": p.step, "message": str(e).splitlines()[0]})


def _step(run: _Run, p: _Progress) -> None:
    """One optimizer step (its micro-batches accumulated, the gradients clipped), its values
    left on the device in the chunk."""
    import torch

    k = run.k
    p.lr = _lr(p.step, k, schedule_length(run.cfg))
    for group in run.optimizer.param_groups:
        group["lr"] = p.lr
    p.timer = start_timer(run.device)

    try:
        batches = [to_device(next(run.data), run.device) for _ in range(run.accum)]
    except StopIteration:  # a bare StopIteration says nothing of whose it was
        raise RuntimeError(
            f"workload {run.cfg.workload}: batches() ran out at step {p.step}: it must yield "
            "micro-batches for as long as the probe asks (cycle over the data)"
        ) from None
    loss_sum, samples, tokens = forward_backward(
        run.model, run.workload, batches, run.scaler, run.amp_dtype
    )
    # Clip on the unscaled gradients (unscale_ divides them by the current scale).
    scaler = run.scaler
    scaler.unscale_(run.optimizer)
    try:
        grad_norm, layer_norms, clipped = apply_clipping(run.clipper, run.params)
    except NoGradient:  # a loss on no parameter: NaN is a divergence, else a bug
        if not bool(torch.isfinite(loss_sum).all()):
            raise NonFiniteLoss(loss_sum) from None
        raise
    scale = scaler._scale.detach().clone() if run.fp16 and scaler._scale is not None else run.one
    scaler.step(run.optimizer)  # skipped by the scaler when the gradients hold inf/NaN
    scaler.update()
    run.optimizer.zero_grad(set_to_none=True)

    p.chunk.step_time.append(stop_timer(run.device, p.timer))
    p.chunk.add(loss_sum, grad_norm, layer_norms, clipped, scale, p.lr)
    p.per_step = (samples * run.world, tokens * run.world)


def _flush(run: _Run, p: _Progress, emit: Report, rank: Rank | None) -> int:
    """Fetch, judge and report the chunk of steps up to `p.step` (the ranks' mean with a
    `rank`); note the first divergence. Returns the chunk's first step."""
    first = p.step + 1 - len(p.chunk)
    hit = flush(p.chunk, first, rank, run.monitor, run.fp16, run.series, emit)
    if hit is not None and p.cause is None:
        p.cause, p.diverged_at = hit[0], first + hit[1]
    return first


def _summary(run: _Run, p: _Progress, t_start: float) -> ProbeSummary:
    """The run's summary (with the state saved for a longer probe, when asked to)."""
    cfg, start = run.cfg, run.start
    data_series = {name: np.concatenate(parts) for name, parts in run.series.items()}
    steps_run = len(data_series.get("loss", ()))
    final: reference.Reference | None = None
    if not p.oom and steps_run == cfg.steps == schedule_length(cfg):  # the length trained

        def held_out() -> float | None:
            nonlocal final
            final = _final_reference(run, ProbeStatus.OK)
            return final.loss

        found = None if p.cause is None else (p.cause, p.diverged_at or 0)
        end = stopping.judge_end(run.monitor, found, run.stop_early, held_out)
        p.cause, p.diverged_at = end if end is not None else (None, None)
    status = ProbeStatus.of(p.oom, p.cause)
    samples_per_step, tokens_per_step = p.per_step
    saved = _save_for_longer(run, p, status, data_series, steps_run)
    own = metrics.own_timing(data_series, start.step)
    final = final if final is not None else _final_reference(run, status)
    return ProbeSummary(
        status=status,
        divergence_cause=p.cause if status is ProbeStatus.DIVERGED else None,
        diverged_at_step=p.diverged_at,
        divergence=DivergenceRecord.from_dict(run.monitor.record()),
        metrics=summary_metrics(
            cfg, own, samples_per_step, tokens_per_step, run.device, run.ref.loss, final.loss
        ),
        initial_reference=run.ref.record(),
        final_reference=final.record(),
        anomaly=p.found,
        series={name: arr.tolist() for name, arr in data_series.items()},
        knobs=run.k,
        env=dict(cfg.env),
        workload=run.workload.name,
        size=run.workload.size,
        device=str(run.device),
        precision=cfg.precision,
        seed=cfg.seed,
        steps_planned=cfg.steps,
        schedule_steps=schedule_length(cfg),
        steps_run=steps_run,
        micro_batch=cfg.micro_batch,
        accum_steps=run.accum,
        effective_batch=cfg.micro_batch * run.accum * run.world,
        samples_per_step=samples_per_step,
        tokens_per_step=tokens_per_step,
        samples_seen=samples_per_step * steps_run,
        tokens_seen=tokens_per_step * steps_run,
        # Continuation: the steps inherited from a shorter probe, and what this process ran.
        continued=Continued(
            resumed_from_step=start.step,
            samples_run=samples_per_step * (steps_run - start.step),
            continuation=start.record(cfg.resume_from),
            state_saved=saved,
        ),
        determinism=run.determinism,
        wall_s=time.perf_counter() - t_start,
    )


def _save_for_longer(
    run: _Run,
    p: _Progress,
    status: ProbeStatus,
    data_series: dict[str, np.ndarray],
    steps_run: int,
) -> dict[str, Any] | None:
    """Save the state for a longer probe to continue, when asked to and the run finished its
    steps; what became of it (None: not saved)."""
    cfg = run.cfg
    # a diverged run that ran on (the baseline) is continued too: it is the yardstick above
    if not cfg.save_state or status is ProbeStatus.OOM or steps_run != cfg.steps:
        return None
    path = checkpoint.rank_path(cfg.save_state, _rank_index(run.rank))
    state = (run.model, run.optimizer, run.scaler, data_series, p.per_step)
    return _save(path, run.ident, cfg.steps, *state, copies=run.world)


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


def _final_reference(run: _Run, status: ProbeStatus) -> reference.Reference:
    """The trained model's loss on the held-out set the initial loss was measured on, in the
    same chunks (the run left as it was: a longer probe continues from the same state): the
    final loss of a probe whose initial loss is held-out. A run whose initial loss is step 0's,
    or that ran out of memory, has none (its final loss is its last training losses')."""
    if run.ref.source != "held_out" or status is ProbeStatus.OOM:
        why = "no held-out initial loss" if status is not ProbeStatus.OOM else "out of memory"
        return reference.Reference(None, "train", why=why)
    model = getattr(run.model, "module", run.model)  # the module a DDP wrapper holds
    final = reference.of_probe(model, run.workload, run.cfg, run.device, run.amp_dtype, run.rank)
    if final.loss is None:
        return reference.Reference(None, "train", final.batches, final.why, final.samples)
    return final


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


def _save(path: str, ident: str, steps: int, *run: Any, copies: int) -> dict[str, Any]:
    """Write the state for a longer probe to continue (room checked for `copies`: one per
    rank); a failure costs that probe a restart, not this one its result."""
    model, optimizer, scaler, series, per_step = run
    return checkpoint.save(
        path, ident, steps, model, optimizer, scaler, series, per_step, copies=copies
    )


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
