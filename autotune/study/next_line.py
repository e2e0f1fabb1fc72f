"""The summary's last line: what to run next (`autotune ui`, `show`, `export`), written so that
it works when pasted: the study named by its folder where its name would not find it from here,
and a storage's masked password said."""

from __future__ import annotations

import shlex
from pathlib import Path

from autotune.study.options import named_folder
from autotune.tracking.connection import redact


def next_line(
    name: str,
    has_pick: bool,
    tracking_uri: str | None,
    storage: str | None,
    study_dir: Path | None,
) -> str:
    """`next: ...` for the study `name` (`has_pick`: a recipe can be exported)."""
    ref, at = _reference(name, storage, study_dir)
    return (
        "next: `autotune ui` to browse the trials"
        + (f" ({redact(tracking_uri)})" if tracking_uri else "")
        + f", `autotune show {ref}{at}` for this summary again"
        + (f", `autotune export {ref}{at} -o recipe.yaml` for the recipe" if has_pick else "")
        + _masked_note(storage)
    )


def _reference(name: str, storage: str | None, study_dir: Path | None) -> tuple[str, str]:
    """How `show` and `export` find the study from here: by its name in the storage it was
    found in (given), else by its folder where its name would not find it (a `--study-dir`
    elsewhere than ./autotune-studies/NAME: the folder's study.json names its storage), else
    by its name."""
    if storage:
        return name, f" --storage {redact(storage)}"
    if study_dir is not None and not named_folder(study_dir, name):
        return shlex.quote(str(study_dir)), ""
    return name, ""


def _masked_note(storage: str | None) -> str:
    """A suggested command with the storage's password masked fails as printed: say so, and
    how to give it (the mask stays: this line is printed, logged and shared)."""
    if not storage or redact(storage) == storage:
        return ""
    return (
        " (the storage's password is masked as ***: put yours in its place, or leave it out of "
        "the URL and set PGPASSWORD or ~/.pgpass)"
    )
