"""Usage errors (an option's value out of its bounds or not a number, a missing argument, an
unknown option or command) as one line, as every other user error is: click's own form is a
usage line, a help hint and a boxed message (five lines), which a script's log, or a wrapper
that reads the first line of stderr, shows badly."""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperGroup

#: The exceptions of the click that Typer's commands are built on: Typer 0.12 uses the `click`
#: package, newer Typers a copy of their own (`typer._click`), whose UsageError is another class.
_CLICK = importlib.import_module(TyperGroup.__mro__[1].__module__.rpartition(".")[0])
_USAGE_ERROR: type[Exception] = _CLICK.exceptions.UsageError
_HELP_ASKED: tuple[type[Exception], ...] = tuple(
    c for c in (getattr(_CLICK.exceptions, "NoArgsIsHelpError", None),) if c is not None
)


class OneLineUsageErrors(TyperGroup):
    """The app's group: a usage error of the group's options or of a command's, as click parses
    and checks them, is printed as `autotune: error: COMMAND: MESSAGE (see autotune COMMAND --help)`
    with click's exit status 2. `autotune` alone still prints the help (`no_args_is_help`)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except _USAGE_ERROR as e:  # the group's own options (`autotune --bogus`)
            raise _one_line(e) from None

    def invoke(self, ctx: Any) -> Any:
        # what the group was asked to run, read before click's invoke takes it off `ctx`
        asked = [*(getattr(ctx, "_protected_args", None) or []), *(ctx.args or [])]
        try:
            return super().invoke(ctx)
        except _USAGE_ERROR as e:  # the command's name, its options and arguments
            raise _one_line(e, _command_path(ctx, asked)) from None


def _command_path(ctx: Any, asked: list[str]) -> str:
    """`autotune audit`: the command the group was asked to run (the first of `asked`), for an
    error click raises without its context (`--compare A` of an option that takes two: `see
    autotune --help` sent the user to the group's help)."""
    name = asked[0] if asked and not str(asked[0]).startswith("-") else None
    found = ctx.command.get_command(ctx, name) if name else None
    return f"{ctx.command_path} {name}" if found is not None else ctx.command_path


def _one_line(e: Any, path: str = "autotune") -> Any:
    """Print `e` as one line and return the exit to raise; a request for the help (no
    arguments at all) is returned unchanged, for click to print the help. `path`: the command's
    when the error carries no context."""
    if isinstance(e, _HELP_ASKED):
        return e
    path = e.ctx.command_path if e.ctx is not None else path
    command = path.partition(" ")[2]  # `verify`; empty for the group's own options
    message = " ".join(e.format_message().split())  # click may wrap a long message
    typer.echo(
        f"autotune: error: {command + ': ' if command else ''}{message} (see {path} --help)",
        err=True,
    )
    return typer.Exit(e.exit_code)
