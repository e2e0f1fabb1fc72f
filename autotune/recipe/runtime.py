"""The recipe's runtime API: what a user's training loop calls (`apply_env`, `optimizer`,
`scaler`, `autocast`, `lr_at`, `scheduler`, `clip_policy`, `clip_and_step`, `batches`).

`Recipe` (recipe/file.py) inherits these methods from `RecipeRuntime`. The optimizer, scaler,
schedule and clipping are built by the probe's own functions, so the user's loop gets exactly
what was measured.
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from autotune.probe.clipping import NoClip

#: The clipping policy's state of each optimizer `clip_and_step` has stepped (zclip's EMAs,
#: autoclip's history): one per optimizer, gone with it.
_POLICIES: weakref.WeakKeyDictionary[Any, NoClip] = weakref.WeakKeyDictionary()

#: Whether the last `clip_and_step` clipped (a 0-d bool tensor, on the device: no sync), until
#: the trial's next report takes it (`take_clipped`): the `clipped` series of a script that
#: clips through the recipe, whatever its policy.
_FIRED: list[Any] = []


def take_clipped() -> Any:
    """Whether clipping fired in the `clip_and_step` calls since the last report (a 0-d bool
    tensor), else None (not known here); forgotten once taken."""
    if not _FIRED:
        return None
    fired = _FIRED[0]
    for more in _FIRED[1:]:
        fired = fired | more
    _FIRED.clear()
    return fired


class RecipeRuntime:
    """The training-side methods of a recipe; the fields live on `Recipe`."""

    knobs: dict[str, Any]
    env: dict[str, str]
    precision: str

    @property
    def accum_steps(self) -> int:
        return int(self.knobs.get("accum_steps", 1))

    @property
    def lr(self) -> float:
        return float(self.knobs["lr"])

    def apply_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """Set the recipe's environment knobs (in `os.environ` unless another mapping is given).

        NCCL/RCCL read them when the process group starts and ROCm libraries when they load:
        call this before `init_process_group` and before the first GPU operation, or export
        them in the shell (`autotune export --format env`). Returns what was set."""
        target = os.environ if environ is None else environ
        for name, value in self.env.items():
            target[name] = str(value)
        return dict(self.env)

    def optimizer(self, params: Iterable[Any]) -> torch.optim.AdamW:
        """AdamW with the recipe's lr, betas, eps and weight decay (fused on a GPU)."""
        import torch

        from autotune.probe import build_optimizer
        from autotune.probe.script import mark_applied

        plist = list(params)
        first = next(
            (p for p in plist if isinstance(p, torch.Tensor)),
            next((p for g in plist if isinstance(g, dict) for p in g.get("params", [])), None),
        )
        device = first.device if first is not None else torch.device("cpu")
        opt = build_optimizer(plist, self.knobs, device)
        mark_applied("optimizer", opt)  # in a trial, its `lr` series reads this optimizer's
        return opt

    def scaler(self, device: str = "cuda") -> torch.amp.GradScaler:
        """The GradScaler with the recipe's four knobs; disabled (a no-op) unless fp16."""
        import torch

        from autotune.probe import build_scaler

        return build_scaler(self.knobs, torch.device(device), enabled=self.precision == "fp16")

    def autocast(self, device: str = "cuda") -> AbstractContextManager[Any]:
        """`torch.autocast` at the recipe's precision; a no-op context for fp32."""
        import torch

        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision)
        if dtype is None:
            return nullcontext()
        return torch.autocast(torch.device(device).type, dtype=dtype)

    def lr_at(self, step: int, total_steps: int) -> float:
        """The learning rate of optimizer step `step` (0-based) of `total_steps`."""
        from autotune.probe import lr_at
        from autotune.probe.script import mark_applied

        mark_applied("scheduler")
        k = self.knobs
        return lr_at(
            step,
            peak=float(k["lr"]),
            warmup=int(k["warmup_steps"]),
            schedule=str(k["schedule"]),
            total=total_steps,
            min_ratio=float(k["min_lr_ratio"]),
        )

    def scheduler(self, optimizer: Any, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
        """Warm-up and decay as the probe ran them: call `.step()` after each optimizer step.

        A recipe whose trials ran under a script's Hugging Face Trainer (`hf.training_args`;
        `source.script_applied` lists `hf`) was measured with HF's schedule instead, which
        starts its warm-up one step later at 0 and ends its decay one step later (a linear one
        at 0, whatever min_lr_ratio; HF also exempted biases and norm weights from weight
        decay, which `optimizer` does not): to train as measured, use
        `hf.training_args(recipe, ...)` with a Trainer."""
        import torch

        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        from autotune.probe.script import mark_applied

        mark_applied("scheduler")
        peak = self.lr
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: self.lr_at(min(step, total_steps - 1), total_steps) / peak
        )

    @property
    def adaptive_clipping(self) -> bool:
        """Whether the recipe clips by agc, zclip or autoclip: rules a trainer's own clipping
        (TrainingArguments.max_grad_norm, Lightning's gradient_clip_val: one global norm)
        cannot express; a callback clips instead."""
        return self.knobs.get("clip_policy", "norm") in ("agc", "zclip", "autoclip")

    @property
    def callback_clipping(self) -> bool:
        """Whether the recipe clips by a rule a trainer's one global norm cannot express: a
        per-layer norm, or an adaptive policy (`adaptive_clipping`); a callback clips instead."""
        k = self.knobs
        per_layer = k.get("clip_policy", "norm") == "norm" and k.get("clip_mode") == "per_layer"
        return per_layer or self.adaptive_clipping

    @property
    def global_clip_norm(self) -> float:
        """The threshold of the recipe's clipping as one global norm: clip_norm under the norm
        policy, 0.0 (off) under none, agc, zclip and autoclip."""
        if self.knobs.get("clip_policy", "norm") != "norm":
            return 0.0
        return float(self.knobs["clip_norm"])

    def clip_policy(self) -> NoClip:
        """A fresh clipping policy of the recipe (`autotune.probe.clipping`): call it with the
        parameters after unscaling; it clips in place and returns (total norm before clipping,
        per-tensor norms, clipped?). zclip and autoclip keep state: one per training run."""
        from autotune.probe import clip_policy
        from autotune.probe.script import mark_applied

        mark_applied("clip")
        return clip_policy(self.knobs)

    def clip_and_step(
        self,
        optimizer: Any,
        scaler: Any | None = None,
        parameters: Iterable[Any] | None = None,
        *,
        zero_grad: bool = True,
    ) -> float:
        """The end of a training step, in the order that is correct under a GradScaler:
        unscale the gradients, clip them (the recipe's clip_policy and its settings: a norm
        and mode, agc, zclip or autoclip; a norm of 0 or none: no clipping), step (skipped
        when a gradient is inf/NaN), update the scale, zero the gradients. A stateful policy
        keeps its state per `optimizer`. Returns the total gradient norm before clipping; whether it
        clipped goes to the trial's next `report` (its `clipped` series, `clip_fraction`)."""
        from autotune.probe import apply_clipping
        from autotune.probe.script import mark_applied

        mark_applied("clip")
        params = list(parameters) if parameters is not None else _params_of(optimizer)
        if scaler is not None:
            scaler.unscale_(optimizer)
        with_grad = [p for p in params if p.grad is not None]
        norm = 0.0
        if with_grad:
            policy = _POLICIES.get(optimizer)
            if policy is None:
                policy = _POLICIES[optimizer] = self.clip_policy()
            total, _, fired = apply_clipping(policy, with_grad)
            norm = float(total)
            del _FIRED[7:]  # a loop that never reports keeps no more than a few
            _FIRED.append(fired)
        if scaler is not None and scaler.is_enabled():
            scaler.step(optimizer)  # skipped by the scaler when a gradient is inf/NaN
            scaler.update()
        elif math.isfinite(norm):  # without a scaler, skip a step on inf/NaN gradients too
            optimizer.step()
        if zero_grad:
            optimizer.zero_grad(set_to_none=True)
        return norm

    def replay_clipping(self, optimizer: Any, grad_norms: Iterable[float]) -> None:
        """Give `optimizer`'s clipping policy (`clip_and_step`'s) the gradient norms of the
        steps a run continues from, so a stateful policy (zclip's EMAs, autoclip's history)
        clips as the uninterrupted run would (`trial.resume`)."""
        policy = _POLICIES[optimizer] = self.clip_policy()
        policy.replay([float(g) for g in grad_norms])

    def batches(self, micro_batches: Iterable[Any]) -> Iterator[list[Any]]:
        """Group a stream of micro-batches into the recipe's optimizer steps."""
        group: list[Any] = []
        for mb in micro_batches:
            group.append(mb)
            if len(group) == self.accum_steps:
                yield group
                group = []


def _params_of(optimizer: Any) -> list[Any]:
    return [p for group in optimizer.param_groups for p in group["params"]]
