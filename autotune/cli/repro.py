"""The reproducibility commands: `autotune audit`, `autotune compare`, `autotune repro`.

torch, mlflow and matplotlib are
imported inside the commands, so `autotune --help` stays instant. Exit status: 0 when the
check passes, 1 when it finds a difference (`compare`, `audit --compare`, `repro`), 2 on a
user error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.app import app, runs_probes, user_errors

TrackingOpt = Annotated[
    str | None,
    typer.Option(
        help="MLflow tracking URI. Default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in "
        "this folder."
    ),
]


def existing_store(tracking_uri: str | None, nothing: str) -> None:
    """Refuse, naming it, a local tracking store that is not there (or an empty SQLite file):
    a command that reads runs must not create one just to find no run in it."""
    from autotune import tracking
    from autotune.errors import ReproError
    from autotune.tracking.connection import sqlite_path, uri_scheme

    uri = tracking.resolve_uri(tracking_uri)
    scheme = uri_scheme(uri)
    if scheme == "sqlite":
        path = sqlite_path(uri)
        if path is not None and (not path.is_file() or path.stat().st_size == 0):
            state = "no such file" if not path.is_file() else "an empty file"
            raise ReproError(
                f"no MLflow tracking store at {uri} ({state}): {nothing}; pass --tracking-uri "
                "or set MLFLOW_TRACKING_URI to the store the runs were logged to"
            )
    elif scheme == "file":
        from urllib.parse import unquote, urlsplit

        folder = Path(unquote(urlsplit(uri).path))
        if not folder.is_dir():
            raise ReproError(
                f"no MLflow tracking store at {uri} (no such folder): {nothing}; pass "
                "--tracking-uri or set MLFLOW_TRACKING_URI to the store the runs were logged to"
            )


@app.command("audit")
@user_errors
def audit(
    device: Annotated[
        str, typer.Option(help="auto (a GPU if torch sees one), cuda, cuda:N or cpu.")
    ] = "auto",
    dtype: Annotated[str, typer.Option(help="fp32, fp16 or bf16.")] = "fp32",
    seed: Annotated[int, typer.Option(help="Seed of the inputs.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the audit as JSON.")] = False,
    tracking_uri: TrackingOpt = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not log to MLflow.")] = False,
    compare: Annotated[
        tuple[str, str] | None,
        typer.Option(
            metavar="RUN_A RUN_B",
            help="Instead of auditing: put two logged audits side by side (exit 1 if an op's "
            "max-abs error differs by more than --factor, or one audit lacks an op).",
        ),
    ] = None,
    factor: Annotated[
        float, typer.Option(help="With --compare: the ratio of errors that counts as a difference.")
    ] = 10.0,
) -> None:
    """Audit this platform's kernels (GELU, softmax, attention, matmul, ...) against float64."""
    from autotune.repro import audit as au

    if compare is not None:
        from autotune.errors import ReproError
        from autotune.repro.audit_compare import factor_text

        # NaN slips past `factor <= 1`; an infinite factor lets every difference pass.
        if not (math.isfinite(factor) and factor > 1):
            why = " (an infinite one compares nothing)" if math.isinf(factor) else ""
            raise ReproError(
                f"--factor must be a finite number > 1{why}, got {factor_text(factor)}"
            )
        # `--compare A --no-log` takes the option as the second run id: say so, not "no run"
        for given in compare:
            if given.startswith("-"):
                raise ReproError(
                    f"--compare takes two run ids (RUN_A RUN_B), got {given!r} as one: "
                    "put the options after both ids"
                )
        existing_store(tracking_uri, f"no run {compare[0]!r} to compare")
        a = au.load_audit(compare[0], tracking_uri)
        b = au.load_audit(compare[1], tracking_uri)
        cmp = au.compare_audits(a, b, factor=factor)
        typer.echo(json.dumps(cmp, indent=2) if as_json else au.format_comparison(cmp))
        if cmp["differs"] or any(cmp["missing"].values()):
            raise typer.Exit(1)
        return
    from autotune.errors import ReproError
    from autotune.space.seeds import seed_problem

    problem = seed_problem(seed)
    if problem:
        raise ReproError(f"--seed: {problem}")
    result = au.run_audit(device=device, dtype=dtype, seed=seed)
    if not no_log:
        from autotune import tracking

        result["run_id"] = au.log_audit(result, tracking_uri)
        result["tracking_uri"] = tracking.resolve_uri(tracking_uri)
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
        return
    typer.echo(au.format_audit(result))
    if not no_log:
        typer.echo(
            f"logged as run {result['run_id']} in experiment {au.EXPERIMENT} "
            f"({result['tracking_uri']})"
        )


@app.command("compare")
@user_errors
def compare(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="MLflow run id.")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="MLflow run id.")],
    metric: Annotated[str, typer.Option(help="The step series to compare.")] = "loss",
    rtol: Annotated[
        float, typer.Option(help="Largest relative difference that still agrees.")
    ] = 0.05,
    window: Annotated[
        int, typer.Option(help="Steps of the rolling median that smooths the difference.")
    ] = 5,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the plot to this PNG.")
    ] = None,
    tracking_uri: TrackingOpt = None,
    no_log: Annotated[
        bool, typer.Option("--no-log", help="Do not log the comparison to MLflow.")
    ] = False,
) -> None:
    """Compare the loss curves (or another step series) of two MLflow runs; exit 1 if not alike."""
    from autotune.repro import compare as cm

    cm.check_options(rtol, window, flag="--", out_png=output)  # before the store is looked for
    existing_store(tracking_uri, f"no run {run_a!r} to compare")
    result = cm.compare_runs(
        run_a,
        run_b,
        tracking_uri,
        metric=metric,
        rtol=rtol,
        window=window,
        out_png=output,
        log=not no_log,
    )
    typer.echo(cm.format_compare(result))
    if not result["agree"]:
        raise typer.Exit(1)


@app.command("repro")
@user_errors
@runs_probes
def repro(
    space: Annotated[
        str,
        typer.Argument(
            metavar="SPACE_OR_RECIPE", help="A space file, a built-in space name or a recipe."
        ),
    ],
    runs: Annotated[
        int | None, typer.Option(help="How many times to run the probe (default 2).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a key of the space: key.path=value (repeatable)."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Run with this seed.")] = None,
    seeds: Annotated[
        str | None,
        typer.Option(help="One seed per run, comma-separated (e.g. 0,1): shows the seed matters."),
    ] = None,
    fresh_process: Annotated[
        bool, typer.Option(help="Run each probe in its own process (the stronger check).")
    ] = False,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="Of a space: baseline (default; every searched knob at PyTorch's default, as "
            "trial 0 and `autotune probe` run it) or midpoint (each searched knob at its "
            "domain's default). A recipe runs its own knobs.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Run the probe several times in deterministic mode, at a trial's CPU threads; exit 1 if
    the step series differ (with --seeds: if runs on different seeds are identical, the seed
    having no effect)."""
    from autotune.cli.probe import planned_threads
    from autotune.errors import ReproError
    from autotune.repro import repro as rp

    seed_list: list[int] | None = None
    if seeds is not None:
        try:
            seed_list = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            raise ReproError(f"--seeds {seeds}: expected whole numbers, e.g. --seeds 0,1") from None
        # one seed per run: a --seed or another --runs beside them would be ignored
        if seed is not None:
            raise ReproError(f"--seed {seed} with --seeds {seeds}: give one or the other")
        if runs is not None and runs != len(seed_list):
            raise ReproError(
                f"--runs {runs} with --seeds {seeds}: --seeds runs one probe per seed "
                f"({len(seed_list)}); drop --runs"
            )
    result = rp.run_repro(
        space,
        runs=2 if runs is None else runs,
        seed_override=seed,
        set_=set_ or [],
        seeds=seed_list,
        fresh_process=fresh_process,
        check_recipe=checked_recipe,
        config=config,
        threads_for=planned_threads,  # a trial's threads here, as `autotune probe` runs it
    )
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(rp.format_repro(result))
    if result["reproducible"] is False:
        raise typer.Exit(1)
    effect = result.get("seed_effect")
    if effect is not None and not effect["matters"]:  # --seeds: no effect beyond the noise
        from autotune.recipe.seed_effect import ignored_text

        said = ", ".join(str(s) for s in seed_list or [])
        typer.echo(
            f"autotune: {ignored_text(seed_list or [])}"
            if result["bitwise_equal"]
            else f"autotune: the runs on seeds {said} differ no more than two runs of seed "
            f"{(seed_list or [0])[0]} do: the workload ignores its seed, or its run-to-run "
            "noise hides the seed's effect",
            err=True,
        )
        raise typer.Exit(1)


def checked_recipe(path: Path) -> None:
    """A recipe given to `repro`, checked as `autotune verify` checks it before any probe runs
    (`preflight.load_checked`: the file, and its workload resolved here, a missing script
    refused in the same one line; its script compared with the one it recorded)."""
    from autotune.recipe.preflight import load_checked

    load_checked(path)
