"""The `verify` section of a space: how many of the best candidates are re-run at the end of a
study, and over how many other seeds (at least 2 when any is: one pair shows no seed noise)."""

from __future__ import annotations

from pydantic import Field, model_validator

from autotune.space.section import Section
from autotune.space.seeds import MAX_VERIFY_SEEDS


class VerifySettings(Section):
    top_k: int = Field(
        3, ge=0, le=50, description="best candidates re-run at the end of a study (0: none)"
    )
    seeds: int = Field(
        3, ge=1, le=MAX_VERIFY_SEEDS, description="other seeds each candidate is re-run with"
    )

    @model_validator(mode="after")
    def _two_seeds(self) -> VerifySettings:
        # one pair shows no seed noise: a pick 6x better would tie with the defaults and give
        # way to them (`paired.PREFER_DEFAULTS`)
        if self.top_k > 0 and self.seeds < 2:
            raise ValueError(
                f"seeds: {self.seeds} cannot tell a candidate from the defaults (one pair shows "
                "no seed noise): at least 2, or top_k: 0 for no verification"
            )
        return self
