"""Where a key is in a space file: its line, for error messages."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from autotune.errors import SpaceError
from autotune.space import yaml_reader, yaml_walk


def line_map(root: yaml.Node | None) -> dict[tuple[str | int, ...], int]:
    """Key path -> 1-based line, for error messages. A node repeated by an alias is walked once."""
    return {v.path: v.line for v in yaml_walk.walk(root)}


def key_line(source: str, key: Sequence[str | int]) -> int | None:
    """The 1-based line of `key` (or of the nearest key above it) in the space file `source`,
    for an error found after loading (a workload's size); None where it cannot be read."""
    try:
        text = yaml_reader.read_text(Path(source), SpaceError, "space file")
        lines = line_map(yaml_reader.compose(text, source, SpaceError)[1])
    except (SpaceError, OSError):
        return None
    return next((lines[k] for n in range(len(key), 0, -1) if (k := tuple(key[:n])) in lines), None)
