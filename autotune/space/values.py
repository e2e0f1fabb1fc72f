"""One knob's value in a space or recipe file: a scalar checked against the knob catalogue, or a
domain (`{low, high[, log][, step][, default]}` or `{choices: [...]}`); environment variables
restricted to the allowed prefixes and never a site setting."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from autotune.errors import AutotuneError, did_you_mean
from autotune.knobs import ENV_PREFIXES, KnobInfo, Scalar
from autotune.space.schema import ENV_SITE_SETTINGS, Domain, KnobValue

#: Builds the error for a key path and a message (a space's `ErrorAt`, or a recipe's).
ErrorAt = Callable[[Sequence[str | int], str], AutotuneError]

_DOMAIN_KEYS = ("low", "high", "log", "step", "choices", "default")


def knob_value(info: KnobInfo, raw: Any, path: list[str | int], err: ErrorAt) -> KnobValue:
    if isinstance(raw, dict):
        domain = domain_of(raw, info.kind, path, err)
        values: list[Any] = list(domain.choices) if domain.is_choice else [domain.low, domain.high]
        if domain.default is not None:
            values.append(domain.default)
        for v in values:
            check_value(info, v, path, err)
        if domain.default is not None and not domain.contains(domain.default):
            raise err([*path, "default"], f"default {domain.default!r} lies outside the domain")
        return domain
    if isinstance(raw, list):
        raise err(path, "a list is not a value: write `{choices: [...]}` to search choices")
    return check_value(info, raw, path, err)


def check_value(info: KnobInfo, v: Any, path: list[str | int], err: ErrorAt) -> Scalar:
    if info.kind == "bool":
        if not isinstance(v, bool):
            raise err(path, f"must be true or false, got {v!r}")
        return v
    if info.kind == "choice":
        if v not in info.choices:
            raise err(
                path,
                f"must be one of {list(info.choices)}, got {v!r}"
                f"{did_you_mean(str(v), [str(c) for c in info.choices])}",
            )
        return v
    if isinstance(v, bool) or not isinstance(v, int | float):
        if isinstance(v, str):
            try:
                v = float(v)  # YAML reads 1e-8 (no dot) as a string
            except ValueError:
                raise err(path, f"must be a number, got {v!r}") from None
        else:
            raise err(path, f"must be a number, got {v!r}")
    if not math.isfinite(v):
        raise err(path, f"must be finite, got {v!r}")
    if info.kind == "int":
        if float(v) != int(v):
            raise err(path, f"must be a whole number, got {v!r}")
        v = int(v)
    else:
        v = float(v)
    lo_ok = info.low is None or (v > info.low if info.low_open else v >= info.low)
    hi_ok = info.high is None or (v < info.high if info.high_open else v <= info.high)
    if not (lo_ok and hi_ok):
        lo = "(" if info.low_open else "["
        hi = ")" if info.high_open else "]"
        raise err(
            path, f"{v!r} is out of range: {info.name} must lie in {lo}{info.low}, {info.high}{hi}"
        )
    return v


def domain_of(raw: dict[str, Any], kind: str, path: list[str | int], err: ErrorAt) -> Domain:
    for key in raw:
        if key not in _DOMAIN_KEYS:
            raise err(
                [*path, str(key)],
                f"unknown domain key{did_you_mean(str(key), _DOMAIN_KEYS)}; "
                "a domain is {low, high[, log][, step][, default]} or {choices: [...]}",
            )
    if "choices" in raw:
        choices = raw["choices"]
        extra = set(raw) - {"choices", "default"}
        if extra:
            raise err(
                [*path, sorted(extra)[0]], "choices cannot be combined with low/high/log/step"
            )
        if not isinstance(choices, list) or not choices:
            raise err([*path, "choices"], "must be a non-empty list")
        default = raw.get("default")
        if kind in ("float", "int"):
            choices = [number(c, kind, [*path, "choices"], err) for c in choices]
            if default is not None:  # YAML reads 1e-8 (no dot) as a string
                default = number(default, kind, [*path, "default"], err)
        # Compared as they run: 1, 1.0 and "1e0" are one number (repr keeps true apart from 1).
        same = choices if kind in ("float", "int") else [repr(c) for c in choices]
        if len(set(same)) != len(choices):
            raise err([*path, "choices"], f"duplicate choices in {raw['choices']}")
        return Domain(choices=tuple(choices), default=default)
    if kind in ("choice", "bool"):
        raise err(path, "this knob takes `{choices: [...]}`, not low/high")
    if "low" not in raw or "high" not in raw:
        missing = "low" if "low" not in raw else "high"
        raise err([*path, missing], "a range needs both low and high")
    low = number(raw["low"], kind, [*path, "low"], err)
    high = number(raw["high"], kind, [*path, "high"], err)
    if low > high:
        raise err(path, f"low <= high must hold, got low={low}, high={high}")
    if low == high:  # one value, shown as a searched range and costing trials
        raise err(path, f"low = high = {low}: a range of one value; give the value itself")
    log = raw.get("log", False)
    if not isinstance(log, bool):
        raise err([*path, "log"], f"must be true or false, got {log!r}")
    if log and low <= 0:
        raise err([*path, "low"], f"a log domain needs low > 0, got low={low}")
    step = raw.get("step")
    if step is not None:
        step = number(step, kind, [*path, "step"], err)
        if step <= 0:
            raise err([*path, "step"], f"must be > 0, got {step}")
        if log:
            raise err([*path, "step"], "step and log cannot be combined")
        if step > high - low:
            raise err(
                [*path, "step"],
                f"{step} is wider than the range [{low}, {high}]: only {low} could be drawn",
            )
    default = raw.get("default")
    if default is not None:
        default = number(default, kind, [*path, "default"], err)
    return Domain(low=low, high=high, log=log, step=step, default=default)


def number(v: Any, kind: str, path: list[str | int], err: ErrorAt) -> float | int:
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise err(path, f"must be a number, got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise err(path, f"must be a number, got {v!r}")
    if not math.isfinite(v):
        raise err(path, f"must be finite, got {v!r}")
    if kind == "int":
        if float(v) != int(v):
            raise err(path, f"must be a whole number, got {v!r}")
        return int(v)
    return float(v)


def env_value(name: str, raw: Any, path: list[str | int], err: ErrorAt) -> KnobValue:
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
        raise err(path, "environment variable names are upper case letters, digits and '_'")
    if not name.startswith(ENV_PREFIXES):
        raise err(
            path,
            f"refused: only variables starting with {', '.join(ENV_PREFIXES)} may be "
            "set from a space or recipe file (it may come from elsewhere; LD_PRELOAD, PYTHONPATH "
            "and the like are never accepted)",
        )
    if any(name.startswith(s) for s in ENV_SITE_SETTINGS):
        raise err(
            path,
            "a site setting (fabric, interface, PCIe) is never searched: set it in "
            "the cluster's environment instead",
        )
    if isinstance(raw, dict):
        if "choices" in raw:
            domain = domain_of(raw, "choice", path, err)
            for c in domain.choices:
                env_scalar(c, [*path, "choices"], err)
            if len({str(c) for c in domain.choices}) != len(domain.choices):  # 1 and "1": "1"
                raise err([*path, "choices"], f"duplicate choices in {raw['choices']}")
        else:
            domain = domain_of(raw, "int", path, err)
        if domain.default is not None and not domain.contains(domain.default):
            raise err([*path, "default"], f"default {domain.default!r} lies outside the domain")
        return domain
    return env_scalar(raw, path, err)


def env_scalar(v: Any, path: list[str | int], err: ErrorAt) -> str | int:
    """One value of an environment variable: a string without control characters, or an int."""
    if not isinstance(v, str | int) or isinstance(v, bool):
        raise err(path, f"a value is a string or integer, got {v!r}")
    if isinstance(v, str) and not v.isprintable():
        raise err(path, f"control characters (NUL, line breaks, ...) are refused, got {v!r}")
    return v
