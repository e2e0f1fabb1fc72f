"""Reading a space file: the bounded YAML reader, `--set` overrides, and validation whose errors
say `file: key.path (line N): message` with a did-you-mean."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from autotune.errors import SpaceError, did_you_mean
from autotune.knobs import KNOBS
from autotune.probe.config import steps_at_batch
from autotune.probe.workload import names_file
from autotune.space import yaml_reader, yaml_surprises
from autotune.space.builtin import find
from autotune.space.limits import MAX_PROBE_TIMEOUT_S
from autotune.space.overrides import apply_override
from autotune.space.scaling import check_scaling
from autotune.space.schema import (
    AUTO_CLIP_NORM,
    DEFAULT_CONSTRAINTS,
    DEFAULT_OBJECTIVES,
    TOP_KEYS,
    Budget,
    Constraint,
    Domain,
    KnobValue,
    Objective,
    ProbeSettings,
    RungSettings,
    SamplerSettings,
    Space,
    VerifySettings,
    WorkloadRef,
    baseline_accum,
)
from autotune.space.values import ErrorAt, env_value, knob_value
from autotune.space.yaml_lines import line_map


def load(ref: str | Path, overrides: Sequence[str] = ()) -> Space:
    """Read, override (`key.path=value`) and validate a space file."""
    path = find(ref)
    text = yaml_reader.read_text(path, SpaceError, "space file")
    space = loads(text, source=str(path), overrides=overrides)
    from_set = any(o.split("=", 1)[0].strip() in ("workload", "workload.name") for o in overrides)
    space = anchor_workload(space, Path.cwd() if from_set else path.parent)
    script_set = any(o.split("=", 1)[0].strip() == "workload.script" for o in overrides)
    return anchor_script(space, Path.cwd() if script_set else path.parent, str(path))


def anchor_script(space: Space, base: Path, source: str) -> Space:
    """The space with its workload script made absolute against `base` (the space file's
    folder; the current one for a --set); a script that is not a file fails here, before any
    trial, naming the path."""
    script = space.workload.script
    if script is None:
        return space
    absolute = (base / Path(script).expanduser()).resolve()
    if not absolute.is_file():
        what = "a folder, not a script" if absolute.is_dir() else "no such file"
        raise SpaceError(f"{source}: workload.script: {absolute}: {what}")
    return replace(space, workload=space.workload.model_copy(update={"script": str(absolute)}))


def anchor_workload(space: Space, base: Path) -> Space:
    """The space with a relative workload file (`rel/file.py:attr`) made absolute against `base`:
    the space file's folder (the current one for a --set), so that a study resumed elsewhere, a
    verification and a recipe find the same file."""
    ref = space.workload.name
    where, _, attr = ref.rpartition(":")
    if not names_file(ref) or Path(where).expanduser().is_absolute():
        return space
    absolute = f"{(base / where).resolve()}:{attr}"
    return replace(space, workload=space.workload.model_copy(update={"name": absolute}))


def loads(
    text: str, *, source: str = "<string>", overrides: Sequence[str] = (), stored: bool = False
) -> Space:
    """The space of YAML `text` (`source` names it in errors). `stored`: a study's own copy of
    its space, as it ran: what a space file may no longer say is not refused there (a
    micro-batch beside a batch, which the batch overrode), so an older study still opens."""
    data, root = yaml_reader.compose(text, source, SpaceError)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpaceError(f"{source}: the top level must be a mapping of keys, got {_tname(data)}")
    lines = line_map(root)
    scalars = yaml_surprises.surprising_scalars(root)
    err = _Err(source, lines, {o.split("=", 1)[0].strip() for o in overrides}, scalars)
    err.stored = stored
    misread = yaml_surprises.first_misread(scalars)
    if misread is not None:  # refused before --set: it is the file's text that misleads
        raise err(misread[0], yaml_surprises.misread_message(misread[1]))
    for item in overrides:
        apply_override(data, item, source)
    err.scalars = yaml_surprises.with_overrides(scalars, overrides)  # `--set env.X=off` too
    misread = yaml_surprises.first_misread(err.scalars)  # a --set one: the file's were refused
    if misread is not None:
        raise err(misread[0], yaml_surprises.misread_message(misread[1]))
    return _build(data, err)


def _tname(v: Any) -> str:
    return type(v).__name__ if v is not None else "nothing"


class _Err:
    """Builds `file: key.path (line N): message` errors."""

    def __init__(
        self,
        source: str,
        lines: Mapping[tuple[str | int, ...], int],
        overridden: set[str],
        scalars: Mapping[tuple[str | int, ...], str],
    ):
        self.source, self.lines, self.overridden = source, lines, overridden
        self.scalars = scalars  # `off`, `012`: what YAML read as something else
        self.stored = False  # a study's own copy of its space (`loads(stored=True)`)

    def __call__(self, path: Sequence[str | int], message: str) -> SpaceError:
        dotted = ".".join(yaml_reader.key_text(p) for p in path)
        where = ""
        if any(
            dotted == o or dotted.startswith(o + ".") or o.startswith(dotted + ".")
            for o in self.overridden
        ):
            where = " (from --set)"
        else:
            for n in range(len(path), 0, -1):
                line = self.lines.get(tuple(path[:n]))
                if line is not None:
                    where = f" (line {line})"
                    break
        message += yaml_surprises.bool_hint(self.scalars, path)
        text = f"{self.source}: {dotted or '<top>'}{where}: {message}"
        return SpaceError(yaml_reader.one_line(text, None))


def _build(data: dict[str, Any], err: _Err) -> Space:
    source = err.source
    for key in data:
        if key not in TOP_KEYS:
            raise err(
                [str(key)],
                f"unknown key{did_you_mean(str(key), TOP_KEYS)}; allowed: {', '.join(TOP_KEYS)}",
            )
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise err(["name"], f"must be a string, got {_tname(name)} {name!r}: quote it ('{name}')")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
        raise err(
            ["name"],
            "required: a study name of at most 100 letters, digits, '_', '-', '.', starting with "
            f"a letter or digit (got {name!r})",
        )
    description = _given(data, "description", "")
    if not isinstance(description, str):
        raise err(["description"], f"must be text, got {_tname(description)}")
    workload_raw = data.get("workload")
    if isinstance(workload_raw, str):
        workload_raw = {"name": workload_raw}
    if workload_raw is None:
        raise err(["workload"], "required: e.g. `workload: {name: tiny_gpt, size: tiny}`")
    workload = validate_section(WorkloadRef, workload_raw, ["workload"], err)
    probe = _section(ProbeSettings, data, "probe", err)
    budget = _section(Budget, data, "budget", err)
    sampler = _section(SamplerSettings, data, "sampler", err)
    verify = _section(VerifySettings, data, "verify", err)
    rungs = _section(RungSettings, data, "rungs", err)
    if budget.target_steps is not None and budget.target_steps < probe.steps:
        raise err(
            ["budget", "target_steps"],
            f"{budget.target_steps} is shorter than probe.steps ({probe.steps}): the target is "
            "the length you train, at least the probe's",
        )
    _check_timeout(probe, budget, err)
    objectives = tuple(_list(Objective, data, "objectives", DEFAULT_OBJECTIVES, err))
    if not objectives:
        raise err(["objectives"], "at least one objective is needed")
    metrics = [o.metric for o in objectives]
    if len(set(metrics)) != len(metrics):
        raise err(["objectives"], f"each metric at most once, got {metrics}")
    constraints = tuple(_list(Constraint, data, "constraints", DEFAULT_CONSTRAINTS, err))
    check_scaling(probe, objectives, constraints, err)

    knobs = _knobs(data, err)
    env = _env(data, err)
    if sampler.name == "grid":
        _check_grid(knobs, env, sampler.grid_points, err)
    _check_batch(probe, knobs, err)
    if probe.batch is None:  # written out: a dumped space reloads with the same batch
        probe = probe.model_copy(update={"batch": probe.micro_batch})
    return Space(
        name=name,
        description=description,
        workload=workload,
        probe=probe,
        objectives=objectives,
        constraints=constraints,
        budget=budget,
        sampler=sampler,
        verify=verify,
        rungs=rungs,
        knobs=knobs,
        env=env,
        source=source,
    )


def _check_timeout(probe: ProbeSettings, budget: Budget, err: _Err) -> None:
    """A rung probe's time limit is budget.trial_timeout_s scaled by its steps: at the target
    it must still be a wait Python's timers can make (else every rung probe overflows)."""
    steps = budget.target_steps or probe.steps
    longest = budget.trial_timeout_s * steps / probe.steps
    if longest > MAX_PROBE_TIMEOUT_S:
        raise err(
            ["budget", "trial_timeout_s"],
            f"{budget.trial_timeout_s:g} s per screen probe is {longest:g} s for a probe at "
            f"target_steps {steps} (scaled by its steps from probe.steps {probe.steps}), more "
            f"than any probe may be given ({MAX_PROBE_TIMEOUT_S:g} s): lower trial_timeout_s "
            "or target_steps",
        )


#: What to write instead of a section that is not a mapping (`verify: false`, `rungs: false`).
_INSTEAD = {
    "verify": "; `verify: {top_k: 0}` turns verification off",
    "rungs": "; a study has rungs only with budget.target_steps: leave that out for none",
}


def _given(data: dict[str, Any], key: str, default: Any) -> Any:
    """A top-level key's value, `default` where the file leaves it out or gives it nothing
    (`verify:` alone). Any other value stays as written, to be checked: `verify: false`,
    `probe: []` or `env: ""` are refused, not read as the defaults."""
    raw = data.get(key)
    return default if raw is None else raw


def _section(cls: type[BaseModel], data: dict[str, Any], key: str, err: _Err) -> Any:
    raw = _given(data, key, {})
    if not isinstance(raw, dict):
        raise err([key], f"must be a mapping, got {_tname(raw)}{_INSTEAD.get(key, '')}")
    return validate_section(cls, raw, [key], err)


def _knobs(data: dict[str, Any], err: _Err) -> dict[str, KnobValue]:
    knobs_raw = _given(data, "knobs", {})
    if not isinstance(knobs_raw, dict):
        raise err(["knobs"], f"must be a mapping of knob: value-or-domain, got {_tname(knobs_raw)}")
    knobs: dict[str, KnobValue] = {}
    for key, raw in knobs_raw.items():
        key = str(key)
        if key not in KNOBS:
            hint = did_you_mean(key, KNOBS)
            if key.isupper():
                hint += "; environment variables go under `env:`"
            raise err(["knobs", key], f"unknown knob{hint}; known knobs: {', '.join(KNOBS)}")
        if key == "clip_norm" and raw == "auto":  # seeded from the baseline's gradient norms
            knobs[key] = AUTO_CLIP_NORM
            continue
        knobs[key] = knob_value(KNOBS[key], raw, ["knobs", key], err)
    _check_clip_mode(knobs, err)
    return knobs


def _check_clip_mode(knobs: Mapping[str, KnobValue], err: _Err) -> None:
    """clip_mode (global or per_layer) belongs to the norm policy: per_layer with a clip_policy
    that never picks norm would silently mean nothing (agc is unit-wise, zclip and autoclip
    act on the total norm)."""
    policy = knobs.get("clip_policy", "norm")
    mode = knobs.get("clip_mode")
    policies = policy.choices if isinstance(policy, Domain) else (policy,)
    modes = mode.choices if isinstance(mode, Domain) else (mode,)
    if "per_layer" in modes and "norm" not in policies:
        raise err(
            ["knobs", "clip_mode"],
            f"per_layer is the norm policy's mode, and clip_policy {list(policies)} never picks "
            "norm: agc clips each unit on its own, zclip and autoclip clip the total norm",
        )


def _env(data: dict[str, Any], err: _Err) -> dict[str, KnobValue]:
    env_raw = _given(data, "env", {})
    if not isinstance(env_raw, dict):
        raise err(["env"], f"must be a mapping of VARIABLE: value-or-domain, got {_tname(env_raw)}")
    return {
        str(key): env_value(str(key), raw, ["env", str(key)], err) for key, raw in env_raw.items()
    }


def _check_grid(
    knobs: Mapping[str, KnobValue], env: Mapping[str, KnobValue], points: int, err: _Err
) -> None:
    """The grid sampler needs at least two points for a float range without a step, and a
    range it knows when it starts (`clip_norm: auto` is seeded later)."""
    auto = knobs.get("clip_norm")
    if isinstance(auto, Domain) and auto.auto:
        raise err(["knobs", "clip_norm"], "auto needs tpe, nsga2 or random: a grid is fixed first")
    for knob, value in {**knobs, **env}.items():
        sec = "env" if knob in env else "knobs"
        if (
            isinstance(value, Domain)
            and value.step is None
            and not value.is_choice
            and KNOBS.get(knob, KNOBS["lr"]).kind == "float"
            and points < 2
        ):
            raise err([sec, knob], "grid needs sampler.grid_points >= 2 for a float range")


def accum_values(value: KnobValue | None) -> list[int]:
    """Every value knobs.accum_steps can take (1 when absent)."""
    return int_values(value, 1)


def int_values(value: KnobValue | None, absent: int) -> list[int]:
    """Every value an int knob can take (`absent` when the space leaves it out)."""
    if value is None:
        return [absent]
    if not isinstance(value, Domain):
        return [int(value)]
    if value.is_choice:
        return [int(c) for c in value.choices]
    assert value.low is not None and value.high is not None
    return list(range(int(value.low), int(value.high) + 1, int(value.step or 1)))


def _check_batch(probe: ProbeSettings, knobs: Mapping[str, KnobValue], err: ErrorAt) -> None:
    """Every batch that runs divides by the accum_steps it runs with: every knobs.batch value by
    every accum_steps, probe.batch by those it runs with (`reference_accums`); a micro_batch
    only where accumulation is 1; the shortest probe (probe.steps at the largest batch) has
    10 steps."""
    accums = accum_values(knobs.get("accum_steps"))
    if probe.batch is None and "micro_batch" in probe.model_fields_set and accums != [1]:
        raise err(
            ["probe", "micro_batch"],
            "the micro-batch is derived now (probe.batch / accum_steps): write probe.batch",
        )
    _check_micro_and_batch(probe, accums, err)
    what = "probe.batch" if probe.batch is not None else "probe.batch (default 16)"
    for a in reference_accums(knobs):
        if a < 1 or probe.samples_per_step % a:
            raise err(
                ["probe", "batch"],
                f"{what} {probe.samples_per_step} is not divisible by knobs.accum_steps value {a}",
            )
    if "batch" in knobs:
        _check_batch_knob(probe, knobs["batch"], accums, err)


def _check_micro_and_batch(probe: ProbeSettings, accums: Sequence[int], err: ErrorAt) -> None:
    """probe.micro_batch next to probe.batch must agree with it (micro_batch x the fixed
    accum_steps = batch): the batch wins, so a micro-batch that says otherwise would be silently
    ignored. 16, the default, is what a written-out space (`dump`) carries next to its batch;
    a batch given by --set over a file's micro-batch replaces it."""
    micro, batch = probe.micro_batch, probe.batch
    if batch is None or "micro_batch" not in probe.model_fields_set or micro == 16:
        return
    if getattr(err, "stored", False):
        return  # a study's copy: as it ran (the batch won)
    given: set[str] = getattr(err, "overridden", set())  # the keys --set gave
    if given & {"probe.batch", "probe"} and "probe.micro_batch" not in given:
        return  # `--set probe.batch=N` over a file's micro_batch: the command line's batch
    if len(accums) == 1 and micro * accums[0] == batch:
        return
    accum = f"accum_steps {accums[0]}" if len(accums) == 1 else f"accum_steps {accums}"
    raise err(
        ["probe", "micro_batch"],
        f"{micro} conflicts with probe.batch {batch} (at {accum} the micro-batch is "
        f"batch / accum_steps): give one, probe.batch (samples per optimizer step)",
    )


def reference_accums(knobs: Mapping[str, KnobValue]) -> list[int]:
    """The accum_steps values probe.batch runs with. Without a batch knob it is every trial's
    batch: all of them. With a searched batch it is the reference the lengths count at and runs
    only in the baseline, whose searched knobs are PyTorch's defaults: the fixed accum_steps,
    else 1, or the smallest searched value when 1 is not one (`Space.baseline_knobs`; where the
    reference is inside the batch domain, it is one of the values the batch knob's check
    covers). With a fixed batch it never runs: none."""
    batch = knobs.get("batch")
    if batch is None:
        return accum_values(knobs.get("accum_steps"))
    if not isinstance(batch, Domain):
        return []
    accum = knobs.get("accum_steps")
    if isinstance(accum, Domain):
        return [baseline_accum(accum)]
    return accum_values(accum)


def _check_batch_knob(
    probe: ProbeSettings, value: KnobValue, accums: Sequence[int], err: ErrorAt
) -> None:
    batches = int_values(value, probe.samples_per_step)
    for b in batches:
        bad = next((a for a in accums if b % a), None)
        if bad is not None:
            raise err(
                ["knobs", "batch"],
                f"batch {b} is not divisible by knobs.accum_steps value {bad}: every batch "
                "must split into accum_steps equal micro-batches",
            )
    ref, largest = probe.samples_per_step, max(batches)
    shortest = steps_at_batch(probe.steps, ref, largest)
    if shortest < 10:
        need = math.ceil(10 * largest / ref)
        raise err(
            ["knobs", "batch"],
            f"at batch {largest} the probe runs {shortest} optimizer steps (probe.steps "
            f"{probe.steps} count at probe.batch {ref}: equal samples); at least 10 are needed: "
            f"raise probe.steps to {need} or lower the largest batch",
        )


def validate_section(cls: type[BaseModel], raw: Any, path: list[str | int], err: ErrorAt) -> Any:
    if not isinstance(raw, dict):
        raise err(path, f"must be a mapping, got {_tname(raw)}")
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        # An unknown key first: a misspelt required key (`directon`) is also a missing one, and
        # the typo is what to fix.
        errors = e.errors()
        first = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
        loc = [*path, *first["loc"]]
        if first["type"] == "extra_forbidden":
            key = str(first["loc"][-1])
            msg = f"unknown key{did_you_mean(key, cls.model_fields)}; allowed: " + ", ".join(
                _fields(cls, first["loc"][:-1])
            )
        else:
            if first["type"] == "value_error":  # our own validators say what they got
                msg = str(first["msg"]).removeprefix("Value error, ")
            else:
                msg = f"{first['msg']} (got {first.get('input')!r})" + _as_text_hint(first)
        raise err(loc, msg) from None


def _as_text_hint(error: Mapping[str, Any]) -> str:
    """For an integer written in exponent form (`steps: 1e9`): YAML 1.1 reads a number with an
    exponent but no dot as text, which no integer field takes; the value to write instead."""
    given = error.get("input")
    if error.get("type") != "int_parsing" or not isinstance(given, str):
        return ""
    try:
        value = float(given)
    except ValueError:
        return ""
    if not math.isfinite(value) or value != int(value):
        return ""
    return f": YAML reads {given} as text; write the number out ({int(value)})"


def _fields(cls: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    model: Any = cls
    for part in loc:
        ann = model.model_fields[str(part)].annotation
        model = ann
    return list(model.model_fields) if hasattr(model, "model_fields") else []


def _list(
    cls: type[BaseModel], data: dict[str, Any], key: str, default: Iterable[Any], err: _Err
) -> list[Any]:
    raw = data.get(key)
    if raw is None:
        return list(default)
    if not isinstance(raw, list):
        raise err([key], f"must be a list, got {_tname(raw)}")
    return [validate_section(cls, item, [key, i], err) for i, item in enumerate(raw)]
