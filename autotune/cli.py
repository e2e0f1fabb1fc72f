"""The `autotune` command line. Each command parses its options and calls one function.

Nothing heavy (torch, ray, mlflow, optuna) is imported at module import: `autotune --help` is
instant. User errors (`AutotuneError`) print one line and exit with status 2.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from autotune.errors import AutotuneError

app = typer.Typer(
    name="autotune",
    help="Search training-stability and speed knobs with short probes: Optuna decides, Ray runs, "
    "the probe measures, MLflow remembers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])

SpaceOpt = Annotated[
    str,
    typer.Option(
        "--space", "-s", help="A space file, or the name of a built-in space (gradclip, amp, full)."
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

    return wrapper  # type: ignore[return-value]


@app.command()
@user_errors
def check(
    space: Annotated[str, typer.Argument(help="A space file or built-in space name.")],
    set_: SetOpt = None,
) -> None:
    """Validate a space file and print the resolved knobs."""
    from autotune import space as sp
    from autotune.study import check_workload

    s = sp.load(space, set_ or [])
    check_workload(s)
    typer.echo(describe_space(s))


def describe_space(s: Any) -> str:
    """The resolved space: probe, objectives, constraints, searched and fixed knobs."""
    from autotune import space as sp

    lines = [f"space {s.name}  ({s.source})"]
    if s.description:
        lines.append(f"  {s.description.strip()}")
    p = s.probe
    lines.append(f"workload   {s.workload.name} (size {s.workload.size})")
    lines.append(
        f"probe      {p.steps} steps, micro-batch {p.micro_batch}, {p.precision}, "
        f"seed {p.seed}, device {p.device}"
        + (", deterministic" if p.deterministic else "")
        + (f", DDP world size {p.world_size}" if p.world_size > 1 else "")
        + (", measures scaling" if p.measure_scaling else "")
        + (", retries OOM" if p.oom_retry else "")
    )
    lines.append("objectives " + ", ".join(f"{o.direction} {o.metric}" for o in s.objectives))
    lines.append(
        "constraints not diverged"
        + "".join(f", {c.metric} {c.op} {c.value:g}" for c in s.constraints)
    )
    if s.verify.top_k:
        lines.append(f"verify     best {s.verify.top_k} with {s.verify.seeds} other seeds each")
    lines.append(
        f"budget     {s.budget.trials} trials, sampler {s.sampler.name} "
        f"(seed {s.sampler.seed}), trial timeout {s.budget.trial_timeout_s:g} s"
    )
    searched = s.searched()
    lines.append("searched:" if searched else "searched:  (nothing: every knob is fixed)")
    for name, dom in searched.items():
        lines.append(f"  {name:<24} {_domain_text(dom)}   default {s.default_value(name)!r}")
    lines.append("fixed:")
    for name, value in s.fixed_knobs().items():
        if name in searched:
            continue
        shown = "(workload's default)" if value is None else repr(value)
        mark = "" if name in s.knobs else "  [PyTorch default]"
        if name in sp.DDP_KNOBS and name not in s.knobs:
            continue
        lines.append(f"  {name:<24} {shown}{mark}")
    for name, value in s.env.items():
        if name not in searched:
            lines.append(f"  {name:<24} {value!r}  [env]")
    return "\n".join(lines)


def _domain_text(d: Any) -> str:
    if d.is_choice:
        return "choices " + ", ".join(repr(c) for c in d.choices)
    text = f"[{d.low:g}, {d.high:g}]"
    if d.log:
        text += " log"
    if d.step is not None:
        text += f" step {d.step:g}"
    return text


ProbeChoice = Annotated[
    str,
    typer.Option(
        "--config",
        help="baseline: every searched knob at PyTorch's default, as the study's trial 0 runs it; "
        "midpoint: each searched knob at the default `autotune check` shows (the domain's "
        "`default:`, else PyTorch's when inside the domain, else the domain's midpoint). "
        "--set knobs.NAME=VALUE fixes a knob in either.",
    ),
]
PROBE_CONFIGS = {
    "baseline": "PyTorch's defaults for the searched knobs, as trial 0",
    "midpoint": "each searched knob at its domain's default",
}


@app.command()
@user_errors
def probe(
    space: SpaceOpt,
    set_: SetOpt = None,
    config: ProbeChoice = "baseline",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    series: Annotated[bool, typer.Option(help="With --json: include the step series.")] = False,
) -> None:
    """Run one probe of the space, by default its baseline (a study's trial 0), with a trial's
    CPU threads."""
    from autotune import space as sp
    from autotune.process.entry import run as run_probe
    from autotune.study import check_workload

    if config not in PROBE_CONFIGS:
        raise AutotuneError(f"--config {config}: choose one of {', '.join(PROBE_CONFIGS)}")
    s = sp.load(space, set_ or [])
    cfg = probe_config(s, config)
    check_workload(s)
    threads = f"{cfg.threads} CPU thread(s)" if cfg.threads else "torch's CPU threads"
    if not as_json:
        typer.echo(
            f"probe {s.name}: {cfg.workload} ({cfg.size}), {cfg.steps} steps, {cfg.precision}, "
            f"{config} config ({PROBE_CONFIGS[config]}), {threads} as a trial ...",
            err=True,
        )
    result = _run_probe_cli(run_probe, cfg, progress=not as_json and sys.stderr.isatty())
    result["config"] = config
    if as_json:
        if not series:
            result = {k: v for k, v in result.items() if k != "series"}
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(format_probe(result))


def probe_config(s: Any, config: str) -> Any:
    """The ProbeConfig that `autotune probe` runs: the study's own trial setup and thread plan."""
    import dataclasses
    import os

    from autotune.probe import ProbeConfig
    from autotune.study import plan_resources, trial_setup

    if config == "baseline":
        knobs, env = trial_setup(s, {}, baseline=True)
    else:
        knobs, env = s.fixed_knobs(), s.fixed_env()
    gpus = 0
    if s.probe.device != "cpu":
        import torch

        gpus = torch.cuda.device_count()
    _, _, threads = plan_resources(s, {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)})
    cfg = ProbeConfig.from_space(s, knobs=knobs, env=env)
    return dataclasses.replace(cfg, threads=threads)


def _run_probe_cli(
    run_probe: Callable[..., dict[str, Any]], cfg: Any, progress: bool
) -> dict[str, Any]:
    import torch

    from autotune.errors import WorkloadError

    def report(msg: dict[str, Any]) -> None:
        if progress and msg.get("event") == "telemetry":
            done = msg["first_step"] + len(msg["loss"])
            last = msg["loss"][-1]
            sys.stderr.write(f"\r  step {done}/{cfg.steps}  loss {last:.4g}   ")
            sys.stderr.flush()

    before = torch.get_num_threads()
    try:
        result = run_probe(cfg, report)
        result["threads"] = torch.get_num_threads()  # what the probe ran with
    except AutotuneError:
        raise
    except Exception as e:
        raise WorkloadError(
            f"the probe of workload '{cfg.workload}' raised {type(e).__name__}: {e}"
        ) from e
    finally:
        torch.set_num_threads(before)  # the probe's count belongs to the probe
        if progress:
            sys.stderr.write("\n")
    return result


def format_probe(r: dict[str, Any]) -> str:
    """A readable probe summary."""
    m = r.get("metrics", {})
    status = r["status"]
    if status == "diverged":
        status += f" ({r['divergence_cause']} at step {r['diverged_at_step']})"
    lines = [
        f"status        {status}",
        f"workload      {r['workload']} ({r['size']}) on {r['device']}, {r['precision']}, "
        f"effective batch {r['effective_batch']} ({r['micro_batch']} x {r['accum_steps']}"
        + (f" x {r['world_size']} ranks" if (r.get("world_size") or 1) > 1 else "")
        + ")",
        f"steps         {r['steps_run']}/{r['steps_planned']} in {r['wall_s']:.1f} s",
    ]
    order = [
        "initial_loss",
        "final_loss",
        "loss_drop",
        "loss_cv",
        "loss_range",
        "spike_count",
        "grad_norm_p50",
        "grad_norm_p99",
        "grad_norm_max",
        "clip_fraction",
        "skipped_steps",
        "final_scale",
        "throughput",
        "tokens_per_s",
        "peak_mem_mb",
    ]
    for key in order:
        if key in m:
            v = m[key]
            lines.append(f"{key:<13} {'n/a' if v is None else format(v, '.4g')}")
    if r.get("anomaly"):
        a = r["anomaly"]
        lines.append(f"anomaly at step {a['step']}: largest layer gradient norms")
        for layer in a["layers"][:5]:
            lines.append(f"  {layer['name']:<40} {layer['grad_norm']}")
    if r.get("config"):
        lines.append(f"config        {r['config']}, {r['threads']} CPU thread(s)")
    knobs = r["knobs"]
    lines.append(
        "knobs         "
        + ", ".join(
            f"{k}={knobs[k]:g}" if isinstance(knobs[k], float) else f"{k}={knobs[k]}"
            for k in (
                "lr",
                "clip_norm",
                "clip_mode",
                "warmup_steps",
                "schedule",
                "adam_eps",
                "accum_steps",
            )
        )
    )
    return "\n".join(lines)


@app.command()
@user_errors
def fingerprint(
    as_json: Annotated[bool, typer.Option("--json", help="Print the fingerprint as JSON.")] = False,
) -> None:
    """Print this machine's hardware and software fingerprint and its hash."""
    from autotune import fingerprint as fpm

    fp = fpm.collect()
    typer.echo(json.dumps(fp, indent=2, default=str) if as_json else fpm.format_text(fp))


@app.command()
@user_errors
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
            help="MLflow tracking URI. Default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in "
            "this folder."
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to join (host:6379 or auto). Default: $RAY_ADDRESS, else a local Ray."
        ),
    ] = None,
    study_dir: Annotated[
        Path | None,
        typer.Option(help="Folder for the study's files. Default: ./autotune-studies/NAME."),
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

    overrides = list(set_ or [])
    if seed is not None:
        overrides.append(f"sampler.seed={seed}")
    s = sp.load(space, overrides)
    warm = st.load_warm_start(warm_start, storage) if warm_start else None
    result = st.run(
        st.StudyOptions(
            space=s,
            study_dir=study_dir,
            storage=storage,
            tracking_uri=tracking_uri,
            address=address,
            resume=resume,
            quiet=quiet,
            warm_start=warm,
        )
    )
    typer.echo(st.format_summary(result.summary, tracking_uri=result.tracking_uri))
    if result.interrupted:
        raise typer.Exit(130)


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

    optuna_study, space, study_dir, meta = st.find_study(study_ref, storage)
    summary = st.summarize(optuna_study, space, study_dir)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
    else:
        typer.echo(st.format_summary(summary, tracking_uri=meta.get("tracking_uri")))


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
    from autotune.study import listing as sl

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
    port: Annotated[int, typer.Option(help="Port.")] = 5000,
    expose: Annotated[
        bool,
        typer.Option(help="Allow a --host beyond loopback (the UI has no authentication)."),
    ] = False,
) -> None:
    """Start the MLflow UI on the study's tracking store and print its URL."""
    from autotune import tracking
    from autotune.tracking.ui import check_host, serve

    bind_host, poll_host = check_host(host, port, expose=expose)  # before any store is read
    uri = tracking_uri
    experiment_id = None
    if study_ref is not None:
        from autotune import study as st

        _, _, _, meta = st.find_study(study_ref)
        uri = uri or meta.get("tracking_uri")
        experiment_id = meta.get("experiment_id")
    serve(
        tracking.resolve_uri(uri),
        host=bind_host,
        port=port,
        poll_host=poll_host,
        experiment_id=experiment_id,
    )


from autotune import cli_repro  # noqa: E402

cli_repro.register(app, user_errors)


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
) -> None:
    """Export a study's chosen configuration as a recipe (or another format)."""
    from autotune.recipe import exporters as formats
    from autotune.study import export as ex

    if fmt not in formats.FORMATS:
        raise AutotuneError(f"--format {fmt}: choose one of {', '.join(formats.FORMATS)}")
    recipe = ex.recipe_from_study(study_ref, pick, storage)
    text = ex.write(recipe, fmt, output)
    if output and output != "-":
        typer.echo(f"wrote {output} ({fmt}): {recipe.describe()}", err=True)
    else:
        typer.echo(text, nl=not text.endswith("\n"))


@app.command()
@user_errors
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
    timeout: Annotated[float, typer.Option(help="Seconds allowed per probe.")] = 600.0,
    steps: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Run the recipe and the baseline this many steps instead of the probe's "
            "(e.g. 5x: a short probe's ranking does not always hold for a longer run). The "
            "promise is then not compared.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Re-run a recipe with other seeds on this machine and check what it promised.

    Exit status 1 when every seed of the recipe failed (the causes are printed)."""
    from autotune.recipe import Recipe
    from autotune.recipe import verify as vf

    recipe = Recipe.load(recipe_path)
    report = vf.verify_recipe(
        recipe, source=recipe_path, seeds=seeds, baseline=baseline, timeout_s=timeout, steps=steps
    )
    report["run_id"] = vf.log_report(recipe, report, tracking_uri)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        typer.echo(vf.format_report(report))
        typer.echo(f"logged to MLflow: run {report['run_id']}")
    if vf.all_failed(report):
        typer.echo(
            f"autotune: every seed of recipe {recipe.name} failed: nothing was verified", err=True
        )
        raise typer.Exit(1)


def main() -> None:
    try:
        app()
    except AutotuneError as e:  # raised outside a command (should not happen)
        typer.echo(f"autotune: error: {e}", err=True)
        sys.exit(e.exit_code)
