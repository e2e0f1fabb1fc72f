"""`autotune study`, `show`, `studies` and `ui`: run a study, print its summary, list the
studies, open the MLflow UI on a study's store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.app import EXIT_AT_ONCE, SetOpt, SpaceOpt, app, runs_probes, user_errors
from autotune.errors import UsageError


@app.command()
@user_errors
@runs_probes
def study(
    space: SpaceOpt,
    set_: SetOpt = None,
    seed: Annotated[
        int | None, typer.Option(help="Sampler seed (same as --set sampler.seed=N).")
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="Optuna storage URL (SQLAlchemy), e.g. postgresql://user:pw@db:5432/autotune. "
            "Default: sqlite in the study folder."
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            help="MLflow tracking URI. Default: a continued study's own (its study.json), else "
            "$MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in this folder; another store than a "
            "continued study's is refused."
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to join (host:6379 or auto). Default: $RAY_ADDRESS, else a local Ray."
        ),
    ] = None,
    study_dir: Annotated[
        str | None,
        typer.Option(
            metavar="PATH", help="Folder for the study's files. Default: ./autotune-studies/NAME."
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            help="Continue an existing study (running the same command again also continues); "
            "fail if it does not exist."
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option(help="Print only the final summary.")] = False,
    warm_start: Annotated[
        str | None,
        typer.Option(
            "--warm-start",
            metavar="STUDY_OR_RECIPE",
            help="Try an earlier study's best configs (or a recipe file's) first, right after "
            "the baseline; the summary says when this study matched the source's best.",
        ),
    ] = None,
) -> None:
    """Search the space's knobs: Optuna decides, Ray runs the probes, MLflow records."""
    from autotune import space as sp
    from autotune import study as st
    from autotune.study import signals

    # Before the space is read and checked and torch imported (seconds): a Ctrl-C then is not
    # ignored where SIGINT was inherited as ignored (a script's `&` job): `signals`.
    if study_dir is not None and not study_dir.strip():  # an unset shell variable, say
        raise UsageError("--study-dir is empty: give a folder (e.g. --study-dir ./runs/NAME)")
    try:
        with signals.handled():
            overrides = list(set_ or [])
            if seed is not None:
                problem = sp.seed_problem(seed)
                if problem:
                    raise sp.SpaceError(f"--seed: {problem}")
                overrides.append(f"sampler.seed={seed}")
            s = sp.load(space, overrides)
            warm = st.load_warm_start(warm_start, storage) if warm_start else None
            options = st.StudyOptions(
                space=s,
                study_dir=Path(study_dir) if study_dir is not None else None,
                storage=storage,
                tracking_uri=tracking_uri,
                address=address,
                resume=resume,
                quiet=quiet,
                warm_start=warm,
            )
            result = st.run(options)
            typer.echo(
                st.format_summary(
                    result.summary, tracking_uri=result.tracking_uri, study_dir=result.study_dir
                )
            )
    except KeyboardInterrupt:  # before the study's phases (its stores opening) or after them
        typer.echo(signals.interrupted_text(), err=True)
        raise typer.Exit(signals.exit_status()) from None
    from autotune.study.timeline import mark

    mark("summary printed")
    EXIT_AT_ONCE["on"] = True  # Ray is shut down, MLflow's writer drained: nothing to tear down
    if result.failure is not None:  # the baseline failed, or every trial: status 1
        from autotune.errors import TrialsFailed

        raise TrialsFailed(result.failure)
    if result.interrupted:
        raise typer.Exit(signals.exit_status())  # 130 on Ctrl-C, 143 on SIGTERM


@app.command()
@user_errors
def show(
    study_ref: Annotated[
        str,
        typer.Argument(
            metavar="STUDY", help="Study name (under ./autotune-studies) or study folder."
        ),
    ],
    storage: Annotated[
        str | None,
        typer.Option(help="Optuna storage URL, when the study is not in a local folder."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Print a study's summary again, from its Optuna storage."""
    from autotune import study as st
    from autotune.study import attrs as ua
    from autotune.study.session import driver_running

    optuna_study, space, study_dir, meta = st.find_study(study_ref, storage)
    # A study whose driver runs now (its lock is held) is in progress, not interrupted.
    running = driver_running(study_dir) if study_dir is not None else None
    # What the study's last session dropped (it cannot act there), said as the study said it.
    dropped = ua.dropped(optuna_study)
    summary = st.summarize(optuna_study, space, study_dir, dropped, running=running)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
    else:
        tracking = meta.get("tracking_uri")
        text = st.format_summary(
            summary, tracking_uri=tracking, storage=storage, study_dir=study_dir
        )
        typer.echo(text)


@app.command("studies")
@user_errors
def list_studies(
    storage: Annotated[
        str | None,
        typer.Option(help="Also list the studies in this Optuna storage URL."),
    ] = None,
    study_dir: Annotated[
        Path | None,
        typer.Option(
            help="A folder of study folders (default ./autotune-studies), or one study's folder."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
) -> None:
    """List the studies found here (and in --storage): trials, pick, last change, storage."""
    from autotune.errors import UsageError
    from autotune.study import listing as sl

    if study_dir is not None and not study_dir.is_dir():  # a typo is not "no studies"
        what = "not a folder" if study_dir.exists() else "no such folder"
        raise UsageError(f"--study-dir {study_dir}: {what}")
    rows = [sl.describe(f) for f in sl.find_all(study_dir, storage)]
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
    elif rows:
        typer.echo(sl.format_table(rows))
    else:
        from autotune.tracking import redact

        where = f"{study_dir or './autotune-studies'}"
        where += f" or in {redact(storage)}" if storage else ""
        typer.echo(f"no studies under {where}")


@app.command()
@user_errors
def ui(
    study_ref: Annotated[
        str | None,
        typer.Argument(metavar="[STUDY]", help="Open this study's tracking store and experiment."),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow tracking URI (default: the study's, else as `autotune study`)."),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Interface to bind (loopback by default; others need --expose).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (1 to 65535).")] = 5000,
    expose: Annotated[
        bool,
        typer.Option(help="Allow a --host beyond loopback (the UI has no authentication)."),
    ] = False,
) -> None:
    """Start the MLflow UI on the study's tracking store and print its URL."""
    from autotune import tracking
    from autotune.cli.repro import existing_store
    from autotune.errors import UsageError
    from autotune.tracking.ui import check_host, check_port, serve
    from autotune.tracking.ui_store import check_served, study_experiment

    if not 1 <= port <= 65535:
        raise UsageError(f"--port {port}: a port is a whole number from 1 to 65535")
    bind_host, poll_host = check_host(host, port, expose=expose)  # before any store is read
    check_port(bind_host, port)
    uri = tracking_uri
    study_name = None
    meta: dict = {}
    if study_ref is not None:
        from autotune import study as st

        found, _, _, meta = st.find_study(study_ref)
        study_name = found.study_name
        uri = uri or meta.get("tracking_uri")
    resolved = tracking.resolve_uri(uri)
    if resolved.split("://", 1)[0].lower() in ("http", "https"):
        # a tracking server serves its own UI: nothing to start here (the MLflow UI is for a
        # local store); say whether it answers
        tracking.connect(resolved)  # a TrackingError naming it when nothing answers
        raise UsageError(
            f"{tracking.redact(resolved)} is an MLflow tracking server: it serves its own UI; "
            "open that address in a browser"
        )
    check_served(resolved)  # an unknown scheme, a corrupt SQLite file: one line
    tracking.check_uri(resolved)  # a database store whose host does not answer: one line
    existing_store(uri, "no study has logged to it yet: run `autotune study` first")
    client = tracking.connect(resolved)  # a store MLflow cannot open: one line, not its traceback
    experiment_id = None
    if study_name is not None:  # the study's experiment in this store, which may not be its own
        experiment_id = study_experiment(client, study_name, meta.get("experiment_id"))
    serve(resolved, host=bind_host, port=port, poll_host=poll_host, experiment_id=experiment_id)
