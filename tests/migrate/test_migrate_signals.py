"""A migration stopped by Ctrl-C or SIGTERM, in its check or in its re-tune, writes no report and
exits with the signal's status (130, 143), saying so in one line.

From a black-box review: a SIGTERM in the check ended the process silently (143, an empty
output folder left); a Ctrl-C or SIGTERM in the re-tune wrote a report that said "does not
transfer: the re-tune found nothing that holds here" and exited 1."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from assets import studies as h
from assets.recipes import make_recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

STOPPED = "migrate interrupted: no report written"


def stopped_at(args: list[str], cwd: Path, line: str, sig: int) -> tuple[int, str]:
    """Run `autotune ARGS`, send `sig` to it (it alone) once its stderr shows `line`; its exit
    status and stderr."""
    err_path = cwd / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            h.autotune_cmd(*args),
            cwd=cwd,
            env={**h.cli_env(), "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 240
        while line not in err_path.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.2)
        time.sleep(1.0)  # inside the phase
        os.kill(proc.pid, sig)
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # what it was doing, for the next look at it
            tail = err_path.read_text()[-4000:]
            pytest.fail(f"still running 120 s after the signal; its stderr ends:\n{tail}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return rc, err_path.read_text()


def test_a_sigterm_in_the_check_is_a_ctrl_c(tmp_path: Path) -> None:
    make_recipe().save(tmp_path / "recipe.yaml")
    out = tmp_path / "report"
    args = ["migrate", "recipe.yaml", "--full", "--no-audit", "--steps", "400", "-o", str(out)]
    rc, err = stopped_at(args, tmp_path, "re-running recipe", signal.SIGTERM)
    assert rc == 143, err
    assert STOPPED in err
    assert not out.exists()  # the folder it made for the report goes again


def test_a_stop_in_the_retune_writes_no_report(shared: h.FinishedStudy, tmp_path: Path) -> None:
    from autotune.study import export as ex

    good = tmp_path / "recipe.yaml"  # what `autotune export` writes, without a CLI process
    ex.write(ex.recipe_from_study(str(shared.study_dir)), "yaml", str(good))
    data = yaml.safe_load(good.read_text())
    data["knobs"]["warmup_steps"] = 100 * shared.steps  # does not hold: re-tuned
    data["source"]["defaults"] = False
    data["source"].pop("neighbours", None)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "report"
    space = str(shared.folder / "space.yaml")
    args = ["migrate", "bad.yaml", "--seeds", "3", "--no-audit", "--space", space, "-o", str(out)]
    rc, err = stopped_at(args, tmp_path, "re-tuning", signal.SIGTERM)
    assert rc == 143, err
    assert STOPPED in err
    assert "does not transfer" not in err
    assert not (out / "migration.md").exists()
