"""A user's training script as a probe: run in this process, measured through its reports.

`run_script(cfg, report)` (`autotune.probe.script_run`) runs `cfg.script` with `runpy` (as
`__main__`, its `args` as `sys.argv[1:]`, its folder as the working directory) while a
`ScriptSession` is current. The
script calls `autotune.trial()` (`autotune.recipe.trial`), which reads the session through
`current()`, and `trial.report(step, loss=..., grad_norm=...)` after each optimizer step. The
session does with those reports what `run_probe` does with its own steps: telemetry events in
chunks (`autotune.probe.telemetry.flush`), the same `DivergenceMonitor`, and at the end the same
`summary` event over the same series. Outside a study, a session is made without a report channel
(`standalone`), so the same script runs on its own with the same checks.

This module imports no recipe (the layer above): `autotune.recipe.trial` wraps the session.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from autotune.probe import divergence, metrics, reference, script_values, stopping, telemetry
from autotune.probe.config import ProbeConfig, Report
from autotune.probe.first_report import FirstReport
from autotune.probe.loop import schedule_length
from autotune.probe.script_counts import StepCounts
from autotune.probe.script_errors import BadReport, Diverged, ScriptFailure
from autotune.probe.script_lr import LrWatch
from autotune.probe.script_state import Parts, ScriptState, split_extra
from autotune.probe.steps import pick_device, resolve_knobs, seed_everything, set_deterministic
from autotune.probe.summary import (
    Continued,
    DivergenceRecord,
    ProbeStatus,
    ProbeSummary,
    ScriptRun,
    summary_metrics,
)
from autotune.probe.telemetry import Chunk, fetch_after, flush, thresholds

_CURRENT: ScriptSession | None = None  # set only while run_script runs


def current() -> ScriptSession | None:
    """The session of the script now running under `run_script`, if any."""
    return _CURRENT


def set_current(session: ScriptSession | None) -> None:
    """Make `session` the current one (`autotune.probe.script_run`, while its script runs)."""
    global _CURRENT
    _CURRENT = session


#: What can apply a trial's knobs in a script, as `mark_applied` records it: the recipe's
#: `optimizer`, its `scheduler` (or `lr_at`), its clipping (`clip`: `clip_and_step` or
#: `clip_policy`), the `hf` or `lightning` integration.
APPLIERS = ("optimizer", "scheduler", "clip", "hf", "lightning")


def mark_applied(what: str, optimizer: Any = None) -> None:
    """Record that the running script applied the trial's knobs through `what` (APPLIERS): an
    export says what the probe was from it (a script without the scheduler ran its own).
    `optimizer`: the one the recipe built, whose learning rate the `lr` series reads."""
    if _CURRENT is not None:
        _CURRENT.applied.add(what)
        _CURRENT.lr.watch(optimizer)


class ScriptSession:
    """The probe's side of one script run: its reports, their checks and its summary."""

    def __init__(
        self,
        cfg: ProbeConfig,
        report: Report | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        in_study: bool = True,
    ) -> None:
        self.cfg, self.in_study, self.clock = cfg, in_study, clock
        self.script_sha256 = file_sha256(cfg.script)
        self.applied: set[str] = set()  # mark_applied
        self.lr = LrWatch()  # the `lr` of a report without one (`autotune.probe.script_lr`)
        self.emit: Report = report or (lambda _msg: None)
        self.device = pick_device(cfg.device)
        self.reference = reference.STEP0
        self.measure_again: Callable[[], reference.Reference] | None = None  # the final loss
        self.monitor = self._monitor()
        self.stop_early = stopping.stop_mode(cfg.divergence.get("stop_early", True))
        self.check_each_step_until = metrics.throughput_warmup_steps(cfg.steps)
        self.series: dict[str, list[np.ndarray]] = {}
        self.extra: dict[str, list[float]] = {}
        self.chunk = Chunk()
        self.knobs: dict[str, Any] | None = None
        self.determinism: dict[str, Any] = {}
        self.reports = 0
        self.grad_reported = True  # set by the first report: a script reports grad_norm or not
        self.origin: int | None = None
        self.last: int | None = None
        self.cause: str | None = None
        self.diverged_at: int | None = None
        self.failure: BadReport | None = None
        self.status = ProbeStatus.OK
        self.counts = StepCounts()  # each step's samples and tokens
        self.t_start = clock()
        self.t_last = self.t_start
        self.summary: dict[str, Any] | None = None
        self.first_report_s: float | None = None  # seconds from the start to the first report
        self.first = FirstReport(cfg.first_report_rule)  # the first-report rule (`watch`)
        self.state = ScriptState(cfg, self.device, self.script_sha256)  # `resume`

    @property
    def trial_called(self) -> bool:
        return self.knobs is not None

    @property
    def stalled(self) -> ScriptFailure | None:
        """The failure of a script whose first report did not come in time (`watch`)."""
        why = self.first.stalled
        return None if why is None else ScriptFailure("no_reports", why)

    def watch(self, limit: float, on_stuck: Callable[[str], None] | None = None) -> None:
        """Stop the script (run in this, the main, thread) with a `no_reports` failure that
        names what it forgot, unless its first report comes within `limit` seconds."""
        self.first.watch(limit, threading.get_ident(), on_stuck)

    def begin(self, default_lr: float) -> dict[str, Any]:
        """The first `autotune.trial()`: seed, resolve the knobs, report the start."""
        if self.knobs is not None:
            return self.knobs
        if self.cfg.deterministic:
            self.determinism = set_deterministic()
        seed_everything(self.cfg.seed)
        self.knobs = resolve_knobs(self.cfg.knobs, default_lr, self.cfg.micro_batch)
        self.emit(
            {
                "event": "start",
                "device": str(self.device),
                "workload": self.cfg.workload,
                "size": self.cfg.size,
                "knobs": self.knobs,
                "steps": self.cfg.steps,
                "precision": self.cfg.precision,
                "effective_batch": self.cfg.micro_batch * int(self.knobs["accum_steps"]),
            }
        )
        self.t_last = self.clock()
        self.first.trial_at_s = self.t_last - self.t_start
        return self.knobs

    def _monitor(self) -> divergence.DivergenceMonitor:
        cfg = self.cfg
        return divergence.DivergenceMonitor(
            cfg.precision, initial_loss=self.reference.loss, thresholds=thresholds(cfg.divergence)
        )

    def set_reference(
        self, model: Any, held_out: Any = None, loss: Any = None, evaluate: Any = None
    ) -> float | None:
        """The script's initial-loss reference (`trial.reference`), before its first report:
        the untrained `model` on `held_out` (read in the study's chunks), or `evaluate()`.
        Returns it (None: step 0's loss stays the reference, and the summary says why)."""
        import torch

        own_reports = self.reports - self.state.start.step  # a continued probe's inherited too
        if own_reports or self.knobs is None:
            when = "after its first report" if own_reports else "before autotune.trial()"
            self.failure = BadReport(
                f"trial.reference() {when}: call it once the model is built, before training"
            )
            raise self.failure
        reference.check_given(model, held_out, loss, evaluate)
        amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.cfg.precision)
        args = (self.cfg.reference_chunk, self.cfg.reference_total, self.device, amp)
        saved = self.state.saved_reference
        if self.state.start.step and saved is not None:
            # after `resume` the model holds trained weights: the untrained model's reference
            # is the shorter probe's, as it measured it
            self.reference = reference.Reference(**saved)
        else:
            self.reference = reference.given(model, held_out, loss, evaluate, *args)
        if self.reference.loss is not None:  # the same measure of the trained model, at the end
            self.measure_again = lambda: reference.given(model, held_out, loss, evaluate, *args)
        if self.reference.why:
            print(f"autotune: trial.reference(): {self.reference.why}; step 0's loss is used")
        self.monitor = self._monitor()
        self._replay_inherited()
        return self.reference.loss

    def resume(self, parts: Parts) -> int:
        """The script's state hook (`trial.resume`), before its first report: what to save for
        a longer probe, and the state of a shorter one continued. Returns the optimizer steps
        already run (0: from the start)."""
        if self.knobs is None or self.reports or self.state.parts is not None:
            when = (
                "before autotune.trial()"
                if self.knobs is None
                else "twice"
                if self.state.parts is not None
                else "after its first report"
            )
            self.failure = BadReport(
                f"trial.resume() {when}: call it once, when the model, optimizer, scheduler and "
                "data are built, before training"
            )
            raise self.failure
        self.lr.watch(parts.optimizer)  # what it trains with: its learning rate is read
        start = self.state.hook(parts, self.knobs, schedule_length(self.cfg))
        if start.step:  # the steps a shorter probe ran: recorded, and seen by the monitor again
            s, self.extra = split_extra(start.series)
            grads = s["grad_norm"]
            self.grad_reported = bool(np.isfinite(grads).any()) if len(grads) else True
            self.series = {name: [arr] for name, arr in s.items()}
            self.reports = start.step
            self.counts.inherit(start.step, start.per_step, start.seen)
            self.origin = self.state.origin
            self.last = self.origin + start.step - 1
            self._replay_inherited()
        return start.step

    def _replay_inherited(self) -> None:
        """Feed the divergence monitor the steps a continued probe inherited (again when the
        script gives its reference after `resume`: the monitor is made anew then)."""
        if not self.state.start.step:
            return
        s = {name: np.concatenate(parts) for name, parts in self.series.items()}
        grads = s["grad_norm"] if self.grad_reported else None
        hit = self.monitor.update(s["loss"], grads, s["scale"], s["skipped"])
        # the shorter probe diverged and ran on (a baseline): so does this one
        self.cause, self.diverged_at = hit if hit is not None else (None, None)

    # ----- reports -----
    def report(
        self,
        step: Any,
        loss: Any,
        grad_norm: Any = None,
        *,
        lr: float | None = None,
        scale: Any = None,
        clipped: Any = None,
        samples: int | None = None,
        tokens: int | None = None,
        **extra: Any,
    ) -> None:
        """One optimizer step's values; raises `Diverged` once a divergence is found."""
        now = self.clock()
        if self.stalled is not None:  # the time for the first report ran out
            raise self.stalled
        if self.failure is not None:
            raise self.failure
        if self.should_stop:
            raise Diverged(self.cause or "diverged", self.diverged_at or 0)
        if self.first_report_s is None and not self.state.start.step:
            self.grad_reported = grad_norm is not None
        try:
            step = self._check(step, loss)
            values = [self._scalar(v, n) for v, n in ((loss, "loss"), (grad_norm, "grad_norm"))]
            more = script_values.metrics(extra)
            samples = script_values.count(samples, "samples")
            tokens = script_values.count(tokens, "tokens")
        except BadReport as e:
            self.failure = script_values.at_step(e, step)
            raise self.failure from None
        import torch

        k = self.knobs or {}
        one = torch.ones((), device=self.device)
        self.chunk.add(
            values[0],
            values[1],
            torch.zeros(0),
            self._clipped(clipped, values[1], one),
            self._scalar(scale, "scale") if scale is not None else one,
            float(lr) if lr is not None else self.lr.value(),
        )
        self.chunk.step_time.append(now - self.t_last)
        self.t_last = now
        for name, v in more.items():
            self.extra.setdefault(name, []).append(v)
        accum = int(k.get("accum_steps", 1))
        self.counts.add(samples, tokens, self.cfg.micro_batch * accum)
        self.reports += 1
        if self.first_report_s is None:  # this process's first (a continued probe's too)
            self.first_report_s = now - self.t_start
            self.first.reported.set()
        index = self.reports - 1
        if index == self.cfg.steps - 1:
            self.state.at_last_report()
        cfg = self.cfg
        if fetch_after(index, cfg.steps, cfg.telemetry_every, self.check_each_step_until) or (
            # a non-finite loss stops the run at once (known without a sync: on the host)
            self.stop_early is not False and script_values.nonfinite_now(loss)
        ):
            self._flush()
        if self.should_stop:
            raise Diverged(self.cause or "diverged", self.diverged_at or 0)

    @property
    def should_stop(self) -> bool:
        return self.cause is not None and self.monitor.should_stop(self.stop_early)

    def _check(self, given: Any, loss: Any) -> int:
        """The step a report names, as an int, once it is the one expected (BadReport else)."""
        if self.knobs is None:
            raise BadReport("trial.report() before autotune.trial(): call autotune.trial() first")
        step = script_values.step_number(given)
        if self.last is None:
            if step not in (0, 1):
                raise BadReport(f"trial.report(step={step}): the first step must be 0 (or 1)")
            self.origin = self.state.origin = step
        elif step != self.last + 1:
            raise BadReport(
                f"trial.report(step={step}) after step {self.last}: report once per optimizer "
                "step, steps 0, 1, 2, ..."
            )
        if self.reports >= self.cfg.steps:
            raise BadReport(
                f"trial.report(step={step}): the script ran past trial.steps={self.cfg.steps}: "
                "loop over range(trial.steps)"
            )
        self.last = step
        if loss is None:
            raise BadReport(f"trial.report(step={step}): loss is missing (loss=...)")
        return step

    def _clipped(self, clipped: Any, grad_norm: Any, one: Any) -> Any:
        """Whether clipping fired: as reported (`Trial.report` passes what `Recipe.clip_and_step`
        did), else (global clipping) whether the gradient norm before clipping exceeded
        clip_norm, as `Recipe.clip_and_step` clips; a tensor, no sync. Without clipping (policy
        none, a norm of 0) 0; per-layer clipping and the adaptive policies cannot be told from
        the total norm: NaN (not known) unless reported."""
        if clipped is not None:
            return self._scalar(float(clipped) if isinstance(clipped, bool) else clipped, "clipped")
        k = self.knobs or {}
        clip = float(k.get("clip_norm") or 0.0)
        policy = k.get("clip_policy") or "norm"
        if policy == "none" or (policy == "norm" and clip <= 0):
            return one * 0
        if policy == "norm" and k.get("clip_mode", "global") == "global":
            return (grad_norm > clip).to(one.dtype)  # NaN (no grad_norm reported) compares False
        return one * float("nan")

    def _scalar(self, v: Any, name: str) -> Any:
        """A 0-d float tensor on the trial's device (`script_values.scalar`)."""
        return script_values.scalar(v, name, self.device)

    def _flush(self) -> None:
        if not len(self.chunk):
            return
        first = self.reports - len(self.chunk)
        fp16 = self.cfg.precision == "fp16"
        if self.grad_reported:
            hit = flush(self.chunk, first, None, self.monitor, fp16, self.series, self.emit)
        else:  # no gradient norm reported: the checks of the loss (and the scale) only
            host = telemetry.with_skipped(self.chunk.fetch(), fp16)
            hit = self.monitor.update(host["loss"], None, host["scale"], host["skipped"])
            telemetry.append_chunk(self.series, host, fp16)
            self.emit(
                {
                    "event": "telemetry",
                    "first_step": first,
                    **{name: arr.tolist() for name, arr in host.items()},
                }
            )
        self.chunk = Chunk()
        if hit is not None and self.cause is None:
            self.cause, self.diverged_at = hit[0], first + hit[1]
        bad = script_values.negative_grad_norm(
            self.series["grad_norm"][-1], first, self.origin or 0
        )
        if bad is not None and self.failure is None:
            self.failure = bad
            raise bad

    # ----- the end -----
    def ended_early(self) -> bool:
        """Whether the script ended before its planned steps unasked: no divergence found
        (its last chunk judged first), no out-of-memory. A continued probe's inherited steps
        count: a probe is judged at the length it was asked for, never a shorter one."""
        self._flush()
        stopped = self.status is ProbeStatus.OOM or self.cause is not None
        return not stopped and self.reports < self.cfg.steps

    def oom(self, e: BaseException) -> None:
        self.status = ProbeStatus.OOM
        self.emit({"event": "oom", "step": self.reports, "message": str(e).splitlines()[0]})

    def _final_reference(self, status: ProbeStatus) -> reference.Reference:
        """The script's reference measured again on the trained model (`trial.reference`): the
        final loss. None when the script gave none or the run ran out of memory."""
        if self.measure_again is None or status is ProbeStatus.OOM or not self.reports:
            why = "out of memory" if status is ProbeStatus.OOM else "no trial.reference() loss"
            return reference.Reference(None, "train", why=why)
        final = self.measure_again()
        if final.loss is None:
            return reference.Reference(None, "train", why=final.why)
        return final

    def finish(self) -> dict[str, Any]:
        """The summary (emitted once): a `ProbeSummary`, as `run_probe`'s."""
        if self.summary is not None:
            return self.summary
        self._flush()
        ended = self.reports == self.cfg.steps == schedule_length(self.cfg)
        final = None  # measured first at the end: the held-out loss may undo a verdict
        if self.status is not ProbeStatus.OOM and ended:  # the length the user trains
            found = None if self.cause is None else (self.cause, self.diverged_at or 0)
            final = got = self._final_reference(ProbeStatus.OK)
            end = stopping.judge_end(self.monitor, found, self.stop_early, lambda: got.loss)
            self.cause, self.diverged_at = end if end is not None else (None, None)
        status = ProbeStatus.of(self.status is ProbeStatus.OOM, self.cause)
        diverged = status is ProbeStatus.DIVERGED
        data = {name: np.concatenate(parts) for name, parts in self.series.items()}
        series = {name: arr.tolist() for name, arr in data.items()}
        series.update({f"metric.{n}": vals for n, vals in self.extra.items()})
        k = self.knobs or {}
        accum = int(k.get("accum_steps", 1))
        cfg = self.cfg
        steps_run = len(data.get("loss", ()))
        counts = self.counts
        (samples, tokens), seen = counts.per_step, counts.seen
        saved = (
            None
            if status is ProbeStatus.OOM
            else self.state.save(
                data, self.extra, (samples, tokens), steps_run, self.reference.record(), seen
            )
        )
        resumed = self.state.start.step
        final = final if final is not None else self._final_reference(status)
        self.summary = ProbeSummary(
            status=status,
            divergence_cause=self.cause if diverged else None,
            diverged_at_step=self.diverged_at if diverged else None,
            divergence=DivergenceRecord.from_dict(self.monitor.record()),
            metrics=summary_metrics(
                cfg,
                metrics.own_timing(data, resumed),
                *counts.rate_per_step,  # each step's own counts: their mean
                self.device,
                self.reference.loss,
                final.loss,
            ),
            initial_reference=self.reference.record(),
            final_reference=final.record(),
            anomaly=None,
            series=series,
            knobs=k,
            env=dict(cfg.env),
            workload=cfg.workload,
            size=cfg.size,
            # its first report's time: the study's rule for the later trials (study.failures)
            script=ScriptRun(
                cfg.script,
                list(cfg.args),
                self.script_sha256,
                sorted(self.applied),
                self.first_report_s,
            ),
            device=str(self.device),
            precision=cfg.precision,
            seed=cfg.seed,
            steps_planned=cfg.steps,
            schedule_steps=schedule_length(cfg),
            steps_run=steps_run,
            micro_batch=cfg.micro_batch,
            accum_steps=accum,
            effective_batch=cfg.micro_batch * accum,
            samples_per_step=samples,
            tokens_per_step=tokens,
            samples_seen=seen[0],
            tokens_seen=seen[1],
            continued=Continued(
                resumed_from_step=resumed,
                samples_run=counts.own_seen,
                continuation=self.state.record(),
                state_saved=saved,
            ),
            determinism=self.determinism,
            wall_s=self.clock() - self.t_start,
        ).to_dict()
        self.emit(self.summary)
        return self.summary


def file_sha256(path: str | None) -> str | None:
    """The SHA-256 of the file at `path` (hex), or None when there is none to read."""
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
