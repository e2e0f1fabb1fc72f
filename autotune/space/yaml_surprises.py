"""Scalars YAML 1.1 reads as something other than what was written: `on`/`off`/`yes`/`no` as
booleans and a leading-zero integer (`012`) as an octal number. PyYAML follows YAML 1.1, so
`NCCL_DEBUG: off` arrives as False and `NCCL_NTHREADS: 012` as 10; the errors about such a value
say what YAML read and how to quote it, and a leading-zero integer is refused outright (it would
otherwise run silently as another number)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import yaml

from autotune.errors import SpaceError
from autotune.space import yaml_reader, yaml_walk

_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
#: An integer YAML 1.1 reads as octal: a leading 0 followed by more digits.
_OCTAL = re.compile(r"[-+]?0[0-7_]+")

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
        if word or (v.node.tag == _INT_TAG and _OCTAL.fullmatch(text)):
            out[v.path] = text
    return out


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


def first_octal(scalars: Mapping[Path, str]) -> tuple[Path, str] | None:
    """The first leading-zero integer of the file (its path and text), if any."""
    return next(((p, t) for p, t in scalars.items() if _OCTAL.fullmatch(t)), None)


def octal_message(text: str) -> str:
    value = int(text.replace("_", ""), 8)
    return (
        f"YAML reads {text} (a leading zero) as the octal number {value}: quote it ('{text}') "
        f"to keep it as written, or write {value} if that is meant"
    )


def bool_hint(scalars: Mapping[Path, str], path: Sequence[str | int]) -> str:
    """A hint for an error at `path` whose value YAML read as a boolean from `on`, `off`, `yes`
    or `no` (at `path` or in its list of choices), else ''."""
    key = tuple(path)
    for where, text in scalars.items():
        if _OCTAL.fullmatch(text):
            continue
        if where == key or (len(key) >= 2 and where[: len(key)] == key):
            meant = "true" if text.lower() in ("on", "yes") else "false"
            return f" (YAML reads unquoted `{text}` as {meant}: quote it, '{text}', for the word)"
    return ""
