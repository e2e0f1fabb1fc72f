"""`autotune studies --storage URL` says of a study named in the storage what `autotune show`
says (`listing.home_folder`, as `find_study` finds it).

From the seventh black-box review: while a study ran, `autotune studies` from its folder said
"(running)", but from another folder with `--storage` it said "(stopped in its rungs)" with
`driver: None`, while `autotune show NAME --storage` there said its driver was running it: the
listing looked for the driver's lock only in folders it found under ./autotune-studies.
A recorded study (no Ray) in a storage outside its folder; the driver's lock held here."""

from __future__ import annotations

from pathlib import Path

from assets import studies as h

from autotune.study import home, listing, session
from autotune.study.find import find_study


def test_a_running_study_listed_from_its_storage_is_running(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    (tmp_path / "A").mkdir()
    elsewhere = tmp_path / "B" / "autotune-studies"
    elsewhere.mkdir(parents=True)
    study_dir = h.recorded_study(tmp_path / "A", "live", trials=6, finished=4, storage=storage)
    study, _, _, _ = find_study(str(study_dir))
    home.claim(study, study_dir)  # as the driver records where it runs

    with session.driver_lock(study_dir):
        shown = find_study("live", storage)  # `autotune show live --storage` from B
        rows = {
            where: [listing.describe(f) for f in listing.find_all(root, storage)]
            for where, root in (("its folder", study_dir.parent), ("elsewhere", elsewhere))
        }
    assert shown[2] == study_dir.resolve()
    mine, other = rows["its folder"][0], rows["elsewhere"][0]
    assert other["unfinished"]["driver"], other
    assert other["unfinished"]["driver"] == mine["unfinished"]["driver"]
    for key in ("finished", "total", "unfinished", "pick"):
        assert other[key] == mine[key], (key, other, mine)
    assert other["study_dir"] == str(study_dir.resolve())
    line = listing.format_table(rows["elsewhere"]).splitlines()[1]
    assert line.split()[:3] == ["live", "4/6", "(running)"], line

    # its driver gone: from anywhere, where it stopped (its screen), no longer running
    after = [listing.describe(f) for f in listing.find_all(elsewhere, storage)]
    assert after[0]["unfinished"]["driver"] is None and after[0]["unfinished"]["phase"] == "screen"
    line = listing.format_table(after).splitlines()[1]
    assert line.split()[:6] == ["live", "4/6", "(stopped", "in", "its", "screen)"], line


def test_the_last_change_counts_the_rung_and_verification_records(tmp_path: Path) -> None:
    """The last change was the last Optuna trial's time, though a study's rungs and its
    verification write their records after it (a review: 13:44 listed, records until 13:45)."""
    import datetime as dt
    import os

    study_dir = h.recorded_study(tmp_path, "late", trials=3, finished=3)
    (study_dir / "verify").mkdir(exist_ok=True)
    record = study_dir / "verify" / "0001-s40-seed1.json"
    record.write_text("{}")
    later = dt.datetime.now() + dt.timedelta(hours=2)
    os.utime(record, (later.timestamp(), later.timestamp()))
    rows = [listing.describe(f) for f in listing.find_all(study_dir.parent, None)]
    assert rows[0]["last_change"] == later.isoformat(sep=" ", timespec="seconds"), rows
