"""One exception hierarchy. The CLI prints a user error as one line and exits with status 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AutotuneError(Exception):
    """A user-facing error: bad input, an unreachable service, a missing file. No traceback."""

    exit_code = 2


class SpaceError(AutotuneError):
    """The search-space file (or a --set override) breaks a rule."""


class WorkloadError(AutotuneError):
    """A workload cannot be found, or raised while being built."""


class TrackingError(AutotuneError):
    """The MLflow tracking store cannot be reached or written."""


class ClusterError(AutotuneError):
    """The Ray cluster cannot be reached or started."""


class StudyError(AutotuneError):
    """A study cannot be found, resumed or summarised."""


class RecipeError(AutotuneError):
    """A recipe file is malformed, of a future version, or names unknown knobs."""


class UsageError(AutotuneError):
    """A command-line option is empty, out of range, or unsafe without being asked for."""


class ReproError(AutotuneError):
    """An audit, a run comparison or a determinism check cannot run on what it was given."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ` (did you mean 'x'?)` for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
