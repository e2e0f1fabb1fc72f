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
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise SpaceError(f"{label}: empty key")
    if parts[0] not in TOP_KEYS:
        raise SpaceError(
            f"{label}: unknown key '{parts[0]}'{did_you_mean(parts[0], TOP_KEYS)}; "
            f"top-level keys are {', '.join(TOP_KEYS)}"
        )
    value = yaml_reader.load(raw, f"{label}", SpaceError) if raw.strip() else ""
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part) if isinstance(node, dict) else None
        if nxt is None:
            nxt = {}
            node[part] = nxt
        if not isinstance(nxt, dict):
            where = ".".join(parts[: i + 1])
            raise SpaceError(f"{label}: '{where}' is a value in {source}, not a section")
        node = nxt
    node[parts[-1]] = value
