"""`autotune check`, `autotune probe` and `autotune fingerprint`: a space file, one probe of it,
and this machine's fingerprint."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer

from autotune.cli.app import SetOpt, SpaceOpt, app, runs_probes, user_errors
from autotune.errors import AutotuneError
from autotune.knobs import clip_text


@app.command()
@user_errors
def check(
    space: Annotated[str, typer.Argument(help="A space file or built-in space name.")],
    set_: SetOpt = None,
) -> None:
    """Validate a space file and print the resolved knobs (a GPU probe.device needs a GPU
    torch sees here, unless $RAY_ADDRESS names the cluster a study would run on)."""
    from autotune import space as sp
    from autotune.cli.check_gpus import check_gpus_per_trial, gpus_here
    from autotune.study import check_workload
    from autotune.study.driver import check_device
    from autotune.study.fits import check_trial_fits, local_node

    s = sp.load(space, set_ or [])
    check_workload(s)
    if not os.environ.get("RAY_ADDRESS"):  # a study from here runs its probes here
        check_device(s)
        check_trial_fits(s, [local_node(s)], "this machine")
        check_gpus_per_trial(s, gpus_here())
    typer.echo(describe_space(s))


def describe_space(s: Any) -> str:
    """The resolved space: probe, objectives, constraints, searched and fixed knobs."""
    from autotune import space as sp
    from autotune.study import trial_setup

    lines = [f"space {s.name}  ({s.source})"]
    if s.description:
        lines.append(f"  {s.description.strip()}")
    p = s.probe
    w = s.workload
    if w.script is not None:
        lines.append(
            f"workload   script {w.script}"
            + (f", args {shlex.join(w.args)}" if w.args else ", no args")
            + (f", preloads {', '.join(w.preload)}" if w.preload else "")
        )
    else:
        lines.append(f"workload   {w.name} (size {w.size})")
    lines.append(
        f"probe      {p.steps} steps, batch {p.samples_per_step} (micro-batch = batch / "
        f"accum_steps), {p.precision}, "
        f"seed {p.seed}, device {p.device}"
        + f", {_threads_text(s)}"
        + (", deterministic" if p.deterministic else "")
        + (f", DDP world size {p.world_size}" if p.world_size > 1 else "")
        + (", measures scaling" if p.measure_scaling else "")
        + (", retries OOM" if p.oom_retry else "")
    )
    lines.append("objectives " + ", ".join(f"{o.direction} {o.metric}" for o in s.objectives))
    lines.append("constraints not diverged" + "".join(f", {c.label}" for c in s.constraints))
    if s.verify.top_k:
        lines.append(f"verify     best {s.verify.top_k} with {s.verify.seeds} other seeds each")
    lines.append(
        f"budget     {s.budget.trials} trials, sampler {s.sampler.name} "
        f"(seed {s.sampler.seed}), trial timeout {s.budget.trial_timeout_s:g} s"
    )
    target = s.budget.target_steps
    lines.append(
        f"target     {target} steps: the best promoted through rungs (eta {s.rungs.eta}, "
        f"grow {s.rungs.grow}, stopping early on {s.rungs.agree_rungs} agreeing rung pair(s) "
        "in a row) and decided there"
        if target and target > p.steps
        else f"target     none: decided at the probe length ({p.steps} steps)"
    )
    searched = s.searched()
    dropped = dropped_here(s)
    base_knobs, base_env = trial_setup(s, {}, baseline=True)  # what trial 0 runs
    lines.append("searched:" if searched else "searched:  (nothing: every knob is fixed)")
    for name, dom in searched.items():
        under = sp.CLIP_CHILDREN.get(name) if "clip_policy" in searched else None
        when = f"   (only when clip_policy is {under})" if under else ""
        if name in s.env:  # the baseline runs with the library's own setting
            base = repr(base_env[name]) if name in base_env else "unset"
        else:  # the baseline runs PyTorch's default (the learning rate: the space's)
            value = base_knobs.get(name, s.default_value(name))
            base = "(workload's default)" if value is None else repr(value)
        here = f"   [dropped here: {dropped[name]}]" if name in dropped else ""
        lines.append(f"  {name:<24} {_domain_text(dom)}   baseline {base}{when}{here}")
    lines.append("fixed:")
    for name, value in s.fixed_knobs().items():
        if name in searched:
            continue
        shown = "(workload's default)" if value is None else repr(value)
        mark = "" if name in s.knobs else "  [PyTorch default]"
        if name == "batch" and value is None:
            shown, mark = repr(p.samples_per_step), "  [probe.batch]"
        if name in sp.DDP_KNOBS and name not in s.knobs:
            continue
        if name in sp.CLIP_CHILDREN and not sp.clip_child_possible(s, name):
            continue  # the setting of a clipping policy this space never runs
        lines.append(f"  {name:<24} {shown}{mark}")
    for name, value in s.env.items():
        if name not in searched:
            lines.append(f"  {name:<24} {value!r}  [env]")
    warnings = sp.dtype_warnings(s) + sp.schedule_warnings(s) + sp.env_warnings(s)
    if warnings:
        lines.append("warnings:")
        lines += [f"  {w}" for w in warnings]
    return "\n".join(lines)


def dropped_here(s: Any) -> dict[str, str]:
    """The searched knobs a study on this machine drops (they cannot act here: NCCL/RCCL
    variables on a CPU or one process, ROCm ones off ROCm, ...), with why: as the study
    conditions its space (`space.condition` on this machine's fingerprint)."""
    return dict(conditioned_here(s).dropped)


def conditioned_here(s: Any) -> Any:
    """The space as a study on this machine conditions it (`space.Conditioned`)."""
    from autotune import fingerprint
    from autotune import space as sp

    return sp.condition_on(s, fingerprint.collect())


def _threads_text(s: Any) -> str:
    """The CPU threads of one trial's probe: probe.threads, else what a study plans here."""
    threads = planned_threads(s)
    if s.probe.threads:
        return f"{threads} CPU thread(s) per trial (probe.threads)"
    if threads is None:
        return "torch's CPU threads (probe.threads unset, on a GPU)"
    return f"{threads} CPU thread(s) per trial (planned for this machine; probe.threads unset)"


def planned_threads(s: Any) -> int | None:
    """The CPU threads a study gives each trial's probe on this machine (None: torch's)."""
    from autotune.study import plan_resources

    gpus = 0
    if s.probe.device != "cpu":
        import torch

        gpus = torch.cuda.device_count()
    _, _, threads = plan_resources(s, {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)})
    return threads


def _domain_text(d: Any) -> str:
    if d.auto:  # `clip_norm: auto`: the placeholder range is never searched
        return "auto: a log range measured from the baseline's gradient norms (median to p99)"
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
@runs_probes
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
    from autotune.process import leftovers, memory_limit
    from autotune.process.cores import check_fits_here
    from autotune.process.entry import run_here as run_probe
    from autotune.process.launcher import ProbeFailed
    from autotune.study import check_workload
    from autotune.study.driver import check_device

    if config not in PROBE_CONFIGS:
        raise AutotuneError(f"--config {config}: choose one of {', '.join(PROBE_CONFIGS)}")
    s = sp.load(space, set_ or [])
    cond = conditioned_here(s) if config == "midpoint" else None
    cfg = probe_config(s, config, cond)
    check_workload(s)
    check_device(s)  # the probe runs here
    check_fits_here(cfg, s.source)  # its ranks and threads on this machine's cores
    threads = f"{cfg.threads} CPU thread(s)" if cfg.threads else "torch's CPU threads"
    said = sp.env_dropped(s, cond) if cond is not None else {}
    for name, why in said.items():  # what `midpoint_env` left unset, said as a study says it
        typer.echo(sp.env_dropped_text(name, why), err=True)
    if not as_json:
        typer.echo(
            f"probe {s.name}: {cfg.workload} ({cfg.size}), {cfg.steps} steps, {cfg.precision}, "
            f"{config} config ({PROBE_CONFIGS[config]}), {threads} as a trial ...",
            err=True,
        )
    # A user's script runs apart, as a trial's: whatever it does. So does any probe under
    # AUTOTUNE_PROBE_MEMORY_MB: the limit is a probe process's own (`memory_limit.apply`), and
    # this command's process is not one.
    apart = cfg.script is not None or memory_limit.limit_mb() is not None
    if apart:
        run_probe = _apart(s.budget.trial_timeout_s)
    # With --json, stdout is the JSON alone: what the workload prints (a script's own log
    # lines, a Trainer's dicts) goes to stderr, from this process and any it starts.
    failed = None
    # What the probe leaves running (a workload's helper) is ended with it: it would hold this
    # command's output open (`autotune probe ... | grep` waiting for it) and the machine's cores.
    with leftovers.ended(), _stdout_to_stderr() if as_json else contextlib.nullcontext():
        try:
            tty = not as_json and sys.stderr.isatty()
            result = _run_probe_cli(run_probe, cfg, progress=tty, apart=apart)
        except ProbeFailed as e:
            failed = e
    if failed is not None:  # the failure as a trial's: JSON (with --json), one line, status 2
        if as_json:
            typer.echo(json.dumps({**failed.record(), "config": config}, indent=2, default=str))
        raise failed
    result["config"] = config
    if as_json:
        if not series:
            result = {k: v for k, v in result.items() if k != "series"}
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(format_probe(result))


def _apart(timeout_s: float) -> Callable[..., dict[str, Any]]:
    """`run_apart` for `autotune probe`: the trial's time limit; the probe's log on stderr."""
    from autotune.process.launcher import run_apart

    def log(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def run(cfg: Any, report: Any) -> dict[str, Any]:
        return run_apart(cfg, report, timeout_s=timeout_s, on_log=log)

    return run


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 is stderr's meanwhile (Python's sys.stdout included), then itself."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def probe_config(s: Any, config: str, cond: Any = None) -> Any:
    """The ProbeConfig that `autotune probe` runs: the study's own trial setup and thread plan;
    the midpoint's environment as a study conditioned by `cond` (default: on this machine,
    `conditioned_here`) sets it, a variable it drops left unset (`space.midpoint_env`)."""
    import dataclasses

    from autotune import space as sp
    from autotune.study import trial_setup

    if config == "baseline":
        knobs, env = trial_setup(s, {}, baseline=True)
    else:
        knobs, env = (
            s.fixed_knobs(),
            sp.midpoint_env(s, cond if cond is not None else conditioned_here(s)),
        )
    cfg = sp.probe_config(s, knobs=knobs, env=env)
    return dataclasses.replace(cfg, threads=planned_threads(s))


def _run_probe_cli(
    run_probe: Callable[..., dict[str, Any]], cfg: Any, progress: bool, apart: bool
) -> dict[str, Any]:
    import torch

    def report(msg: dict[str, Any]) -> None:
        if progress and msg.get("event") == "telemetry":
            done = msg["first_step"] + len(msg["loss"])
            last = msg["loss"][-1]
            sys.stderr.write(f"\r  step {done}/{cfg.steps}  loss {last:.4g}   ")
            sys.stderr.flush()

    before = torch.get_num_threads()
    try:
        result = run_probe(cfg, report)
        # what the probe ran with (a process of its own: the threads it was given)
        result["threads"] = (apart and cfg.threads) or torch.get_num_threads()
    finally:
        torch.set_num_threads(before)  # the probe's count belongs to the probe
        if progress:
            sys.stderr.write("\n")
    return result


def format_probe(r: dict[str, Any]) -> str:
    """A readable probe summary."""
    from autotune.probe.summary import ProbeStatus

    m = r.get("metrics", {})
    status = r["status"]
    if status == ProbeStatus.DIVERGED:
        onset = r.get("divergence_onset_step")
        later = onset is not None and onset != r["diverged_at_step"]
        since = f", since step {onset}" if later else ""
        status += f" ({r['divergence_cause']} at step {r['diverged_at_step']}{since})"
    undone = r.get("divergence_withdrawn")
    if undone:  # carried on to the end (stop_early: false) past a trend verdict, and back
        status += (
            f" ({undone['cause']} at step {undone['step']}, since step {undone['onset']}, "
            f"withdrawn: the loss came back by the end, median {undone['end_median']:.4g} "
            f"under {undone['level']:.4g})"
        )
    spikes = r.get("divergence_spike_count") or 0
    if spikes:  # steps past a threshold that were no verdict by themselves
        shown = [str(s["step"]) for s in (r.get("divergence_spikes") or [])[:5]]
        first = ", ".join(shown) + (", ..." if spikes > len(shown) else "")
        ratio = r.get("divergence_max_loss_ratio")
        tail = f"; loss up to {ratio:.3g}x the initial" if ratio is not None else ""
        status += f"; {spikes} spike{'s' if spikes > 1 else ''} (step {first}{tail})"
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
        "noise_per_drop",
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
        "scaling_efficiency",  # probe.measure_scaling: throughput over world_size x one process's
        "peak_mem_mb",
    ]
    for key in order:
        if key in m:
            v = m[key]
            lo, hi = m.get(f"{key}_low"), m.get(f"{key}_high")
            bounds = [lo, hi]
            timed = v is not None and all(isinstance(x, float) and math.isfinite(x) for x in bounds)
            span = f" [{lo:.4g}, {hi:.4g}] (95%, step timings)" if timed else ""
            lines.append(f"{key:<13} {'n/a' if v is None else format(v, '.4g')}{span}")
    if r.get("anomaly"):
        a = r["anomaly"]
        lines.append(f"anomaly at step {a['step']}: largest layer gradient norms")
        for layer in a["layers"][:5]:
            lines.append(f"  {layer['name']:<40} {layer['grad_norm']}")
    if r.get("config"):
        lines.append(f"config        {r['config']}, {r['threads']} CPU thread(s)")
    knobs = r["knobs"]
    names = ("lr", "clip_norm", "clip_mode", "warmup_steps", "schedule", "adam_eps", "accum_steps")
    lines.append(
        "knobs         "
        + ", ".join(
            f"{k}={knobs[k]:g}" if isinstance(knobs[k], float) else f"{k}={knobs[k]}" for k in names
        )
        + f", clip={clip_text(knobs)}"
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
