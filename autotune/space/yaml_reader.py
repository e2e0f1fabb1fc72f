"""Reading a YAML file that may come from anywhere: the one reader of space and recipe files.

A space or a recipe is a few KB. A file from elsewhere may be hostile: an alias bomb ("billion
laughs") that expands to 10^9 nodes, an alias to its own ancestor (a recursive structure that
every later walk follows forever), millions of items, or bytes that are not UTF-8. This reader
refuses all of them with one line, in well under a second, before anything walks the data:

- the file holds at most `MAX_BYTES` bytes and is UTF-8 (the byte of the first bad sequence is
  named);
- composition counts nodes as they are made, an alias counting as the whole subtree it repeats,
  and stops at `MAX_NODES`; it stops at `MAX_DEPTH` levels of nesting; an alias to a node that
  is still being composed (recursion) is refused;
- a key repeated in one mapping (a copy-paste slip: YAML keeps the last, silently) is refused,
  naming its key path and both lines. Keys merged in with `<<` may be overridden, as YAML says.

The composer is PyYAML's own with those checks added, over libyaml's parser when PyYAML has it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from autotune.errors import AutotuneError

MAX_BYTES = 1 << 20  # 1 MiB: a space or a recipe is a few KB
MAX_NODES = 20_000  # scalars, lists and mappings, an alias counting as what it repeats
MAX_DEPTH = 64  # levels of nesting


class LimitError(yaml.YAMLError):
    """The document breaks one of this module's limits."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping holds the same key twice (the message: `key.path (line N): ...`)."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _BoundedComposer(Composer):
    """PyYAML's composer, counting what it builds (aliases expanded) and how deep it nests."""

    check_event: Callable[..., bool]  # the parser's
    peek_event: Callable[[], Any]
    construct_object: Callable[..., Any]  # the constructor's (a key as the mapping holds it)

    def _init_bounds(self) -> None:
        self._made = 0  # nodes composed so far, an alias counting as its anchor's subtree
        self._depth = 0
        self._open: set[str] = set()  # anchors whose node is still being composed
        self._size: dict[str, int] = {}  # anchor -> nodes in its subtree (aliases expanded)
        self._path: list[str | int] = []  # the key path of the node being composed

    def _count(self, n: int) -> None:
        self._made += n
        if self._made > MAX_NODES:
            raise LimitError(
                f"more than {MAX_NODES} nodes (aliases counted as what they repeat): "
                "a space or recipe file is far smaller"
            )

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            anchor = event.anchor
            if anchor in self._open:
                raise LimitError(
                    f"alias *{anchor} (line {event.start_mark.line + 1}) refers to a node that "
                    "contains it: recursive structures are refused"
                )
            self._count(self._size.get(anchor, 1))
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise LimitError(f"nested more than {MAX_DEPTH} levels deep (line {mark.line + 1})")
        self._count(1)
        anchor = self.peek_event().anchor
        before = self._made
        if anchor is not None:
            self._open.add(anchor)
        step = _step(parent, index)
        if step is not None:
            self._path.append(step)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if step is not None:
                self._path.pop()
            if anchor is not None:
                self._open.discard(anchor)
        if anchor is not None:
            self._size[anchor] = self._made - before + 1
        return node

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        first: dict[Any, int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                continue  # a mapping or list as a key is refused when constructed
            same = self._key_of(key)
            line = key.start_mark.line + 1
            if same in first:
                where = ".".join(key_text(p) for p in (*self._path, key.value))
                raise DuplicateKeyError(
                    f"{where} (line {line}): duplicate key (also at line {first[same]}); a key "
                    "may appear once in a mapping"
                )
            first[same] = line
        return node

    def _key_of(self, key: yaml.ScalarNode) -> Any:
        """The key as the mapping will hold it (`true` and `True`, `1` and `1.0` are one key)."""
        try:
            value = self.construct_object(key)
            hash(value)
        except Exception:  # a scalar Python cannot hold: refused when constructed
            return (key.tag, key.value)
        return value


def _step(parent: Any, index: Any) -> str | int | None:
    """The key path's step to a node composed under `parent`: its key (a mapping's value), its
    position (a list's item); None for a mapping's key or the document's root."""
    if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.ScalarNode):
        return str(index.value)
    if isinstance(parent, yaml.SequenceNode) and isinstance(index, int):
        return index
    return None


class _Bounded(_BoundedComposer, SafeConstructor, Resolver):
    """The part of yaml.SafeLoader after parsing, with the limits above."""

    def _init_rest(self) -> None:
        _BoundedComposer.__init__(self)
        self._init_bounds()
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


class PyBoundedLoader(Reader, Scanner, Parser, _Bounded):
    """Pure-Python parsing (PyYAML without libyaml)."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        self._init_rest()


BoundedLoader: type[_Bounded] = PyBoundedLoader
if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class CBoundedLoader(_Bounded, CParser):
        """libyaml's parser (fast); our composer comes first, so libyaml's is not used."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            self._init_rest()

    BoundedLoader = CBoundedLoader


def read_text(path: Path, error: type[AutotuneError], what: str = "file") -> str:
    """The file's text: at most MAX_BYTES bytes of UTF-8, else `error` naming the file."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise error(
            f"{path}: larger than {MAX_BYTES // 1024} KiB: refused (a space or recipe file is a "
            "few KB)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not valid UTF-8 at byte {e.start}") from None


def compose(text: str, source: str, error: type[AutotuneError]) -> tuple[Any, yaml.Node | None]:
    """Parse `text` within the limits: (the data, its root node for line numbers)."""
    if len(text) > MAX_BYTES:
        raise error(f"{one_line(source)}: longer than {MAX_BYTES // 1024} KiB: refused")
    loader: Any = BoundedLoader(text)  # type: ignore[call-arg]
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except LimitError as e:
        raise error(one_line(f"{source}: refused: {e}", None)) from None
    except DuplicateKeyError as e:
        raise error(one_line(f"{source}: {e}", None)) from None
    except (yaml.YAMLError, ValueError, OverflowError) as e:
        # ValueError/OverflowError: a scalar Python cannot hold (an int of 5000 digits, 2020-13-45)
        raise error(one_line(f"{source}: malformed YAML{_where(e)}: {_problem(e)}", None)) from None
    finally:
        loader.dispose()
    return data, node


def load(text: str, source: str, error: type[AutotuneError]) -> Any:
    """The data of `text` (see `compose`)."""
    return compose(text, source, error)[0]


def _where(e: Exception) -> str:
    mark = getattr(e, "problem_mark", None)
    if mark is None:
        return ""
    return f" (line {mark.line + 1}, column {mark.column + 1})"


def _problem(e: Exception) -> str:
    if isinstance(e, yaml.MarkedYAMLError) and e.problem:
        text = e.problem
    elif isinstance(e, yaml.reader.ReaderError):
        text = f"{e.reason} at character {e.position}"
    else:
        text = str(e) or type(e).__name__
    return one_line(text)


def one_line(text: str, limit: int | None = 300) -> str:
    """`text` on one line (line breaks and other unprintable characters a space), at most
    `limit` characters (None: no limit)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if limit is None or len(flat) <= limit else flat[: limit - 3] + "..."


def key_text(key: object) -> str:
    """A key of a path in a message: as it is when printable and short, else its repr."""
    text = str(key)
    if text.isprintable() and len(text) <= 80:
        return text
    return one_line(repr(text), 80)
