"""What `autotune study` was asked for (`StudyOptions`, `WarmStart`), where a study's folder is,
and what a run of it returns (`StudyResult`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import space as sp

STUDIES_DIR = "autotune-studies"


@dataclass
class WarmStart:
    """Configurations from an earlier study or a recipe, tried first (after the baseline)."""

    ref: str  # what the user named: a study or a recipe file
    configs: list[dict[str, Any]]  # each {"knobs": {...}, "env": {...}, "label": str}
    fp_hash: str | None = None  # the hardware they were found on
    objectives: list[dict[str, Any]] = field(default_factory=list)
    best: list[float] | None = None  # the source's best (picked) values, for "matched at"


@dataclass
class StudyOptions:
    """What `autotune study` was asked for."""

    space: sp.Space
    study_dir: Path | None = None  # default ./autotune-studies/<name>
    storage: str | None = None  # Optuna RDB URL; default sqlite in the study folder
    tracking_uri: str | None = None
    address: str | None = None  # Ray cluster; default $RAY_ADDRESS, else a local Ray
    resume: bool = False  # insist that the study exists
    quiet: bool = False
    warm_start: WarmStart | None = None  # configurations of an earlier study to try first
    extra_tags: dict[str, str] = field(default_factory=dict)


def study_dir_for(name: str, base: Path | None = None) -> Path:
    return (base or Path.cwd()) / STUDIES_DIR / name


def named_folder(study_dir: Path, name: str) -> bool:
    """Whether `study_dir` is the folder the study's name makes from here
    (./autotune-studies/NAME): a study found, or renamed, by its name alone."""
    return study_dir.resolve() == study_dir_for(name).resolve()


@dataclass
class StudyResult:
    name: str
    study_dir: Path
    storage: str
    tracking_uri: str
    summary: dict[str, Any]
    interrupted: bool = False
    # Why the study ended without a result: its baseline failed (the screen stopped), or every
    # trial failed. `autotune study` prints it and exits with status 1.
    failure: str | None = None
