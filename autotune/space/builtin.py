"""The search spaces shipped with autotune, found by bare name (`gradclip`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from autotune import outfile
from autotune.errors import SpaceError, did_you_mean


def builtin_dir() -> Path:
    """Folder of the shipped search spaces (installed package, or the source checkout)."""
    try:
        path = Path(str(resources.files("autotune.search_spaces")))
        if path.is_dir():
            return path
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parent.parent.parent / "search_spaces"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.yaml"))


def find(ref: str | Path) -> Path:
    """A path that exists, else a built-in space by bare name (`gradclip` or `gradclip.yaml`).
    A path that is there but is not a regular file (a folder, a FIFO, a device, a link to one)
    is refused saying so, as a recipe file is (`Recipe.load`), before it is opened: a FIFO
    would block the read forever, and it is not missing."""
    path = Path(ref)
    if path.is_file():
        return path
    what = outfile.special(path)
    if what is not None:
        raise SpaceError(f"{ref}: not a regular file ({what}): not a space file")
    if path.parent == Path(".") and not path.exists():
        candidate = builtin_dir() / (path.name if path.suffix else f"{path.name}.yaml")
        if candidate.is_file():
            return candidate
        stem, names = path.stem, builtin_names()
        raise SpaceError(
            f"{ref}: no such file, and no built-in space '{stem}'{did_you_mean(stem, names)}"
            f"; built-in spaces: {', '.join(names)}"
        )
    raise SpaceError(f"{ref}: no such file")
