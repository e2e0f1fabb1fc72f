"""The one walk of a composed YAML tree: each node with its path of keys and indexes, for the
walks that map paths to lines (`yaml_lines`) and find surprising scalars (`yaml_surprises`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import yaml

Path = tuple[str | int, ...]


class Visit(NamedTuple):
    path: Path  # the keys and indexes from the root to `node`
    node: yaml.Node
    line: int  # 1-based line where `path` is written: a mapping value's key, else the node
    again: bool  # a node an alias repeats, walked at an earlier path (its children are not)


def walk(root: yaml.Node | None) -> Iterator[Visit]:
    """Each node under `root`, itself first, in document order. A value under a key that is not
    a scalar is passed over; a node repeated by an alias is yielded at each of its paths, and
    its children once (at the first)."""
    seen: set[int] = set()

    def visit(node: yaml.Node, path: Path, line: int) -> Iterator[Visit]:
        again = id(node) in seen
        yield Visit(path, node, line, again)
        if again:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    yield from visit(v, (*path, k.value), k.start_mark.line + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                yield from visit(v, (*path, i), v.start_mark.line + 1)

    if root is not None:
        yield from visit(root, (), root.start_mark.line + 1)
