"""Helpers of the integration tests: run the CLI, build one small finished study per session,
and find the processes a run left behind.

Every process a test starts gets a unique `AUTOTUNE_TEST_TOKEN` in its environment. Ray nodes,
Ray workers and probe processes inherit it, so a scan of /proc for the token finds exactly the
processes that one test started, whatever their process group or parent, and nothing that other
work on the machine runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).resolve().parent
BEHAVING = ASSETS / "behaving.py"
TOKEN_VAR = "AUTOTUNE_TEST_TOKEN"

# The study most tests share: small enough for a 2-core machine, long enough for a loss curve.
SHARED_TRIALS = 4
SHARED_STEPS = 30
MICRO_BATCH = 32


def mlp_space(
    name: str,
    *,
    trials: int,
    steps: int = SHARED_STEPS,
    timeout_s: int = 120,
    verify_top_k: int = 0,
    verify_seeds: int = 2,
) -> str:
    """A space on the built-in `mlp` workload with two searched knobs (no end-of-study
    verification unless asked: most tests look at the trials). Its objectives are loss_cv and
    throughput, named (not the default stability objective): the tests that record made-up
    trials key their metrics by loss_cv."""
    return f"""\
name: {name}
workload: {{name: mlp, size: tiny}}
objectives:
  - {{metric: loss_cv, direction: minimize}}
  - {{metric: throughput, direction: maximize}}
probe: {{steps: {steps}, micro_batch: {MICRO_BATCH}, device: cpu, telemetry_every: 10}}
budget: {{trials: {trials}, trial_timeout_s: {timeout_s}}}
sampler: {{name: random, seed: 0}}
verify: {{top_k: {verify_top_k}, seeds: {verify_seeds}}}
knobs:
  clip_norm: {{low: 0.1, high: 5.0, log: true}}
  warmup_steps: {{low: 0, high: 10}}
"""


def write(folder: Path, text: str, filename: str = "space.yaml") -> Path:
    path = folder / filename
    path.write_text(text)
    return path


def sqlite_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


def pg_base() -> str:
    """The PostgreSQL base URL of AUTOTUNE_TEST_PG (a server holding the databases
    autotune_optuna and autotune_mlflow, as .ci/run starts it). Without it the test is
    skipped, unless AUTOTUNE_REQUIRE_SERVICES=1 (CI), where that is a failure."""
    import importlib.util

    import pytest

    base = os.environ.get("AUTOTUNE_TEST_PG", "").strip().rstrip("/")
    if not base:
        reason = (
            "AUTOTUNE_TEST_PG is not set (a PostgreSQL base URL with the databases "
            "autotune_optuna and autotune_mlflow, as .ci/run starts it)"
        )
        if os.environ.get("AUTOTUNE_REQUIRE_SERVICES") == "1":
            pytest.fail(reason + " and AUTOTUNE_REQUIRE_SERVICES=1")
        pytest.skip(reason)
    # SQLAlchemy 2.1 maps postgresql:// to psycopg 3; with only psycopg2 installed, name it.
    if (
        base.startswith("postgresql://")
        and importlib.util.find_spec("psycopg") is None
        and importlib.util.find_spec("psycopg2") is not None
    ):
        base = "postgresql+psycopg2://" + base.split("://", 1)[1]
    return base


def new_token() -> str:
    return uuid.uuid4().hex


def cli_env(token: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a CLI run: this one without Ray/MLflow pointers, plus the token."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", TOKEN_VAR)
    }
    env.update(PYTHONUNBUFFERED="1", RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    if token:
        env[TOKEN_VAR] = token
    env.update(extra)
    return env


def autotune_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "autotune", *args]


def autotune(
    args: Sequence[str],
    cwd: Path,
    *,
    token: str | None = None,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m autotune ARGS` to its end in its own session; kill its group on timeout."""
    return run_to_end(
        autotune_cmd(*args), cwd, env or cli_env(token), timeout, f"autotune {' '.join(args)}"
    )


def run_to_end(
    cmd: Sequence[str], cwd: Path, env: dict[str, str], timeout: float, what: str
) -> subprocess.CompletedProcess[str]:
    """Run `cmd` to its end in its own session (stdin closed); on timeout kill its process
    group and fail naming `what`, with the ends of its output."""
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"`{what}` ran past {timeout:.0f} s\n--- stdout\n{out[-4000:]}"
            f"\n--- stderr\n{err[-4000:]}"
        ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def explain(result: subprocess.CompletedProcess[str]) -> str:
    """The end of a run's output, for assertion messages."""
    return (
        f"exit status {result.returncode}\n--- stdout\n{result.stdout[-6000:]}"
        f"\n--- stderr\n{result.stderr[-6000:]}"
    )


def promoted_without_waiting(stdout: str, mid: int, top: int, baseline: int = 0) -> str | None:
    """None when a study's printed order shows asynchronous promotion to the `top` rung;
    else why not. The baseline's probe at `mid` steps is what lets the top rung take its first
    promotions (the others there wait for its result): with `async` the next line is its own
    promotion to `top`, made at once. When some probe at `mid` finished after it, that
    promotion came before the rung ended, which `sync` never does. Which probe finishes last is
    the machine's doing (a cold worker, a busy core), so only the first is asserted always."""
    lines = stdout.splitlines()
    mine = f"  trial {baseline} at {mid} steps: "
    at = [i for i, x in enumerate(lines) if x.startswith(mine)]
    if not at:
        return f"no line for the baseline at {mid} steps"
    following = lines[at[0] + 1] if at[0] + 1 < len(lines) else ""
    if f"trial {baseline} promoted to {top} steps" not in following:
        return f"the baseline's {mid}-step result was followed by {following!r}, not its promotion"
    last_mid = max(i for i, x in enumerate(lines) if f" at {mid} steps: " in x)
    first_top = next(i for i, x in enumerate(lines) if f"promoted to {top} steps" in x)
    if last_mid > at[0] and first_top > last_mid:
        return f"the {top}-step rung waited for the {mid}-step rung's last probe"
    return None


def fill_space(name: str, concurrency: int = 5, cpus_per_trial: float = 0.4) -> str:
    """A space whose rungs fill idle workers (`rungs.fill_idle`): 8 trials of the behaving
    workload screened at 10 steps, rungs 30 -> 90 -> 270, every searched trial slowed to 0.1 s a
    step by its environment knob (the baseline, the knob unset, is not), so the baseline
    finishes rung 1 first and a searched trial finishing next has no quota to go on by."""
    from assets import behaving

    return f"""\
name: {name}
workload: {{name: {BEHAVING}:make, size: tiny}}
probe: {{steps: 10, batch: 32, device: cpu, telemetry_every: 5, threads: 1}}
constraints: []
budget: {{trials: 8, trial_timeout_s: 120, target_steps: 270, concurrency: {concurrency},
          cpus_per_trial: {cpus_per_trial}}}
rungs: {{eta: 3, min_promote: 2, promotion: async, fill_idle: true}}
sampler: {{name: random, seed: 0}}
verify: {{top_k: 0}}
knobs:
  clip_norm: {{low: 0.1, high: 5.0, log: true}}
  warmup_steps: {{low: 0, high: 10}}
env:
  {behaving.MODE_VAR}: {{choices: [slow]}}
"""


def fills(stdout: str) -> list[tuple[int, int]]:
    """(rung, trial) of each probe a study's output says it gave a worker that would idle."""
    out = []
    for line in stdout.splitlines():
        if "(a worker would idle: rungs.fill_idle)" in line:
            rung = int(line.split("rung ")[1].split(":")[0])
            out.append((rung, int(line.split("trial ")[1].split()[0])))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ---------------------------------------------------------------------------------------------
# Processes left behind
# ---------------------------------------------------------------------------------------------


def tagged_processes(token: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment holds the token."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or a zombie
            continue
        found.append((int(entry.name), cmd.strip()[:200]))
    return found


def ended(pid: int, timeout: float = 10) -> bool:
    """Whether process `pid` has ended (a zombie counts: it runs nothing) within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def wait_gone(token: str, timeout: float = 30) -> list[tuple[int, str]]:
    """Wait until no process holds the token; return those still there after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        left = tagged_processes(token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def kill_tagged(token: str, grace_s: float = 10) -> None:
    """SIGTERM, then SIGKILL, every process that holds the token (test teardown)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in tagged_processes(token):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        if not wait_gone(token, grace_s):
            return


def interrupt_group(proc: subprocess.Popen[str], token: str, what: str) -> None:
    """Ctrl-C, as in a terminal: SIGINT to the process group of `proc` (started with
    start_new_session), SIGKILL after 30 s; then fail if a process holding `token` outlived it
    (`what`: the command, for the message)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    left = wait_gone(token, timeout=20)
    kill_tagged(token)
    assert not left, f"processes outlived {what}: {left}"


def pid_alive(pid: int) -> bool:
    """True for a live process (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# ---------------------------------------------------------------------------------------------
# The shared study
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FinishedStudy:
    folder: Path  # the folder the study ran in (its cwd)
    name: str
    trials: int
    steps: int
    tracking_uri: str
    study_dir: Path
    summary: dict[str, Any]
    seconds: float


_SHARED: dict[str, FinishedStudy] = {}


@contextlib.contextmanager
def _cwd(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def finished_study(base: Path) -> FinishedStudy:
    """A small `mlp` study, run in this process once per test session under `base`."""
    if "study" in _SHARED:
        return _SHARED["study"]
    from autotune import space as sp
    from autotune import study as st

    folder = base / "shared-study"
    folder.mkdir(parents=True, exist_ok=True)
    name = "shared-mlp"
    # The best candidate is verified with two other seeds (the recipe tests export and verify it).
    path = write(folder, mlp_space(name, trials=SHARED_TRIALS, verify_top_k=1, verify_seeds=2))
    uri = sqlite_uri(folder)
    for var in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        os.environ.pop(var, None)
    t0 = time.monotonic()
    with _cwd(folder):
        result = st.run(st.StudyOptions(space=sp.load(path), tracking_uri=uri, quiet=True))
    assert not result.interrupted
    _SHARED["study"] = FinishedStudy(
        folder=folder,
        name=name,
        trials=SHARED_TRIALS,
        steps=SHARED_STEPS,
        tracking_uri=result.tracking_uri,
        study_dir=result.study_dir,
        summary=result.summary,
        seconds=time.monotonic() - t0,
    )
    return _SHARED["study"]


# ---------------------------------------------------------------------------------------------
# A recorded study without Ray: trials told through the study's own code
# ---------------------------------------------------------------------------------------------


def recorded_study(
    cwd: Path,
    name: str,
    *,
    trials: int,
    finished: int,
    storage: str | None = None,
    metrics: list[dict[str, float]] | None = None,
    overrides: Sequence[str] = (),
    applied: list[str] | None = None,
) -> Path:
    """A study as `autotune study` run in `cwd` leaves it (./autotune-studies/NAME with its
    study.json and SQLite storage, or `storage`), `finished` of its `trials` told through the
    study's own code with made-up probe results (`metrics[i]` for trial i, else a front that
    improves with every trial; no Ray, no probe, no MLflow); its folder. `overrides`: --set
    key=value items on its space; `applied`: each trial's summary's `script_applied`, as a
    script's trials report what applied their knobs."""
    import json

    from autotune import space as sp
    from autotune import study as st

    space = sp.loads(mlp_space(name, trials=trials), source=name, overrides=overrides)
    study_dir = st.study_dir_for(name, cwd)
    study_dir.mkdir(parents=True)
    opts = st.StudyOptions(space=space, study_dir=study_dir, storage=storage)
    url = st.storage_url(opts, study_dir)
    cond = sp.condition(space, platform="cpu")
    study = st.open_study(opts, st.open_storage(url), cond)
    for i in range(finished):
        trial = study.ask()
        if not trial.user_attrs.get("autotune.baseline"):
            st.suggest(trial, space, cond.searched)
        frozen = study._storage.get_trial(trial._trial_id)
        made_up = {"loss_cv": 0.1 / (i + 1), "throughput": 100.0 + i, "loss_drop": 0.5}
        # As a probe reports them: every knob resolved, the workload's learning rate included.
        knobs = {"lr": 0.003, **trial.params}
        summary = {"metrics": metrics[i] if metrics else made_up, "knobs": knobs}
        if applied is not None:
            summary["script_applied"] = applied
        result = {"outcome": "complete", "summary": summary}
        st.tell(study, frozen, st.complete_outcome(space, frozen, result))
    meta = {"name": name, "storage": url, "tracking_uri": None, "experiment_id": None}
    (study_dir / "study.json").write_text(json.dumps(meta))
    return study_dir


def verified_result(metrics: dict[str, float], steps: int, seeds: Sequence[int] = (1, 2)) -> dict:
    """A candidate's verified result (`autotune.study.attrs.verified_key`) over `seeds` at
    `steps`, every seed complete with `metrics`: what the verification phase stores."""
    from autotune.recipe.seeds import summarize_seeds

    runs = [
        {
            "seed": s,
            "outcome": "complete",
            "summary": {"metrics": metrics, "steps_run": steps, "steps_planned": steps},
        }
        for s in seeds
    ]
    res = summarize_seeds(runs, list(metrics))
    res.update(steps=steps, all_feasible=True)
    for row in res["runs"]:
        row["feasible"] = True
    return res


def baseline_seeds_once(stdout: str, *, baseline: int = 0, seeds: int = 2) -> str | None:
    """None when a study's output shows each of the baseline's `seeds` verification seeds run
    once: beside the top rung (`rungs.promotion: async`, a worker with no promotion to take) or
    in the verification phase after it, which then says how many it read back; else what is
    wrong. Whether any ran beside is the machine's timing."""
    import re

    lines = stdout.splitlines()
    beside = [x for x in lines if "beside the top rung" in x and f"(trial {baseline})" in x]
    late = [x for x in lines if x.lstrip().startswith("[") and f"trial {baseline} seed" in x]
    if len(beside) + len(late) != seeds:
        return f"baseline seeds run beside {beside}, in the verification phase {late}"
    read_back = re.findall(r"(\d+) of \d+ seed\(s\) already run \(read back\)", stdout)
    if read_back != ([str(len(beside))] if beside else []):
        return f"{len(beside)} ran beside, the verification phase read back {read_back}"
    return None
