"""The studies a user can reach from here: `autotune studies`, and the names offered when
`autotune show NAME` (or export, ui) finds no study of that name.

Studies are found in two places: study folders (a `study.json`, as `autotune study` leaves them
under ./autotune-studies) and an Optuna storage given by URL. Everything is read from the
storage; nothing is written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import AutotuneError, StudyError, did_you_mean
from autotune.sqlite_read import tables_problem
from autotune.study import attrs as ua
from autotune.study import folder, unfinished
from autotune.study import pick as pk
from autotune.study.options import STUDIES_DIR
from autotune.study.records import count_finished, planned_at_least_ran
from autotune.study.session import driver_running
from autotune.study.storage import open_storage, same_storage, sqlite_file
from autotune.study.verdict import decide
from autotune.tracking import redact
from autotune.tracking.redaction import scrub


@dataclass(frozen=True)
class Found:
    """A study's name, its Optuna storage URL and its folder (None: known from the storage);
    `error`: why its folder's study.json cannot be read; `study`: its name in the storage when
    that is not `name`.

    `name` is the one commands accept: a folder's name (a copied or renamed folder keeps the
    study's recorded name, which `show NAME` would not find under ./autotune-studies), or for
    a study known from its storage alone, its name there."""

    name: str
    storage: str
    study_dir: Path | None = None
    error: str | None = None
    study: str | None = None

    @property
    def study_name(self) -> str:
        """The study's name in its Optuna storage."""
        return self.study or self.name


def default_root() -> Path:
    return Path.cwd() / STUDIES_DIR


def study_folders(root: Path) -> Iterator[Path]:
    """`root` when it is a study folder, else the study folders in it: those with a
    study.json, whatever it is (one that is not a regular file, or a link to nothing, is
    listed as unreadable by `find_all`, not hidden)."""
    if has_meta(root):
        yield root
    elif root.is_dir():
        yield from sorted(p for p in root.iterdir() if p.is_dir() and has_meta(p))


def has_meta(where: Path) -> bool:
    """Whether `where` holds a study.json of any kind (a link to nothing included), or is a
    study folder that lost it (`folder.orphaned`: `read_meta` then says so)."""
    path = folder.study_json(where)
    return path.exists() or path.is_symlink() or folder.orphaned(where)


def find_all(root: Path | None = None, storage: str | None = None) -> list[Found]:
    """The studies in the study folders under `root` (default ./autotune-studies) and in the
    Optuna storage `storage`, sorted by name."""
    found: list[Found] = []
    for where in study_folders(root or default_root()):
        try:
            meta = folder.read_meta(where)
        except StudyError as e:  # listed as unreadable, with why: not hidden
            found.append(Found(where.name, "", where.resolve(), error=str(e)))
            continue
        # Listed by its folder's name, the one `show` accepts; two copies of one folder are
        # two rows with two names, not two identical ones.
        recorded = meta["name"] if meta["name"] != where.name else None
        found.append(Found(where.name, meta["storage"], where.resolve(), study=recorded))
    if storage:
        in_folders = {(f.study_name, f.storage) for f in found}
        found += [Found(n, storage) for n in names_in(storage) if (n, storage) not in in_folders]
    return sorted(found, key=lambda f: (f.name, f.storage))


def names_in(storage: str) -> list[str]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    summaries = optuna.get_all_study_summaries(open_existing(storage), include_best_trial=False)
    return sorted(s.study_name for s in summaries)


def open_existing(url: str) -> Any:
    """The storage at `url`, to read: an SQLite file that is not there, is empty or holds no
    Optuna storage is an error naming it, never a new (or newly filled) database."""
    try:
        path = sqlite_file(url)
    except Exception as e:
        raise AutotuneError(f"{redact(url)}: not a database URL: {scrub(str(e), url)}") from e
    problem = sqlite_problem(path) if path is not None else None
    if problem:
        raise StudyError(f"{url}: {problem}")
    return open_storage(url)


def sqlite_problem(path: Path) -> str | None:
    """Why the SQLite file `path` holds no Optuna storage to read (None: it does); looked at
    read-only, so that nothing is created or changed."""
    return tables_problem(path, ("studies", "version_info"), "Optuna storage")


def home_folder(study: Any, name: str, url: str) -> tuple[Path, dict[str, Any]] | None:
    """The study's home folder (`autotune.home`: where its trial, rung and verification
    records are) and its study.json, when this machine sees it (the same host, or a shared
    filesystem) and it is this study's: its name, in this storage. None otherwise: a study
    read from its storage alone (no compute, no recorded curves). `show` and `studies` both
    find a study named in a storage by it: its driver's lock is there, so both see it run.

    A study run with its default storage (the folder's own optuna.db, no --storage) records no
    home: its folder is then the one that holds the SQLite file, when it is this study's."""
    home = study.user_attrs.get(ua.HOME)
    if isinstance(home, dict) and home.get("folder"):
        where = Path(str(home["folder"]))
    else:
        db = sqlite_file(url)
        if db is None:
            return None
        where = db.parent
    try:
        if not has_meta(where):
            return None
        meta = folder.read_meta(where)
    except (OSError, StudyError):
        return None
    if meta.get("name") != name or not same_storage(str(meta.get("storage")), url):
        return None
    return where.resolve(), meta


def offer(ref: str, names: Sequence[str] | None = None, where: str = "here") -> str:
    """What a study name that was not found could have been: a close name, and the studies
    found (`names`, default: those reachable from here). A study folder here whose recorded
    name is `ref` (a copied or renamed folder) is offered by its folder's name, which works."""
    if names is None:
        found = find_all()
        names = sorted({f.name for f in found})
        copies = [f.name for f in found if f.study == ref]
        if copies:
            return f" (did you mean '{copies[0]}'?); studies {where}: {', '.join(names)}"
    if names:
        return f"{did_you_mean(ref, names)}; studies {where}: {', '.join(names)}"
    if where != "here":
        return f"; studies {where}: none"
    return (
        f"; no studies under ./{default_root().name} here (`autotune studies --study-dir DIR` "
        "lists another folder's)"
    )


def describe(found: Found) -> dict[str, Any]:
    """One row of `autotune studies`: trials finished of planned, the pick, the last change."""

    row: dict[str, Any] = {
        "name": found.name,
        **({"study": found.study} if found.study else {}),
        "storage": redact(found.storage) if found.storage else None,
        "study_dir": str(found.study_dir) if found.study_dir else None,
    }
    if found.error is not None:
        row["error"] = found.error
        return row
    try:
        row.update(_read(found))
    except AutotuneError as e:
        row["error"] = str(e)
    return row


def _read(found: Found) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=found.study_name, storage=open_existing(found.storage))
    except KeyError:
        raise AutotuneError("not in its storage (deleted?)") from None
    # Named in a storage only: its home folder, when this machine sees it, as `show` finds it
    # (its driver's lock and study.json are there: a running study is said to be running).
    home = None if found.study_dir else home_folder(study, found.name, found.storage)
    study_dir = found.study_dir or (home[0] if home else None)
    trials = study.get_trials(deepcopy=False)
    total = len(trials)
    left = None
    with contextlib.suppress(AutotuneError, KeyError):
        space = sp.loads(study.user_attrs[ua.SPACE_YAML], source=found.name, stored=True)
        total = planned_at_least_ran(study, space).budget.trials
        running = driver_running(study_dir) if study_dir else None
        left = unfinished.state(study, space, running)
    objectives = study.user_attrs.get(ua.OBJECTIVES) or []
    pick = None
    decision = None
    cands = pk.candidates(study) if objectives else []
    if cands:
        try:
            partial = unfinished.verification_partial(left)
            decision = decide(study, cands, objectives, "balanced", partial=partial)
        except pk.NoCandidateHolds:
            decision = None
    if cands and decision is not None:
        chosen = decision.chosen
        pick = {
            "number": chosen.number,
            "verified": chosen.verified is not None,
            "verdict": decision.verdict["verdict"],
            "defaults_preferred": decision.defaults_preferred,
            "values": {o["metric"]: chosen.value(o["metric"], i) for i, o in enumerate(objectives)},
        }
    times = [t.datetime_complete or t.datetime_start for t in trials]
    if study_dir is not None:  # its rung and verification records, written after the trials
        times.append(_newest_record(study_dir))
    last = max((t for t in times if t is not None), default=None)
    if last is None and study_dir is not None:
        last = dt.datetime.fromtimestamp(folder.study_json(study_dir).stat().st_mtime)
    return {
        **({"study_dir": str(study_dir)} if home else {}),
        "finished": count_finished(study),
        "total": total,
        # Where it stopped (`unfinished.state`; None: finished): its pick is the state so far.
        "unfinished": left,
        "pick": pick,
        "last_change": last.isoformat(sep=" ", timespec="seconds") if last else None,
    }


def _newest_record(study_dir: Path) -> dt.datetime | None:
    """When the newest of the study's trial, rung and verification records was written (a rung
    or a verification runs after the last Optuna trial has finished); None without any."""
    newest = None
    for where in (folder.trials_dir(study_dir), folder.verify_dir(study_dir)):
        with contextlib.suppress(OSError):
            for path in where.glob("*.json"):
                with contextlib.suppress(OSError):
                    newest = max(newest or 0.0, path.stat().st_mtime)
    return None if newest is None else dt.datetime.fromtimestamp(newest)


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as aligned text, one study a line."""
    table = [("study", "trials", "pick (balanced)", "last change", "storage")]
    for r in rows:
        name = f"{r['name']} (study {r['study']})" if r.get("study") else r["name"]
        if "error" in r:
            table.append((name, "?", f"cannot read: {r['error']}", "", r["storage"] or ""))
            continue
        table.append(
            (
                name,
                f"{r['finished']}/{r['total']}" + _unfinished_text(r.get("unfinished")),
                _pick_text(r["pick"], done=not r.get("unfinished") and bool(r["finished"])),
                (r["last_change"] or "")[:16],
                r["storage"],
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in table
    )


def _unfinished_text(left: dict[str, Any] | None) -> str:
    """` (running)`, ` (stopped in its rungs)`: a study that has not finished, after its trials."""
    if not left:
        return ""
    if left.get("driver"):
        return " (running)"
    return f" (stopped in its {left.get('phase')})"


def _pick_text(pick: dict[str, Any] | None, *, done: bool = False) -> str:
    """The balanced pick; with none, "none yet" only while the study has not finished (`done`):
    a finished study's answer is that it has none (`autotune show` says why, and what to
    carry on when its trials stopped short of the target)."""
    if pick is None:
        return "none: finished without one (see `autotune show`)" if done else "none yet"
    values = ", ".join(f"{k} {v:.3g}" for k, v in pick["values"].items())
    text = f"trial {pick['number']}{' (verified)' if pick['verified'] else ''}: {values}"
    if pick.get("defaults_preferred") and pick.get("verdict") == "not compared":
        text += " (the defaults: nothing searched held on every seed)"
    elif pick.get("defaults_preferred"):
        text += f" (the defaults: {pick.get('verdict')} against them)"
    return text
