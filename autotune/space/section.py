"""The base of every section of a space file: unknown keys, infinities and NaN are refused, and
so is a boolean where a number is meant (`trials: true` is not 1 trial)."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class Section(BaseModel):
    """A frozen section of a space file that refuses unknown keys, non-finite numbers and a
    true/false given for a number."""

    # No field means anything at infinity or NaN (a trial timeout of .inf overflows).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _a_number(field.annotation):
                raise ValueError(f"must be a number, not {str(value).lower()}")
        return value


def _a_number(annotation: Any) -> bool:
    """Whether a field of this type is a number and never true/false: int or float, alone or
    in a union without bool."""
    kinds = {annotation, *typing.get_args(annotation)}
    return bool(kinds & {int, float}) and bool not in kinds and Any not in kinds
