"""A recipe's knob, environment and probe values, checked by the space's rules: one value per
knob, named with the recipe file and the key path on one line (`autotune.recipe.file` reads them);
its environment warned of as a space's is (`env_problems`)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from autotune import __version__
from autotune import space as sp
from autotune.errors import RecipeEnvWarning, RecipeError, did_you_mean
from autotune.recipe.provenance import check_provenance
from autotune.recipe.recorded import is_steps, steps_text
from autotune.space import yaml_reader
from autotune.space.limits import MAX_STEPS


def error_at(source: str) -> Callable[[Any, str], RecipeError]:
    """Errors that name the recipe file and the key path, on one line (the space's rules)."""

    def err(path: Any, message: str) -> RecipeError:
        dotted = ".".join(yaml_reader.key_text(p) for p in path)
        return RecipeError(yaml_reader.one_line(f"{source}: {dotted}: {message}", None))

    return err


def check_knobs(raw: Any, source: str, at: Sequence[str] = ("knobs",)) -> dict[str, Any]:
    """Every knob by the space's rules, PyTorch's default for one not given (warned of); `at`:
    the key path of the mapping (`source.neighbours[1].knobs` for a Pareto neighbour's)."""
    where = ".".join(at)
    if not isinstance(raw, dict):
        raise RecipeError(f"{source}: {where}: must be a mapping of knob: value")
    err = error_at(source)
    out: dict[str, Any] = {}
    for name, value in raw.items():
        name = str(name)
        if name not in sp.KNOBS:
            raise err(
                [*at, name],
                f"unknown knob{did_you_mean(name, sp.KNOBS)} (this autotune {__version__} "
                f"knows: {', '.join(sp.KNOBS)}); was the recipe written by a newer autotune?",
            )
        if isinstance(value, dict | list):
            raise err([*at, name], "a recipe holds one value per knob, not a domain")
        out[name] = sp.check_value(sp.KNOBS[name], value, [*at, name], err)
    missing = [
        n
        for n, info in sp.KNOBS.items()
        if n not in out and info.default is None and n != "batch"  # batch: micro x accum
    ]
    if missing:
        raise RecipeError(f"{source}: {where}: missing {', '.join(missing)} (no default to assume)")
    assumed = [n for n, info in sp.KNOBS.items() if n not in out and info.default is not None]
    if assumed:  # an exported recipe lists every knob: one missing was deleted, or is newer
        shown = ", ".join(f"{n} ({sp.KNOBS[n].default!r})" for n in assumed[:6])
        more = f" and {len(assumed) - 6} more" if len(assumed) > 6 else ""
        print(
            f"autotune: warning: {source}: {where}: {shown}{more} missing: PyTorch's default "
            "used (an exported recipe lists every knob: was this one edited?)",
            file=sys.stderr,
        )
    for name, info in sp.KNOBS.items():
        out.setdefault(name, info.default)
    return out


def check_env(raw: Any, source: str, at: Sequence[str] = ("env",)) -> dict[str, str]:
    """Environment knobs by the space's rules (names, prefixes, values), one value each."""
    if not isinstance(raw, dict):
        raise RecipeError(f"{source}: {'.'.join(at)}: must be a mapping of VARIABLE: value")
    err = error_at(source)
    out: dict[str, str] = {}
    for name, value in raw.items():
        name = str(name)
        if isinstance(value, dict | list) or value is None:
            raise err([*at, name], f"must be one value, got {value!r}")
        out[name] = str(sp.env_value(name, value, [*at, name], err))
    return out


def env_problems(env: Mapping[str, str], source: str) -> list[str]:
    """One line per variable of a recipe's `env:` that a space's `env:` would be warned of
    (`space.env_mapping_warnings`: a misspelt NCCL/RCCL name, a value not among an enumerated
    variable's), naming the recipe file `source`: the library ignores a name it does not know,
    so a run would not have the setting the recipe makes. A warning: the recipe still loads."""
    return [f"{source}: {line}" for line in sp.env_mapping_warnings(env)]


def warn_of_env(env: Mapping[str, str], source: str, stacklevel: int = 1) -> None:
    """Each of `env_problems` as a `RecipeEnvWarning` (Python's `warnings`), for the caller
    `stacklevel` frames up from the one calling this (`Recipe.load`: the user's code)."""
    for line in env_problems(env, source):
        warnings.warn(line, RecipeEnvWarning, stacklevel=stacklevel + 1)


@contextmanager
def env_unwarned() -> Iterator[None]:
    """Within it `Recipe.load` does not warn of the env: for a command that says it on stderr
    itself, once (`preflight.warn_of_env`), or loads a file it was given again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecipeEnvWarning)
        yield


NEIGHBOUR_KEYS = ("trial", "knobs", "env", "values", "front")


def check_source(raw: Any, source: str) -> dict[str, Any]:
    """The recipe's `source` section, what `autotune migrate` computes with checked
    (`provenance.check_provenance`), its `neighbours` (`check_neighbours`) when it has them: a
    recipe from before export recorded them loads unchanged."""
    out = check_provenance(dict(raw or {}), error_at(source))  # compute, searched, verdict
    if "neighbours" in out:
        out["neighbours"] = check_neighbours(out["neighbours"], source)
    return out


def check_neighbours(raw: Any, source: str) -> list[dict[str, Any]]:
    """`source.neighbours`: the study's other candidates on the Pareto front beside the pick
    (`autotune migrate` re-runs them when the recipe does not hold), each a mapping of its
    `trial` number, its `knobs` (checked as the recipe's own are), its `env`, its objective
    `values` and the `front` it is on (`every objective`, or `without throughput`: the front of
    the study's other objectives); a malformed one is refused naming the file and key
    (`source.neighbours[1].knobs`)."""
    err = error_at(source)
    if not isinstance(raw, list):
        raise err(["source", "neighbours"], f"must be a list, got {type(raw).__name__}")
    out = []
    for i, entry in enumerate(raw):
        at = ["source", f"neighbours[{i}]"]
        if not isinstance(entry, dict):
            raise err(at, f"must be a mapping of {', '.join(NEIGHBOUR_KEYS)}")
        for key in entry:
            if key not in NEIGHBOUR_KEYS:
                raise err([*at, str(key)], f"unknown key{did_you_mean(str(key), NEIGHBOUR_KEYS)}")
        trial = entry.get("trial")
        if not isinstance(trial, int) or isinstance(trial, bool) or trial < 0:
            raise err([*at, "trial"], f"must be a trial number (0, 1, ...), got {trial!r}")
        if "knobs" not in entry:
            raise err([*at, "knobs"], "required (the neighbour's knobs, every one resolved)")
        values = entry.get("values") or {}
        if not isinstance(values, dict) or not all(
            v is None or (isinstance(v, int | float) and not isinstance(v, bool))
            for v in values.values()
        ):
            raise err([*at, "values"], "must be a mapping of objective: number")
        on = entry.get("front")
        if on is not None and not (isinstance(on, str) and on.isprintable() and len(on) <= 200):
            raise err([*at, "front"], f"must be a line of text (the front it is on), got {on!r}")
        out.append(
            {
                "trial": trial,
                "knobs": check_knobs(entry["knobs"], source, [*at, "knobs"]),
                "env": check_env(entry.get("env") or {}, source, [*at, "env"]),
                "values": {str(k): v for k, v in values.items()},
                **({"front": on} if on is not None else {}),
            }
        )
    return out


#: Keys at the top of a recipe that are probe settings in a space.
_LAYOUT = ("precision", "micro_batch", "world_size")


def check_probe(data: dict[str, Any], source: str) -> sp.ProbeSettings:
    """The recipe's probe section and batch layout, by the space's rules for `probe:`."""
    probe = data.get("probe") or {}
    if not isinstance(probe, dict):
        raise error_at(source)(["probe"], f"must be a mapping, got {type(probe).__name__}")
    at = error_at(source)

    def err(path: Any, message: str) -> RecipeError:  # a layout key is named where it stands
        path = list(path)
        return at(path[1:] if path[1:2] and path[1] in _LAYOUT else path, message)

    merged = {**probe, **{k: data[k] for k in _LAYOUT if k in data}}
    merged.pop("schedule_steps", None)  # the recipe's own key (`probe_record`)
    settings: sp.ProbeSettings = sp.validate_section(sp.ProbeSettings, merged, ["probe"], err)
    return settings


def probe_record(layout: sp.ProbeSettings, data: dict[str, Any], source: str) -> dict[str, Any]:
    """The probe section as the recipe keeps it: the keys it gives, checked, and the LR
    schedule's length (probe.schedule_steps, at probe.batch) when it gives one."""
    raw = data.get("probe") or {}
    out = {k: v for k, v in layout.model_dump().items() if k in raw}
    if "schedule_steps" in raw:
        value = raw["schedule_steps"]
        if not is_steps(value, layout.steps):  # bounded as probe.steps is
            raise error_at(source)(
                ["probe", "schedule_steps"],
                f"the LR schedule's length is a whole number of steps, at least probe.steps "
                f"({layout.steps}) and at most {MAX_STEPS:,}, got {steps_text(value)}",
            )
        out["schedule_steps"] = value
    return out
