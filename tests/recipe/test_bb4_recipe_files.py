"""bb4 F16: a recipe path that is a FIFO is refused before it is opened (a read would block
forever), and a recipe of a newer format is refused without naming a version it cannot know."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error

from autotune import __version__
from autotune.errors import RecipeError, ReproError
from autotune.recipe import Recipe
from autotune.repro.repro import load_space


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO; a thread opens it for writing whenever a reader waits (and closes it at once),
    so a reader that opens it sees an empty file instead of blocking the test forever."""
    path = tmp_path / "t_fifo.yaml"
    os.mkfifo(path)
    stop = threading.Event()

    def unblock() -> None:
        while not stop.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join(5)


def test_a_recipe_that_is_a_fifo_is_refused_before_it_is_opened(fifo: Path) -> None:
    with pytest.raises(RecipeError, match=r"t_fifo.yaml: not a regular file \(a FIFO\)"):
        Recipe.load(fifo)


def test_verify_and_migrate_refuse_a_fifo_recipe_in_one_line(fifo: Path) -> None:
    one_line_error(invoke("verify", fifo), f"{fifo}: not a regular file (a FIFO)")
    one_line_error(
        invoke("migrate", fifo, "-o", fifo.parent / "m"), f"{fifo}: not a regular file (a FIFO)"
    )
    assert not (fifo.parent / "m").exists()


def test_repro_refuses_a_fifo_as_space_or_recipe(fifo: Path) -> None:
    with pytest.raises(ReproError, match=r"not a regular file \(a FIFO\)"):
        load_space(fifo, [])


def test_a_newer_format_names_no_version_it_does_not_know(tmp_path: Path) -> None:
    path = tmp_path / "future.yaml"
    path.write_text(f"autotune_recipe: 99\nautotune_version: {__version__}\nname: x\n")
    with pytest.raises(RecipeError) as info:
        Recipe.load(path)
    message = str(info.value)
    assert "format 99" in message and "reads up to format 1" in message
    # The file's own autotune_version (here this one's) is not named as the newer autotune.
    assert f"newer autotune ({__version__})" not in message
    assert message.count(__version__) == 1
