"""`probe.divergence`: when a probe's run is a divergence, and when it stops for one
(`autotune.probe.divergence` applies them; the README's divergence section explains them)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from autotune.space.section import Section


class DivergenceSettings(Section):
    stop_early: Any = Field(
        True, description="stop at a divergence (true), never (false), or on a non-finite loss"
    )
    loss_explosion_factor: float = Field(10.0, gt=1.0, description="loss spike: x initial loss")
    grad_explosion_factor: float = Field(1e3, gt=1.0, description="grad spike: x median norm")
    persist_steps: int = Field(
        75, ge=1, le=100_000, description="consecutive spikes that are a divergence"
    )
    recovery_window: int = Field(
        300, ge=1, le=1_000_000, description="steps after a spike whose median loss must recover"
    )
    recovery_factor: float = Field(
        5.0, gt=1.0, le=1e6, description="no recovery: median after > factor x median before"
    )
    recovery_descent: float = Field(
        2.0,
        ge=0.0,
        le=1e6,
        description="a loss come down by this factor from its worst is judged a window later",
    )
    scale_floor: float = Field(1e-4, gt=0.0)
    skipped_fraction: float = Field(0.5, gt=0.0, le=1.0)

    @field_validator("stop_early")
    @classmethod
    def _stop_early(cls, v: Any) -> bool | str:
        if isinstance(v, bool) or v == "nonfinite":
            return v
        raise ValueError(f"must be true, false or nonfinite (stop only on a NaN/inf loss): {v!r}")
