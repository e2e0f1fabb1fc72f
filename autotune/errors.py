"""One exception hierarchy. The CLI prints a user error as one line and exits with status 2."""

from __future__ import annotations

import difflib
import re
import unicodedata
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


class ServiceLost(StudyError):
    """A service the study was using went away while it ran (its Optuna storage's server):
    exit status 1, not a user error's 2 (the input was valid; what finished is kept)."""

    exit_code = 1


class TrialsFailed(StudyError):
    """A study stopped because its trials failed (the baseline, or every trial): exit status 1,
    not a user error's 2 (the input was valid; the training job broke)."""

    exit_code = 1


class RecipeEnvWarning(UserWarning):
    """A recipe's `env:` holds a name that looks like a misspelt NCCL/RCCL variable, or a value
    not among an enumerated variable's: the library ignores it, so the run does not have the
    setting the recipe makes. `Recipe.load` and `Recipe.loads` warn of it (Python's `warnings`;
    filter it by this class), as `autotune verify`, `repro` and `migrate` do on stderr."""


#: The most characters of one failure's message kept for the console, `show` and export.
ONE_LINE_LIMIT = 300
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)", re.DOTALL)


def one_line(text: object, limit: int = ONE_LINE_LIMIT) -> str:
    """A failure's message as one printable line of at most `limit` characters: its first line
    with text (and the next one when the first only introduces it, `ValueError:`), terminal
    escapes dropped, control and format characters (bidi overrides too) made spaces, runs of
    spaces made one. What a trial printed or raised is not trusted to be readable."""
    lines = [ln for ln in _ESCAPES.sub("", str(text)).splitlines() if _clean(ln)]
    if not lines:
        return ""
    shown = _clean(lines[0])
    if shown.endswith(":") and len(lines) > 1:
        shown += " " + _clean(lines[1])
    return shown if len(shown) <= limit else shown[: max(0, limit - 3)].rstrip() + "..."


def _clean(line: str) -> str:
    kept = "".join(" " if unicodedata.category(c)[0] in "CZ" and c != " " else c for c in line)
    return " ".join(kept.split())
