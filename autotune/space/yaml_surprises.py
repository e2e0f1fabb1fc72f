"""Scalars YAML 1.1 reads as something other than what was written: `on`/`off`/`yes`/`no` as
booleans, a leading-zero integer (`012`) as an octal number and numbers joined by colons (`1:30`)
as a base-60 one. PyYAML follows YAML 1.1, so `NCCL_DEBUG: off` arrives as False,
`NCCL_NTHREADS: 012` as 10 and `steps: 1:30` as 90; the errors about such a value say what YAML
read and how to quote it, and a misread number is refused outright (it would otherwise run
silently as another number), in a space file, a `--set` value and a recipe alike."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import yaml

from autotune.errors import SpaceError
from autotune.space import yaml_reader, yaml_walk

_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
#: An integer YAML 1.1 reads as octal: a leading 0 followed by more digits.
_OCTAL = re.compile(r"[-+]?0[0-7_]+")
#: A number YAML 1.1 reads in base 60 (sexagesimal): digits joined by colons, `1:30` (90).
_BASE60 = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")

Path = yaml_walk.Path


def surprising_scalars(root: yaml.Node | None) -> dict[Path, str]:
    """Key path -> the text as written, for each scalar YAML read as something else: a boolean
    written other than true/false, an octal integer."""
    out: dict[Path, str] = {}
    for v in yaml_walk.walk(root):
        if v.again or not isinstance(v.node, yaml.ScalarNode):
            continue
        text = str(v.node.value)
        word = v.node.tag == _BOOL_TAG and text.lower() not in ("true", "false")
        number = v.node.tag in (_INT_TAG, _FLOAT_TAG) and _misread(text)
        if word or number:
            out[v.path] = text
    return out


def _misread(text: str) -> bool:
    """Whether YAML 1.1 reads the number `text` as another: octal, or base 60."""
    return bool(_OCTAL.fullmatch(text) or _BASE60.fullmatch(text))


def with_overrides(scalars: Mapping[Path, str], overrides: Sequence[str]) -> dict[Path, str]:
    """`scalars` of a file once `--set key.path=value` items replaced parts of it: what an item
    replaced is gone, and its value's own surprises are at its key's path, so that an error
    about `--set env.NCCL_DEBUG=off` says what YAML read, as the same line in the file would."""
    out = dict(scalars)
    for item in overrides:
        key, _, raw = item.partition("=")
        prefix = tuple(int(p) if p.isdigit() else p for p in key.strip().split("."))
        out = {p: t for p, t in out.items() if p[: len(prefix)] != prefix}
        root = yaml_reader.compose(raw, "--set", SpaceError)[1] if raw.strip() else None
        out.update({(*prefix, *p): t for p, t in surprising_scalars(root).items()})
    return out


def first_misread(scalars: Mapping[Path, str]) -> tuple[Path, str] | None:
    """The first number of the file YAML reads as another (its path and text), if any: a
    leading-zero integer (octal) or numbers joined by colons (base 60)."""
    return next(((p, t) for p, t in scalars.items() if _misread(t)), None)


def misread_message(text: str) -> str:
    """What YAML read for the misread number `text`, and how to write it."""
    if _OCTAL.fullmatch(text):
        how, value = "(a leading zero) as the octal number", int(text.replace("_", ""), 8)
    else:
        how, value = "(numbers joined by colons) as the base-60 number", yaml.safe_load(text)
    return (
        f"YAML reads {text} {how} {value}: quote it ('{text}') to keep it as written, or "
        f"write {value} if that is meant"
    )


def refuse_misread(root: yaml.Node | None, error: Callable[[Path, str], Exception]) -> None:
    """Raise `error(path, message)` for the first number in the YAML tree `root` that YAML
    reads as another (a recipe file's: `seed: 010` ran seed 8)."""
    found = first_misread(surprising_scalars(root))
    if found is not None:
        raise error(found[0], misread_message(found[1]))


def bool_hint(scalars: Mapping[Path, str], path: Sequence[str | int]) -> str:
    """A hint for an error at `path` whose value YAML read as a boolean from `on`, `off`, `yes`
    or `no` (at `path` or in its list of choices), else ''."""
    key = tuple(path)
    for where, text in scalars.items():
        if _misread(text):
            continue
        if where == key or (len(key) >= 2 and where[: len(key)] == key):
            meant = "true" if text.lower() in ("on", "yes") else "false"
            return f" (YAML reads unquoted `{text}` as {meant}: quote it, '{text}', for the word)"
    return ""
