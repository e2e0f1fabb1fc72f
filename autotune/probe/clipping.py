"""The clipping policies, as small stateful objects applied to the unscaled gradients of one
optimizer step: none, norm (a fixed threshold, global or per tensor), agc (unit-wise, relative
to the parameter's norm: NFNets' adaptive gradient clipping), zclip (a z-score of the total
norm against an EMA of its mean and variance: only outliers are clipped) and autoclip (the
total norm clipped to a percentile of the norms seen so far).

Each policy is called with the parameters and returns (total norm before clipping, per-tensor
norms before clipping, clipped?), every value a tensor on the parameters' device: no host sync.
`replay(norms)` rebuilds a stateful policy's state from the total norms of the steps a probe
inherits (the series it records), so a continued probe clips as the uninterrupted run would.
A non-finite total norm (a step the GradScaler skips) never enters a policy's statistics.

Everything below the marker line uses torch and math only: the python export copies it
verbatim into its standalone snippet, so the snippet clips exactly as the probe did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# --- the python export inlines the code from this line on ---

CLIP_POLICIES = ("none", "norm", "agc", "zclip", "autoclip")
NORM_EPS = 1e-6  # added to a norm before dividing by it, as torch.nn.utils.clip_grad_norm_ does


def gradient_norms(grads: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(the total L2 norm, each tensor's L2 norm) of `grads`, in float32, on their device."""
    import torch

    layer_norms = torch.stack(torch._foreach_norm(grads)).float()
    return torch.linalg.vector_norm(layer_norms), layer_norms


def scale_all(grads: list[torch.Tensor], coef: torch.Tensor) -> None:
    """Multiply every gradient by one 0-d coefficient, in place."""
    import torch

    torch._foreach_mul_(grads, coef.to(grads[0].dtype))


class NoClip:
    """Measure only: the norms are reported, the gradients left as they are."""

    name = "none"
    stateful = False

    def __call__(
        self, params: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        import torch

        total, layers = gradient_norms([p.grad for p in params if p.grad is not None])
        return total, layers, torch.zeros((), dtype=torch.bool, device=total.device)

    def replay(self, norms: list[float]) -> None:
        """Nothing to rebuild: this policy keeps no state."""


class NormClip(NoClip):
    """A fixed threshold `clip`. global: every gradient times min(1, clip / (total + 1e-6)), as
    torch.nn.utils.clip_grad_norm_ does; per_layer: each tensor's gradient times
    min(1, clip / (its norm + 1e-6)). clip <= 0: no clipping."""

    name = "norm"

    def __init__(self, clip: float, per_layer: bool = False) -> None:
        self.clip = float(clip)
        self.per_layer = bool(per_layer)

    def __call__(
        self, params: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        import torch

        grads = [p.grad for p in params if p.grad is not None]
        total, layers = gradient_norms(grads)
        if self.clip <= 0:
            return total, layers, torch.zeros((), dtype=torch.bool, device=total.device)
        if self.per_layer:
            coefs = torch.clamp(self.clip / (layers + NORM_EPS), max=1.0)
            torch._foreach_mul_(grads, list(coefs.to(grads[0].dtype).unbind()))
            return total, layers, (layers > self.clip).any()
        scale_all(grads, torch.clamp(self.clip / (total + NORM_EPS), max=1.0))
        return total, layers, total > self.clip


def unit_norms(x: torch.Tensor) -> torch.Tensor:
    """The L2 norm of each unit of `x`: the whole tensor for a scalar or vector, else each
    slice along the first dimension (an output unit), kept broadcastable against `x`."""
    if x.ndim <= 1:
        return x.norm(2)
    return x.norm(2, dim=tuple(range(1, x.ndim)), keepdim=True)


class AgcClip(NoClip):
    """Adaptive gradient clipping (NFNets, Brock et al. 2021), unit-wise: each unit's gradient
    g (a row of a matrix, a filter of a convolution, a whole vector) is scaled to
    lam * max(||w||, eps) / ||g|| when its norm exceeds lam * max(||w||, eps), w being that
    unit of the parameter (as timm's adaptive_clip_grad). Per unit by construction: there is no
    global variant."""

    name = "agc"

    def __init__(self, lam: float, eps: float = 1e-3) -> None:
        self.lam = float(lam)
        self.eps = float(eps)

    def __call__(
        self, params: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        import torch

        pairs = [(p, grad) for p in params if (grad := p.grad) is not None]
        total, layers = gradient_norms([grad for _, grad in pairs])
        clipped = torch.zeros((), dtype=torch.bool, device=total.device)
        for p, grad in pairs:
            g = grad.detach()
            limit = unit_norms(p.detach()).clamp(min=self.eps) * self.lam
            g_norm = unit_norms(g)
            over = g_norm > limit
            coef = torch.where(over, limit / g_norm.clamp(min=NORM_EPS), torch.ones_like(limit))
            g.mul_(coef.to(g.dtype))
            clipped = clipped | over.any()
        return total, layers, clipped


class TotalNormPolicy(NoClip):
    """A stateful policy that scales every gradient by one coefficient, which `threshold`
    derives from the total norm and the state (ZClip, AutoClip)."""

    stateful = True

    def threshold(self, total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the coefficient for this step's gradients, clipped?), the state updated."""
        raise NotImplementedError

    def __call__(
        self, params: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        grads = [p.grad for p in params if p.grad is not None]
        total, layers = gradient_norms(grads)
        coef, clip = self.threshold(total)
        scale_all(grads, coef)
        return total, layers, clip

    def replay(self, norms: list[float]) -> None:
        """Rebuild the state from the total norms (before clipping) of the steps run so far."""
        import torch

        for value in norms:
            self.threshold(torch.tensor(float(value), dtype=torch.float32))


class ZClip(TotalNormPolicy):
    """ZClip (Kumar et al. 2025), clipping to mean + z * std: the total norm's mean and variance
    are an EMA (`alpha`) started from the first `warmup` finite norms (their mean and population
    variance; nothing is clipped meanwhile); after it, a norm above mean + z * std is clipped to
    that threshold (gradients times threshold / (norm + 1e-6)), and the EMA is updated with the
    norm after clipping: mean <- alpha * mean + (1 - alpha) * n, then
    var <- alpha * var + (1 - alpha) * (n - mean)^2 with the new mean (the `zclip` package's
    mode="percentile", max_grad_norm=None)."""

    name = "zclip"

    def __init__(self, z: float, alpha: float, warmup: int = 25) -> None:
        self.z = float(z)
        self.alpha = float(alpha)
        self.warmup = max(1, int(warmup))
        self.state: dict[str, torch.Tensor] = {}

    def _state(self, device: torch.device) -> dict[str, torch.Tensor]:
        import torch

        if not self.state:
            f64 = torch.float64
            self.state = {
                "seen": torch.zeros((), dtype=torch.long, device=device),
                "buffer": torch.zeros(self.warmup, dtype=f64, device=device),
                "mean": torch.zeros((), dtype=f64, device=device),
                "var": torch.zeros((), dtype=f64, device=device),
            }
        return self.state

    def threshold(self, total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the coefficient for this step's gradients, clipped?), the state updated with the
        total norm `total`."""
        import torch

        s = self._state(total.device)
        x = total.double()
        finite = torch.isfinite(x)
        ready = s["seen"] >= self.warmup  # the EMA started before this step
        # Warm-up: collect finite norms; the EMA starts from them once `warmup` are in.
        collect = finite & ~ready
        slot = s["seen"].clamp(max=self.warmup - 1).unsqueeze(0)
        old = s["buffer"].gather(0, slot)
        s["buffer"].scatter_(0, slot, torch.where(collect, x.unsqueeze(0), old))
        s["seen"] = s["seen"] + collect.long()
        start = collect & (s["seen"] == self.warmup)
        mean0 = s["buffer"].mean()
        var0 = ((s["buffer"] - mean0) ** 2).mean()
        mean = torch.where(start, mean0, s["mean"])
        var = torch.where(start, var0, s["var"])
        # After it: clip an outlier to mean + z * std; the EMA follows the clipped norm.
        limit = mean + self.z * var.sqrt()
        clip = ready & finite & (x > limit)
        coef = torch.where(clip, limit / (x + NORM_EPS), torch.ones_like(x))
        n = torch.where(clip, limit, x)
        new_mean = self.alpha * mean + (1 - self.alpha) * n
        new_var = self.alpha * var + (1 - self.alpha) * (n - new_mean) ** 2
        update = ready & finite
        s["mean"] = torch.where(update, new_mean, mean)
        s["var"] = torch.where(update, new_var, var)
        return coef, clip


class AutoClip(TotalNormPolicy):
    """AutoClip (Seetharaman et al. 2020): the total norm is clipped to the `percentile`-th
    percentile (linear interpolation, as numpy.percentile) of every finite total norm seen so
    far, this step's included: gradients times min(1, threshold / (norm + 1e-6)), as
    torch.nn.utils.clip_grad_norm_ with that threshold."""

    name = "autoclip"

    def __init__(self, percentile: float) -> None:
        self.q = float(percentile) / 100.0
        self.history: torch.Tensor | None = None
        self.count = 0

    def threshold(self, total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the coefficient for this step's gradients, clipped?), the history extended by the
        total norm `total` (NaN in its place when it is not finite: left out)."""
        import torch

        x = total.double()
        if self.history is None or self.count == self.history.numel():
            grown = torch.full(
                (max(64, 2 * self.count),), torch.nan, dtype=x.dtype, device=x.device
            )
            if self.history is not None:
                grown[: self.count] = self.history
            self.history = grown
        finite = torch.isfinite(x)
        self.history[self.count] = torch.where(finite, x, torch.full_like(x, torch.nan))
        self.count += 1
        limit = torch.nanquantile(self.history[: self.count], self.q)
        ratio = limit / (x + NORM_EPS)
        clip = finite & torch.isfinite(limit) & (ratio < 1.0)
        return torch.where(clip, ratio, torch.ones_like(x)), clip


def make_clip_policy(knobs: dict[str, object]) -> NoClip:
    """The policy a recipe's or a probe's knobs name (clip_policy, default norm), with its
    children: clip_norm and clip_mode (norm), agc_lambda and agc_eps (agc), zclip_z,
    zclip_alpha and zclip_warmup (zclip), autoclip_percentile (autoclip). A fresh state."""
    policy = str(knobs.get("clip_policy") or "norm")

    def num(name: str, default: float) -> float:
        value = knobs.get(name)
        return default if value is None else float(value)  # type: ignore[arg-type]

    if policy == "none":
        return NoClip()
    if policy == "norm":
        return NormClip(num("clip_norm", 0.0), knobs.get("clip_mode") == "per_layer")
    if policy == "agc":
        return AgcClip(num("agc_lambda", 0.01), num("agc_eps", 1e-3))
    if policy == "zclip":
        return ZClip(num("zclip_z", 2.5), num("zclip_alpha", 0.97), int(num("zclip_warmup", 25)))
    if policy == "autoclip":
        return AutoClip(num("autoclip_percentile", 10.0))
    raise ValueError(f"clip_policy must be one of {', '.join(CLIP_POLICIES)}, got {policy!r}")
