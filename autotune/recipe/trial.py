"""`autotune.trial()`: what a training script asks of the trial it runs in.

In a study (the script run by `autotune.probe.script_run.run_script` in the trial's process) the
trial's knobs, steps, seed and device come from the space and the sampler. Outside one the script
runs standalone: with the recipe named by `AUTOTUNE_RECIPE` (an `autotune export` file), or with
PyTorch's defaults and the script's own `steps=`/`micro_batch=`/`lr=`. Either way the reports go
through the same checks: a divergence raises `Diverged` (or sets `trial.should_stop`).

Never name a module `autotune/trial.py`: `autotune.trial` is this function (exposed lazily by
`autotune/__init__.py`), and a submodule of that name would shadow it.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import RecipeError
from autotune.probe.config import ProbeConfig, steps_at_batch
from autotune.probe.loop import schedule_length
from autotune.probe.oom import is_oom
from autotune.probe.script import Diverged, ScriptSession, current
from autotune.probe.script_exit import summary_before_os_exit
from autotune.probe.script_values import short_run
from autotune.recipe import Recipe

if TYPE_CHECKING:
    import torch

RECIPE_ENV = "AUTOTUNE_RECIPE"  # a recipe file for a standalone run
SUMMARY_ENV = "AUTOTUNE_SUMMARY"  # standalone: write the summary (JSON) there at exit
DEFAULT_LR = 1e-3  # AdamW's

__all__ = ["DEFAULT_LR", "RECIPE_ENV", "SUMMARY_ENV", "Diverged", "Trial", "trial"]


@dataclass(frozen=True, eq=False)
class Trial:
    """The trial a script runs in: its knobs as a `Recipe`, and where to report."""

    recipe: Recipe
    steps: int
    schedule_steps: int  # the LR schedule's length: build the scheduler over it, stop at steps
    seed: int
    device: torch.device
    threads: int | None
    micro_batch: int
    precision: str
    in_study: bool
    _session: ScriptSession = field(repr=False)

    def report(
        self,
        step: int,
        loss: Any,
        grad_norm: Any = None,
        *,
        lr: float | None = None,
        scale: Any = None,
        clipped: Any = None,
        samples: int | None = None,
        tokens: int | None = None,
        **metrics: Any,
    ) -> None:
        """Report optimizer step `step` (0, 1, 2, ...): its loss (a number or a 0-d tensor,
        kept on the device until the next fetch), its gradient norm before clipping, and any
        other metrics. Raises `Diverged` once the probe's checks find a divergence. `clipped`:
        whether clipping fired; by default what `recipe.clip_and_step` did since the last
        report (else, under a global norm, whether `grad_norm` exceeded it)."""
        from autotune.recipe.runtime import take_clipped

        fired = take_clipped()
        if clipped is None:
            clipped = fired
        self._session.report(
            step,
            loss,
            grad_norm,
            lr=lr,
            scale=scale,
            clipped=clipped,
            samples=samples,
            tokens=tokens,
            **metrics,
        )

    def reference(
        self,
        model: torch.nn.Module,
        held_out: Any = None,
        loss: Callable[[torch.nn.Module, Any], Any] | None = None,
        *,
        evaluate: Callable[[], Any] | None = None,
    ) -> float | None:
        """Give the probe the untrained model's held-out loss as its initial-loss reference
        (`loss_drop`, `noise_per_drop`, the loss-explosion test): call it once the model is
        built, before training. `held_out`: a tensor or a tuple of tensors, samples first (e.g.
        `(x_val, y_val)`); the probe reads it in the study's chunks (one size for every trial,
        whatever its micro-batch) with `loss(model, batch)`, a chunk being a tuple like
        `held_out`, under `torch.no_grad()` in train mode, and puts back the model's buffers and
        the RNGs. Or `evaluate=fn`: `fn()` returns the loss (a number or a 0-d tensor). Returns
        the reference; None when it could not be had (step 0's loss then, the summary says why).
        Without a call the reference is step 0's loss."""
        return self._session.set_reference(model, held_out, loss, evaluate)

    def resume(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any = None,
        scaler: Any = None,
        *,
        data: Any = None,
        batches_per_step: int | None = None,
    ) -> int:
        """The state hook: hand the trial what you train with, once built, before the first
        step, and start your loop at what it returns (`for step in range(trial.resume(...),
        trial.steps)`). In a study with rungs, a promoted probe then continues the state its
        shorter probe saved instead of training again from step 0: the model, optimizer,
        scheduler and scaler state dicts, the RNGs, and the data's position. `data`: an
        iterator you take micro-batches from with `next()` (advanced past `batches_per_step`
        per step already run, by default the recipe's accum_steps), or an object with
        `state_dict()`/`load_state_dict()`; None when your data does not depend on what came
        before. Returns the optimizer steps already run (0 outside a study, or at the screen).
        Without it a promoted probe restarts from step 0, and its summary says so."""
        from autotune.probe.script_state import Parts

        per_step = self.recipe.accum_steps if batches_per_step is None else batches_per_step
        if isinstance(per_step, bool) or not isinstance(per_step, int) or per_step < 0:
            raise ValueError(
                f"trial.resume(batches_per_step={per_step!r}): the micro-batches taken per "
                "optimizer step, an int >= 0"
            )
        parts = Parts(model, optimizer, scheduler, scaler, data, per_step)
        done = self._session.resume(parts)
        if done and self.recipe.adaptive_clipping:  # zclip's EMAs, autoclip's history
            self.recipe.replay_clipping(optimizer, self.inherited_grad_norms())
        return done

    def continue_framework(self, framework: str, model: Any) -> tuple[int, str | None]:
        """For autotune's integrations, whose framework checkpoints itself (`hf`, `lightning`):
        the state hook with the framework's own checkpoint. Returns the optimizer steps already
        run and the checkpoint folder to resume from (None: from the start); the folder to save
        into after the last step is `framework_save_dir`."""
        from autotune.probe.script_state import Parts

        done = self._session.resume(Parts(model, None, framework=framework))
        return done, self._session.state.resume_dir

    @property
    def framework_save_dir(self) -> str | None:
        """Where an integration saves its framework's checkpoint after the last step, for a
        longer probe to continue (None: no state wanted, or no `continue_framework` hook)."""
        from autotune.probe.script_state import framework_dir

        state, save = self._session.state, self._session.cfg.save_state
        hooked = state.parts is not None and state.parts.framework is not None
        return framework_dir(save) if save and hooked else None

    def inherited_grad_norms(self) -> list[float]:
        """The gradient norms of the steps a continued run inherited (a stateful clipping
        policy is replayed over them: zclip's EMAs, autoclip's history); [] from step 0."""
        if not self._session.state.start.step:
            return []
        return [g for arr in self._session.series.get("grad_norm", []) for g in arr.tolist()]

    def note_continuation(self, text: str) -> None:
        """Say in the probe's record (`continuation.note`) how a continued run differs from the
        run from step 0 (an integration that knows: Lightning's plain DataLoader). Nothing
        from step 0."""
        if self._session.state.start.step:
            self._session.state.start.note = text[:300]

    @property
    def batch(self) -> int:
        """Samples per optimizer step (this process): `micro_batch` x accum_steps. A study that
        searches `batch` sets it per trial; build the data loader from it (or `micro_batch`)
        and run `steps` optimizer steps: trials then see equal samples."""
        return int(self.recipe.knobs["batch"])

    @property
    def should_stop(self) -> bool:
        """A divergence was found: stop training (`if trial.should_stop: break`)."""
        return self._session.should_stop

    @property
    def stop_reason(self) -> str | None:
        """The divergence's cause (nonfinite_loss, loss_explosion, ...), or None."""
        return self._session.cause

    def uses(self, integration: str, *, attached: bool = False) -> None:
        """For autotune's integrations: the framework that reports for this script (`hf`,
        `lightning`) and whether its reporting is attached, so that a script that never
        reports is told the call it forgot (e.g. `hf.attach`)."""
        self._session.first.uses(integration, attached=attached)

    def reporting_forgotten(self) -> bool:
        """For autotune's integrations: in a study, no integration's reporting is attached and
        this process has not reported yet (a framework's loop ran without the reporting hook)."""
        first = self._session.first
        return self.in_study and not first.attached and not first.reported.is_set()

    def summary(self) -> dict[str, Any]:
        """The summary metrics of the steps reported so far (ends the session)."""
        return self._session.finish()


_TRIAL: Trial | None = None


def trial(
    *,
    steps: int | None = None,
    micro_batch: int | None = None,
    lr: float | None = None,
    seed: int = 0,
    own_steps: bool = False,
) -> Trial:
    """The trial this script runs in. Call it once, before building the model or the data (it
    seeds torch, numpy and random); a second call returns the same trial.

    The keyword arguments are the script's own values, used outside a study. In a study,
    `probe.steps`, `probe.micro_batch`, `probe.seed` and the knobs come from the space (`lr=` is
    the learning rate when the space leaves the `lr` knob unset). Under `AUTOTUNE_RECIPE` the
    recipe replays its trial: its knobs, micro-batch, seed, steps and schedule length win over
    these defaults; `own_steps=True` keeps `steps=` (and a schedule over them) instead, for a
    run of another length with the recipe's knobs."""
    global _TRIAL
    session = current()
    if _TRIAL is not None and (session is None or _TRIAL._session is session):
        return _TRIAL
    if own_steps and steps is None:
        raise ValueError("autotune.trial(own_steps=True) needs steps=N: the steps to keep")
    if session is None:
        session = _standalone(steps, micro_batch, seed, own_steps)
    _TRIAL = _make(session, lr)
    if session.in_study:
        _note_differences(session.cfg, steps=steps, micro_batch=micro_batch)
    return _TRIAL


def _make(session: ScriptSession, lr: float | None) -> Trial:
    cfg = session.cfg
    knobs = session.begin(DEFAULT_LR if lr is None else float(lr))
    recipe = Recipe(
        name="trial" if session.in_study else "standalone",
        workload={"script": cfg.script, "args": list(cfg.args)},
        precision=cfg.precision,
        micro_batch=cfg.micro_batch,
        knobs=dict(knobs),
        env=dict(cfg.env),
        probe={"steps": cfg.steps, "seed": cfg.seed, "device": cfg.device},
    )
    return Trial(
        recipe=recipe,
        steps=cfg.steps,
        schedule_steps=schedule_length(cfg),
        seed=cfg.seed,
        device=session.device,
        threads=cfg.threads,
        micro_batch=cfg.micro_batch,
        precision=cfg.precision,
        in_study=session.in_study,
        _session=session,
    )


def _standalone(
    steps: int | None, micro_batch: int | None, seed: int, own_steps: bool = False
) -> ScriptSession:
    """A session without a study: the recipe of AUTOTUNE_RECIPE, else PyTorch's defaults."""
    path = os.environ.get(RECIPE_ENV)
    script = str(Path(sys.argv[0]).resolve()) if sys.argv and sys.argv[0] else None
    if path:
        try:
            recipe = Recipe.load(path)
        except RecipeError as e:  # a stale variable: say where the path came from
            raise RecipeError(f"{RECIPE_ENV}={path}: {e}") from None
        recipe.apply_env()
        n = _recipe_steps(recipe, path, steps, own_steps)
        # The recipe's probe (`Recipe.probe_config`: its knobs, environment, precision,
        # divergence checks and initial-loss reference), as this script runs it on its own: by
        # its own path and arguments, at the recipe's micro-batch, in one process, telemetry
        # checked every 10 steps, the script's `steps` only with own_steps=True.
        cfg = dataclasses.replace(
            recipe.probe_config(),
            workload=recipe.workload.get("script") or recipe.workload.get("name") or "script",
            size="tiny",
            steps=n,
            # The recipe's schedule, as its study measured it (own steps: over them).
            schedule_steps=None if own_steps else recipe.schedule_steps,
            micro_batch=recipe.micro_batch,
            seed=int(recipe.probe.get("seed", seed)),
            telemetry_every=10,
            world_size=1,
            script=script,
            args=[],
        )
    else:
        for name, value in (("steps", steps), ("micro_batch", micro_batch)):
            if value is None:
                raise ValueError(
                    f"autotune.trial(): {name} not given and no {RECIPE_ENV}: "
                    f"pass autotune.trial({name}=N)"
                )
        cfg = ProbeConfig(
            workload="script",
            steps=int(steps or 0),
            micro_batch=int(micro_batch or 0),
            seed=seed,
            knobs={},  # PyTorch's default for every knob (probe.steps.resolve_knobs)
            script=script,
        )
    if cfg.threads:
        import torch

        torch.set_num_threads(int(cfg.threads))
    session = ScriptSession(cfg, None, in_study=False)
    out = os.environ.get(SUMMARY_ENV)
    if out:
        target = summary_target(out)
        atexit.register(_write_summary, session, target)
        # os._exit(0) after the last step skips atexit: the summary is written before it too.
        summary_before_os_exit(lambda: _write_summary(session, target))
    return session


def summary_target(raw: str) -> Path:
    """Where AUTOTUNE_SUMMARY asks for the summary, checked now rather than at exit (where a
    failed write would pass unseen under the script's status 0): a file, in a folder that is
    there and writable. ValueError naming the variable otherwise."""
    path = Path(raw).expanduser()
    folder = path.parent
    why = None
    if path.is_dir():
        why = "is a folder: name a file, e.g. summary.json"
    elif not folder.is_dir():
        why = f"its folder {folder} is not there"
    elif not os.access(folder, os.W_OK | os.X_OK):
        why = f"its folder {folder} cannot be written"
    elif path.exists() and not os.access(path, os.W_OK):
        why = "cannot be written"
    if why:
        raise ValueError(f"autotune.trial(): {SUMMARY_ENV}={raw}: {why}")
    return path


def _recipe_steps(recipe: Recipe, path: str, steps: int | None, own_steps: bool) -> int:
    """The steps of a run under AUTOTUNE_RECIPE: the recipe's (counted at its study's batch, so
    at equal samples), or the script's with own_steps=True. A script default the recipe
    overrides is said on stderr."""
    if own_steps and steps is not None:
        return int(steps)
    p = recipe.probe
    if p.get("steps") is None:
        raise ValueError(
            f"autotune.trial(): {path} has no probe.steps: pass steps=N, own_steps=True"
        )
    batch = int(recipe.knobs["batch"])
    n = steps_at_batch(int(p["steps"]), int(p.get("batch") or batch), batch)
    if steps is not None and steps != n:
        print(
            f"autotune.trial(): steps={n} and its schedule are the recipe's ({path}); the "
            f"script's steps={steps} is a default (own_steps=True keeps it)",
            file=sys.stderr,
        )
    return n


def _write_summary(session: ScriptSession, path: Path) -> None:
    """At exit: the summary, written whole (a temporary file renamed) or not at all; a write
    that fails all the same (a full disk) is one line on stderr and exit status 1. A run a
    probe would fail (`standalone_failure`) is `failed`, with its cause and error."""
    failure = standalone_failure(session, getattr(sys, "last_value", None))
    summary = session.finish()
    if failure is not None:
        summary = {**summary, "status": "failed", **failure}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(summary, default=str))
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        print(f"autotune.trial(): {SUMMARY_ENV}={path}: not written: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)


def standalone_failure(
    session: ScriptSession, raised: BaseException | None
) -> dict[str, str] | None:
    """The cause and error a probe (`run_script`) would fail this standalone run with, at its
    exit (`raised`: the exception that ended the script, Python's `sys.last_value`): a bad
    report (even one the script caught), an exception, no report, or steps left unrun unasked
    (a `sys.exit(3)` at step 10 of 30 too: its status is not known at exit). None for a run a
    probe judges: ok, diverged, out of memory (recorded here, as the probe does)."""
    if session.failure is not None:
        return {"cause": "bad_report", "error": str(session.failure)}
    if raised is not None and not isinstance(raised, Diverged) and session.cause is None:
        if not is_oom(raised):
            return {"cause": "exception", "error": f"{type(raised).__name__}: {raised}"}
        session.oom(raised)
    if session.reports == 0:
        return {"cause": "no_reports", "error": "the script never called trial.report()"}
    if session.ended_early():
        return {"cause": "bad_report", "error": str(short_run(session.reports, session.cfg.steps))}
    return None


def _note_differences(cfg: ProbeConfig, **own: int | None) -> None:
    """A study value that differs from the script's own: one line each in the trial's log."""
    for name, value in own.items():
        study = getattr(cfg, name)
        if value is not None and value != study:
            print(f"autotune.trial(): {name}={study} (the study's; the script's is {value})")
