"""The tracking store's cheap check before anything is made: a server or database that answers
passes, and a file store under a file is refused naming it. Real sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.errors import TrackingError
from autotune.tracking.connection import check_uri


@pytest.fixture
def port() -> Iterator[int]:
    with socket.socket() as s:  # something answering on a loopback port
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_database_host_that_answers_passes(port: int) -> None:
    check_uri(f"postgresql://u:p@127.0.0.1:{port}/db")
    check_uri(f"mysql+pymysql://u@127.0.0.1:{port}/db")


def test_stores_on_files_are_refused_naming_what_is_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    for uri in (f"sqlite:///{tmp_path}/afile/m.db", (tmp_path / "afile" / "mlruns").as_uri()):
        with pytest.raises(TrackingError, match="afile is not a folder"):
            check_uri(uri)
    check_uri((tmp_path / "mlruns").as_uri())  # a folder that can be made
    check_uri(f"sqlite:///{tmp_path}/m.db")
