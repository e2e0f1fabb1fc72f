"""The base of every section of a space file: unknown keys, infinities and NaN are refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A frozen section of a space file that refuses unknown keys and non-finite numbers."""

    # No field means anything at infinity or NaN (a trial timeout of .inf overflows).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
