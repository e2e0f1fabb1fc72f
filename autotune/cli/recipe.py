"""`autotune export` and `autotune verify`: a study's chosen configuration as a recipe (or
another format), and a recipe re-measured over seeds on this machine."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from autotune.cli.app import app, check_steps, runs_probes, user_errors
from autotune.errors import AutotuneError, UsageError
from autotune.space.limits import MAX_STEPS, MIN_STEPS

PickOpt = Annotated[
    str,
    typer.Option(
        "--pick",
        help="balanced (the knee of the Pareto front), fastest, stablest, or 'trial N'.",
    ),
]


@app.command()
@user_errors
def export(
    study_ref: Annotated[
        str,
        typer.Argument(metavar="STUDY", help="Study name (under ./autotune-studies) or folder."),
    ],
    pick: PickOpt = "balanced",
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="Write here (atomically) instead of to stdout."),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="yaml (the recipe file), env (shell exports), python (a standalone snippet), "
            "hf (TrainingArguments JSON) or lightning (Trainer kwargs JSON).",
        ),
    ] = "yaml",
    storage: Annotated[
        str | None,
        typer.Option(help="Optuna storage URL, when the study is not in a local folder."),
    ] = None,
    audit: Annotated[
        bool,
        typer.Option(
            "--audit",
            help="Also record this machine's op audit in the recipe (-f yaml), for `autotune "
            "migrate` elsewhere (seconds to a minute; run it where the study ran).",
        ),
    ] = False,
) -> None:
    """Export a study's chosen configuration as a recipe (or another format)."""
    from autotune.recipe import exporters as formats
    from autotune.study import export as ex

    if fmt not in formats.FORMATS:
        raise AutotuneError(f"--format {fmt}: choose one of {', '.join(formats.FORMATS)}")
    if audit and fmt != "yaml":  # only the recipe file records it: the audit would be lost
        raise AutotuneError(
            f"--audit: the {fmt} format has no place for the op audit (only the recipe file, "
            "-f yaml, records it for `autotune migrate`); drop --audit or export -f yaml"
        )
    ex.check_output(output)  # before the study is read (or the audit run)
    recipe = ex.recipe_from_study(study_ref, pick, storage, audit=audit)
    text = ex.write(recipe, fmt, output)
    for note in (ex.folder_note(recipe), ex.oom_note(recipe), ex.verdict_note(recipe)):
        if note:
            typer.echo(f"autotune: warning: {note}", err=True)
    if output and output != "-":
        typer.echo(f"wrote {output} ({fmt}): {recipe.describe()}", err=True)
    else:
        typer.echo(text, nl=not text.endswith("\n"))


@app.command()
@user_errors
@runs_probes
def verify(
    recipe_path: Annotated[str, typer.Argument(metavar="RECIPE", help="A recipe file.")],
    seeds: Annotated[int, typer.Option(min=1, max=100, help="Seeds to run it with.")] = 3,
    baseline: Annotated[
        bool,
        typer.Option(help="Also run PyTorch's defaults for the searched knobs at those seeds."),
    ] = True,
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            help="MLflow tracking URI for the verification run. Default: $MLFLOW_TRACKING_URI, "
            "else the recipe's own store when it is reachable from here, else "
            "sqlite:///mlflow.db in this folder."
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds allowed per probe (a finite number > 0).")
    ] = 600.0,
    steps: Annotated[
        int | None,
        typer.Option(
            help=f"Run the recipe and the baseline this many steps ({MIN_STEPS} to "
            f"{MAX_STEPS:,}) instead of the probe's "
            "(e.g. 5x: a short probe's ranking does not always hold for a longer run). The "
            "promise is then not compared.",
        ),
    ] = None,
    first_seed: Annotated[
        int | None,
        typer.Option(
            help="Run both sides on seeds K ... K+N-1 (N: --seeds). Default: the seeds after "
            "the recipe's probe seed, the study's own verification seeds (on the same machine "
            "they reproduce its numbers); e.g. 100 checks on fresh seeds.",
            metavar="K",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Re-run a recipe and the baseline over seeds on this machine and check what it promised.

    Exit status 1 when every seed of the recipe failed (the causes are printed), when it
    diverged on every seed, broke its promise, or loses to the baseline over the same seeds."""
    from autotune.recipe import paired
    from autotune.recipe import verify as vf
    from autotune.recipe import verify_log as vlog
    from autotune.recipe.preflight import check_timeout, load_checked
    from autotune.study import signals

    check_steps(steps)  # before the recipe is read
    check_timeout(timeout)  # as migrate checks it
    if first_seed is not None:  # before the recipe is read
        from autotune.space.seeds import seed_problem

        problem = seed_problem(first_seed)
        if problem:
            raise UsageError(f"--first-seed {first_seed}: {problem}")
    recipe = load_checked(recipe_path)  # the file and its workload, as repro and migrate check
    store = vlog.open_store(recipe, tracking_uri)  # an unreachable store refused before any probe
    # Ctrl-C and SIGTERM stop the probes (KeyboardInterrupt), even where SIGINT was inherited
    # as ignored (a script's `&` job), as they stop a study: before the report is logged, so no
    # MLflow run is left half-written.
    try:
        with signals.handled():
            report = vf.verify_recipe(
                recipe,
                source=recipe_path,
                seeds=seeds,
                baseline=baseline,
                timeout_s=timeout,
                steps=steps,
                first_seed=first_seed,
                checked=True,
            )
    except KeyboardInterrupt:
        typer.echo("autotune: verify interrupted: nothing logged", err=True)
        raise typer.Exit(signals.exit_status()) from None  # 130 on Ctrl-C, 143 on SIGTERM
    report["run_id"] = vlog.log_report(recipe, report, tracking_uri, store)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        typer.echo(vf.format_report(report))
        from autotune.tracking.connection import redact

        typer.echo(f"logged to MLflow: run {report['run_id']} in {redact(store[0])}")
    if vf.all_failed(report):
        typer.echo(
            f"autotune: every seed of recipe {recipe.name} failed: nothing was verified", err=True
        )
        raise typer.Exit(1)
    problems = paired.verify_problems(report)
    if problems:
        typer.echo(
            f"autotune: recipe {recipe.name} is NOT as promised: {'; '.join(problems)}", err=True
        )
        raise typer.Exit(1)
