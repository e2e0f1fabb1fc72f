"""Usage errors that click finds (an option out of its bounds or not a number, a missing
argument, an unknown option or command) are one `autotune: error:` line with exit status 2, as
every other user error, not click's usage line, hint and boxed message (black-box review of
`verify`: `--seeds 0`, `--seeds 101`, `--steps 1e3`, no RECIPE)."""

from __future__ import annotations

import pytest
from assets.cli import invoke, one_line_error


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["verify", "--seeds", "0", "r.yaml"], ["verify: ", "'--seeds'", "autotune verify --help"]),
        (["verify", "--seeds", "101", "r.yaml"], ["verify: ", "'--seeds'"]),
        (["verify", "--steps", "1e3", "r.yaml"], ["verify: ", "'--steps'"]),
        (["verify"], ["verify: ", "Missing argument 'RECIPE'"]),
        (["verify", "--seedz", "2", "r.yaml"], ["verify: ", "--seedz", "--seeds"]),
        (["migrate", "--seeds", "0", "r.yaml"], ["migrate: ", "'--seeds'"]),
        (["study", "--seed", "abc"], ["study: ", "'--seed'"]),
        (["export"], ["export: ", "Missing argument 'STUDY'"]),
        # an option short of its values: click gives no context; the command's help, not the app's
        (
            ["audit", "--compare", "abc"],
            ["audit: ", "requires 2 arguments", "autotune audit --help"],
        ),
        (["export", "x", "--pick"], ["export: ", "requires an argument", "autotune export --help"]),
        (["nosuch"], ["No such command 'nosuch'", "autotune --help"]),
        (["--bogus"], ["No such option: --bogus"]),
    ],
)
def test_a_usage_error_is_one_line(args: list[str], fragments: list[str]) -> None:
    one_line_error(invoke(*args), *fragments)


def test_no_arguments_still_show_the_help() -> None:
    result = invoke()
    assert "Usage" in result.output and "autotune: error" not in result.output
