"""What a training script's trial raises: `Diverged` (the divergence checks stopped it),
`BadReport` (a report the probe cannot use) and `ScriptFailure` (a failure with a cause of its
own, such as no reports). `autotune.probe.script` re-exports them."""

from __future__ import annotations

from autotune.errors import AutotuneError


class Diverged(BaseException):
    """Raised by `trial.report` once the divergence checks found a divergence (with
    `divergence.stop_early`). A BaseException, so that an `except Exception:` in the script or
    its framework does not swallow the stop; the trial is `diverged` whatever the script does."""

    def __init__(self, cause: str, step: int) -> None:
        super().__init__(f"training diverged at step {step}: {cause}")
        self.cause, self.step = cause, step


class BadReport(AutotuneError):
    """A report the probe cannot use (a step out of order, a loss that is not a number)."""

    cause = "bad_report"


class ScriptFailure(Exception):
    """A script trial that failed without an exception of its own (`cause`: no_reports, ...),
    or with one the probe cannot let through (`error_type`: the name the failure is reported
    under, e.g. a KeyboardInterrupt the script raised, which would read as an interrupt of the
    trial)."""

    def __init__(self, cause: str, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.cause, self.error_type = cause, error_type
