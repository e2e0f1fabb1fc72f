"""`autotune migrate RECIPE`: does a recipe tuned on another machine hold on this one?"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from autotune.cli.app import app, check_steps, runs_probes, user_errors
from autotune.space.limits import MAX_STEPS, MIN_STEPS


@app.command()
@user_errors
@runs_probes
def migrate(
    recipe: Annotated[str, typer.Argument(metavar="RECIPE", help="A recipe file (YAML).")],
    seeds: Annotated[int, typer.Option(min=1, max=20, help="Seeds for each side, 2 to 20.")] = 3,
    steps: Annotated[
        int | None,
        typer.Option(
            help=f"Steps per run, {MIN_STEPS} to {MAX_STEPS:,} (default: the length the study "
            "decided at)."
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(help="Threads per probe, 1 to 4096 (default: this machine's torch default)."),
    ] = None,
    out: Annotated[
        str, typer.Option("--out", "-o", help="Folder for migration.md and its plot.")
    ] = ".",
    audit: Annotated[bool, typer.Option(help="Run the op audit here.")] = True,
    timeout: Annotated[
        float, typer.Option(help="Seconds allowed per probe (a finite number > 0).")
    ] = 600.0,
    tracking_uri: Annotated[
        str | None, typer.Option(help="Also log the report to this MLflow store.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Re-run the recipe and the baseline over the seeds even when the recipe's "
            "recorded run reproduces here.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace an earlier migration's report, re-tuned recipe and re-tune in -o's "
            "folder (without it such a folder is refused).",
        ),
    ] = False,
    space: Annotated[
        str | None,
        typer.Option(
            "--space",
            "-s",
            help="The source study's space file: a recipe that does not transfer is re-tuned "
            "here by a reduced study (its hardware-bound and implicated knobs, 30% of its trials).",
        ),
    ] = None,
) -> None:
    """Check a recipe from another machine here: what differs, which ops, does it hold."""
    from autotune.migrate import migrate as run
    from autotune.study import signals

    check_steps(steps)  # before the recipe is read or anything made, as `verify` checks it
    check_out(out)
    try:
        result = run(
            recipe,
            seeds=seeds,
            steps=steps,
            threads=threads,
            timeout_s=timeout,
            out_dir=out,
            audit=audit,
            tracking_uri=tracking_uri,
            space=space,
            full=full,
            force=force,
        )
    except KeyboardInterrupt:  # said by `migrate` ("no report written"): the signal's status
        raise typer.Exit(signals.exit_status()) from None  # 130 on Ctrl-C, 143 on SIGTERM
    if as_json:
        typer.echo(json.dumps(result, default=str))
    else:
        typer.echo(f"{result['verdict']}\n{result['why']}\nreport: {result['report']}")
    if result["verdict"].startswith(("does not transfer", "re-tuned", "cannot tell")):
        raise typer.Exit(1)


def check_out(out: str) -> None:
    """The files the report replaces in `-o`'s folder: a regular file or none each (a symlink
    is written through); a device or FIFO there is refused before anything runs."""
    from pathlib import Path

    from autotune import outfile
    from autotune.migrate.run import PLOT, REPORT

    for name in (REPORT, PLOT, "recipe-retuned.yaml"):  # the report, its plot, a re-tune's
        outfile.target(Path(out) / name, "-o")
