"""A space's numbers against the dtype they meet: under fp16, an AdamW eps (or AGC's eps) that
float16 cannot hold. The probe keeps AdamW's state in float32 under autocast, where such an eps
still acts; a model trained in float16 itself (`.half()`, its optimizer state float16) would
lose it: a warning, not a refusal."""

from __future__ import annotations

from autotune.space.schema import Domain, Space

FP16_TINY = 2.0**-14  # float16's smallest normal number, ~6.1e-05
FP16_SUBNORMAL = 2.0**-24  # its smallest positive number, ~6.0e-08: below, a value rounds to 0
_EPS_KNOBS = ("adam_eps", "agc_eps")


def dtype_warnings(space: Space) -> list[str]:
    """One line per knob of an fp16 space whose smallest value float16 cannot hold."""
    if space.probe.precision != "fp16":
        return []
    out = []
    for name in _EPS_KNOBS:
        value = space.knobs.get(name)
        if isinstance(value, Domain):
            values = value.choices or (value.low,)
            low = min(float(v) for v in values if isinstance(v, int | float))
        else:
            low = float(space.default_value(name) or 0.0)
        if low <= 0 or low >= FP16_TINY:
            continue
        fate = "rounds to 0" if low < FP16_SUBNORMAL / 2 else "is subnormal (imprecise)"
        out.append(
            f"knobs.{name}: {low:g} {fate} in float16 (smallest normal {FP16_TINY:.2g}): the "
            "probe's AdamW state is float32 under autocast, where it acts; with optimizer "
            "state in float16 (a model in .half()) it would not"
        )
    return out
