"""Where a key is in a space file: its line, for error messages."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from autotune.errors import SpaceError
from autotune.space import yaml_reader


def line_map(root: yaml.Node | None) -> dict[tuple[str | int, ...], int]:
    """Key path -> 1-based line, for error messages. A node repeated by an alias is walked once."""
    out: dict[tuple[str | int, ...], int] = {}
    seen: set[int] = set()

    def walk(node: yaml.Node, path: tuple[str | int, ...]) -> None:
        out[path] = node.start_mark.line + 1
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    continue
                sub = (*path, k.value)
                walk(v, sub)
                out[sub] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i))

    if root is not None:
        walk(root, ())
    return out


def key_line(source: str, key: Sequence[str | int]) -> int | None:
    """The 1-based line of `key` (or of the nearest key above it) in the space file `source`,
    for an error found after loading (a workload's size); None where it cannot be read."""
    try:
        text = yaml_reader.read_text(Path(source), SpaceError, "space file")
        lines = line_map(yaml_reader.compose(text, source, SpaceError)[1])
    except (SpaceError, OSError):
        return None
    return next((lines[k] for n in range(len(key), 0, -1) if (k := tuple(key[:n])) in lines), None)
