"""The `autotune` command line. Each command parses its options and calls one function.

Nothing heavy (torch, ray, mlflow, optuna) is imported at module import: `autotune --help` is
instant. User errors (`AutotuneError`) print one line and exit with status 2.

The commands live by group in probe.py (check, probe, fingerprint), study.py (study, show,
studies, ui), repro.py (audit, compare, repro), recipe.py (export, verify) and migrate.py
(migrate); each module registers its commands on the app (cli/app.py) when imported, in that
order (the order of `autotune --help`).
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from autotune.cli.app import EXIT_AT_ONCE, app, user_errors
from autotune.errors import AutotuneError

for _group in ("probe", "study", "repro", "recipe", "migrate"):
    importlib.import_module(f"autotune.cli.{_group}")

__all__ = ["app", "main", "user_errors"]


def main() -> None:
    try:
        app()
    except AutotuneError as e:  # raised outside a command (should not happen)
        typer.echo(f"autotune: error: {e}", err=True)
        sys.exit(e.exit_code)
    except SystemExit as e:  # how the app leaves: at once when its command allowed it
        if EXIT_AT_ONCE["on"] and (e.code is None or isinstance(e.code, int)):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(e.code or 0)
        raise
