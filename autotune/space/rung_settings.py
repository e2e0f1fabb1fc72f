"""The `rungs` section of a space: promotion of the best screened configurations through
longer probes (`autotune/study/rungs.py`, `autotune/study/promotion.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from autotune.space.section import Section


class RungSettings(Section):
    """Promotion of the best screened configurations through longer probes (study/rungs.py)."""

    eta: int = Field(3, ge=2, le=10, description="rung ratio; the best 1/eta are promoted")
    min_promote: int = Field(2, ge=1, description="at least this many configs promoted a rung")
    agreement: float = Field(0.7, ge=-1.0, le=1.0, description="stop at this Kendall tau-b")
    min_agreement_n: int = Field(
        4, ge=4, description="configs tau-b is measured on, at least (4: 1/4! < 5% by chance)"
    )
    agree_rungs: int = Field(
        2, ge=1, le=8, description="rung pairs in a row that must agree to stop below the target"
    )
    max_rungs: int = Field(4, ge=1, le=8, description="rungs above the screen, at most")
    grow: Literal["pasha", "always"] = "pasha"
    continuation: bool = Field(
        True, description="a promoted probe continues the rung below (false: starts over)"
    )
    # sync: a rung waits for its slowest probe; async: study/promotion.py (README: Rungs)
    promotion: Literal["sync", "async"] = "sync"
    fill_idle: bool = Field(
        False,
        description="async: a worker with nothing to run takes the next-best configuration "
        "of an open rung below the top (more probes, no more wall time)",
    )

    @model_validator(mode="after")
    def _fill_needs_async(self) -> RungSettings:
        if self.fill_idle and self.promotion != "async":
            raise ValueError(
                "fill_idle: true needs promotion: async (a synchronous rung runs as one batch "
                "chosen when the rung below has ended; there is no idle worker to fill)"
            )
        return self
