"""The Optuna storage's server lost mid-study (`storage.connection_kept`): a review stopped the
PostgreSQL of a study during its rungs and got a page of traceback ending in Optuna's
StorageInternalError ("invalid data in the commit"), no resume hint. It is one line naming the
storage (its password masked), status 1, Ray shut down; the study resumes once the server is
back. A bug that is no lost connection stays a traceback."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from assets import studies as h
from assets.postgres import PASSWORD, own_server

from autotune.errors import ServiceLost
from autotune.study.storage import connection_kept

REFUSED = "postgresql://autotune:pw@127.0.0.1:{port}/optuna"


def _refused_url() -> str:
    return REFUSED.format(port=h.free_port())  # nothing listens there


def _connect(url: str) -> None:
    import sqlalchemy

    args = {} if url.startswith("sqlite") else {"connect_timeout": 5}
    engine = sqlalchemy.create_engine(url, connect_args=args)
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()


def test_a_refused_connection_before_the_study_is_written_says_no_resume() -> None:
    url = _refused_url()
    with pytest.raises(ServiceLost) as caught, connection_kept(url, lambda: False):
        _connect(url)
    text = str(caught.value)
    assert text.startswith("lost the connection to the Optuna storage postgresql://autotune:***@")
    assert "Connection refused" in text and ":pw@" not in text, text
    assert "--resume" not in text and "run the same command again" in text, text
    assert caught.value.exit_code == 1


def test_a_bug_stays_a_traceback() -> None:
    with pytest.raises(KeyError), connection_kept(_refused_url(), lambda: True):
        raise KeyError("a bug")


def test_an_sqlite_storage_is_left_alone(tmp_path: Path) -> None:
    import sqlalchemy

    url = f"sqlite:///{tmp_path / 'nowhere' / 'optuna.db'}"  # its folder is missing
    with pytest.raises(sqlalchemy.exc.OperationalError), connection_kept(url, lambda: True):
        _connect(url)


def _wait_for(text: str, log: Path, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s"
        time.sleep(0.2)


@pytest.mark.integration
def test_postgresql_stopped_during_the_rungs(tmp_path: Path) -> None:
    """A tiny study with one rung on a PostgreSQL of its own, stopped (`pg_ctl stop -m fast`)
    as the rung starts: one line, status 1, no process left; started again, `--resume` ends
    the study."""
    with own_server("optuna") as pg:
        url = pg.url("optuna")
        space = h.write(tmp_path, h.mlp_space("lostpg", trials=3, steps=20))
        cmd = ["study", "--space", str(space), "--storage", url]
        cmd += ["--tracking-uri", h.sqlite_uri(tmp_path), "--set", "budget.target_steps=40"]
        token = h.new_token()
        out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen(
                h.autotune_cmd(*cmd), cwd=tmp_path, env=h.cli_env(token), stdout=o, stderr=e,
                stdin=subprocess.DEVNULL, start_new_session=True, text=True,
            )  # fmt: skip
        try:
            _wait_for("rung 1:", out, proc, timeout=240)
            pg.stop()
            code = proc.wait(timeout=120)
        finally:
            h.kill_tagged(token)
        stderr = err.read_text()
        assert code == 1, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        last = stderr.strip().splitlines()[-1]
        lost = "autotune: error: lost the connection to the Optuna storage postgresql://"
        assert last.startswith(lost) and "/optuna (" in last, last
        assert "bring it back, then run the same command with --resume" in last, last
        assert PASSWORD not in stderr + out.read_text(), "the password is shown"
        assert not h.wait_gone(token, timeout=30), "the driver left processes behind"

        pg.start()
        resumed = h.autotune([*cmd, "--resume"], tmp_path, timeout=300)
        assert resumed.returncode == 0, h.explain(resumed)
        assert "study lostpg: 3/3 trials" in resumed.stdout, h.explain(resumed)
