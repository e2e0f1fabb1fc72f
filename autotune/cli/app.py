"""The Typer app every command module registers on, the user-error wrapper and shared options."""

from __future__ import annotations

import errno
import functools
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from autotune.cli.usage import OneLineUsageErrors
from autotune.errors import AutotuneError, UsageError
from autotune.process import memory_limit
from autotune.space.builtin import builtin_names

app = typer.Typer(
    name="autotune",
    cls=OneLineUsageErrors,  # a usage error in one line, as every user error
    help="Search training-stability and speed knobs with short probes: Optuna decides, Ray runs, "
    "the probe measures, MLflow remembers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])

#: Set by a command that leaves nothing to clean up once it has returned (`study`: Ray shut
#: down, the MLflow writer drained, every store committed, its output printed): `main` then
#: ends the process with `os._exit` and its status, without the interpreter's teardown of the
#: modules a study imported (torch, Ray, MLflow, SQLAlchemy: seconds). In-process callers of
#: the app (tests) never reach `main`.
EXIT_AT_ONCE = {"on": False}

SpaceOpt = Annotated[
    str,
    typer.Option(
        "--space",
        "-s",
        help=f"A space file, or the name of a built-in space ({', '.join(builtin_names())}).",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override any key of the space file: key.path=value "
        "(repeatable), e.g. --set knobs.lr=0.01 --set budget.trials=8.",
    ),
]


def user_errors(fn: F) -> F:
    """Print an AutotuneError as one line on stderr and exit 2; tracebacks are for bugs."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AutotuneError as e:
            typer.echo(f"autotune: error: {e}", err=True)
            raise typer.Exit(e.exit_code) from None
        except Exception as e:
            full = disk_full(e)
            if full is None:
                raise
            typer.echo(
                f"autotune: error: no space left on the device ({full}): free some and run the "
                "command again (a study: the same command with --resume carries on)",
                err=True,
            )
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def disk_full(e: BaseException) -> str | None:
    """What ran out of space, when `e` (or an exception it was raised from) is a full disk or
    quota: an OSError ENOSPC / EDQUOT, or SQLite's "database or disk is full" as SQLAlchemy or
    Optuna pass it on; None otherwise."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EDQUOT):
            return cur.filename or cur.strerror or str(cur)
        if "database or disk is full" in str(cur):
            return "a SQLite database: database or disk is full"
        cur = cur.__cause__ or cur.__context__
    return None


def runs_probes(fn: F) -> F:
    """For a command that runs probes: the probe settings of its environment checked before
    anything runs (`AUTOTUNE_PROBE_MEMORY_MB`), a bad one a UsageError naming the variable,
    not a failure of every trial. Goes under `user_errors`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            memory_limit.limit_mb()
        except ValueError as e:
            raise UsageError(str(e)) from None
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def check_steps(steps: int | None) -> None:
    """`--steps` (verify, migrate) within probe.steps' bounds: a UsageError naming it, before
    the recipe is read or anything made."""
    from autotune.space.limits import MAX_STEPS, MIN_STEPS

    if steps is not None and not MIN_STEPS <= steps <= MAX_STEPS:
        raise UsageError(
            f"--steps {steps}: steps are a whole number from {MIN_STEPS} to {MAX_STEPS:,}, "
            "as probe.steps"
        )
