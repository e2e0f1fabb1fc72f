"""`--set key.path=value`: one override applied to a space file's data before validation."""

from __future__ import annotations

from typing import Any

from autotune.errors import SpaceError, did_you_mean
from autotune.space import yaml_reader
from autotune.space.schema import TOP_KEYS


def apply_override(data: dict[str, Any], item: str, source: str) -> None:
    label = f"--set {yaml_reader.one_line(item, 200)}"
    if "=" not in item:
        raise SpaceError(f"{label}: expected key.path=value, e.g. --set knobs.lr=0.003")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise SpaceError(f"{label}: empty key")
    parts = key.split(".")
    if not all(parts):  # `knobs..lr`, `.lr`, `knobs.`: a slip, not a path
        raise SpaceError(f"{label}: an empty segment in '{key}': write key.path, e.g. knobs.lr")
    if parts[0] not in TOP_KEYS:
        raise SpaceError(
            f"{label}: unknown key '{parts[0]}'{did_you_mean(parts[0], TOP_KEYS)}; "
            f"top-level keys are {', '.join(TOP_KEYS)}"
        )
    value = yaml_reader.load(raw, f"{label}", SpaceError) if raw.strip() else ""
    node: Any = data
    for i, name in enumerate(parts):
        where = ".".join(parts[: i + 1])
        part: str | int = name
        if isinstance(node, list):
            part = _index(node, name, ".".join(parts[:i]), label, source)
        if i == len(parts) - 1:
            node[part] = value
            return
        nxt = node.get(part) if isinstance(node, dict) else node[part]
        if nxt is None:
            if parts[i + 1].isdigit():
                raise SpaceError(
                    f"{label}: '{where}' is not in {source}: set the list whole, e.g. "
                    f"--set '{where}=[...]'"
                )
            nxt = {}
            node[part] = nxt
        if not isinstance(nxt, dict | list):
            raise SpaceError(f"{label}: '{where}' is a value in {source}, not a section")
        node = nxt


def _index(items: list[Any], part: str, where: str, label: str, source: str) -> int:
    """The position `part` names in a list: an integer segment indexes a list that has
    that item (`objectives.0.metric`); anything else is refused, saying how to set it whole."""
    if not part.isdigit() or int(part) >= len(items):
        which = f"0 to {len(items) - 1}, e.g. {where}.0" if items else "none: it is empty"
        raise SpaceError(
            f"{label}: '{where}' is a list of {len(items)} item(s) in {source}: index an item "
            f"({which}) or set it whole, --set '{where}=[...]'"
        )
    return int(part)
