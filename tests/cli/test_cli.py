"""The `autotune` command line, through typer's CliRunner (and a subprocess for import costs)."""

from __future__ import annotations

import datetime
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from assets.studies import recorded_study
from typer.testing import CliRunner, Result

from autotune import space as sp
from autotune.cli import app

runner = CliRunner()

TINY = """\
name: tiny
workload: {name: mlp, size: tiny}
probe:
  steps: 30
  micro_batch: 32
  device: cpu
knobs:
  lr: 0.003
"""

CHECKED = """\
name: checked
workload: mlp
knobs:
  lr: 0.01
  clip_norm: {low: 0.1, high: 10.0, log: true}
  warmup_steps: {low: 0, high: 20, step: 5}
  clip_mode: {choices: [global, per_layer]}
  adam_eps: 1.0e-6
env:
  NCCL_ALGO: {choices: [Ring, Tree]}
  NCCL_PROTO: Simple
"""


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def assert_user_error(result: Result, *fragments: str) -> str:
    """Exit 2, one line on stderr, nothing on stdout, no traceback; return the line.

    `probe` without --json announces itself on stderr first; that banner is allowed.
    """
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("probe ")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("autotune: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def probe_json(*args: str | Path) -> dict[str, object]:
    result = invoke("probe", "--json", *args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


# --------------------------------------------------------------------------------------------
# Start-up cost
# --------------------------------------------------------------------------------------------

_NO_HEAVY_IMPORTS = """
import sys
from typer.testing import CliRunner
import autotune.cli

runner = CliRunner()
for args in (["--help"], *([c, "--help"] for c in sys.argv[2:])):
    result = runner.invoke(autotune.cli.app, args)
    assert result.exit_code == 0, (args, result.output)
heavy = sorted(m for m in ("torch", "ray", "mlflow", "optuna") if m in sys.modules)
assert not heavy, f"--help imported: {heavy}"
# check resolves the workload (which imports torch) but starts no Ray, MLflow or Optuna
result = runner.invoke(autotune.cli.app, ["check", sys.argv[1]])
assert result.exit_code == 0, result.output
heavy = sorted(m for m in ("ray", "mlflow", "optuna") if m in sys.modules)
assert not heavy, f"check imported: {heavy}"
"""


@pytest.mark.integration
def test_help_and_check_import_no_heavy_module(write_space: Callable[..., Path]) -> None:
    path = write_space(CHECKED)
    commands = [
        "check",
        "probe",
        "fingerprint",
        "study",
        "show",
        "studies",
        "ui",
        "export",
        "verify",
        "audit",
        "compare",
        "repro",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _NO_HEAVY_IMPORTS, str(path), *commands],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.integration
def test_autotune_help_is_fast() -> None:
    script = Path(sys.executable).with_name("autotune")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "autotune"]
    start = time.perf_counter()
    proc = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    for name in ("check", "probe", "study", "show", "studies", "ui", "export", "verify", "audit"):
        assert name in proc.stdout
    # Importing torch alone takes seconds; the help must not wait for it (generous for a busy CI).
    assert elapsed < 10, f"autotune --help took {elapsed:.1f} s"


def test_no_arguments_shows_help() -> None:
    result = invoke()
    assert "check" in result.output and "probe" in result.output


# --------------------------------------------------------------------------------------------
# check
# --------------------------------------------------------------------------------------------


def _section(output: str, header: str) -> list[str]:
    """The indented lines under `header` (e.g. 'searched:') of `check`'s output."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        body.append(line.split())
    return [" ".join(words) for words in body]


def test_check_prints_searched_knobs_and_their_domains(write_space: Callable[..., Path]) -> None:
    path = write_space(CHECKED)
    result = invoke("check", path)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"space checked  ({path})")
    searched = _section(result.output, "searched:")
    assert searched[:3] == [
        "clip_norm [0.1, 10] log baseline 0.0",  # trial 0 runs PyTorch's: no clipping
        "warmup_steps [0, 20] step 5 baseline 0",
        "clip_mode choices 'global', 'per_layer' baseline 'global'",
    ]
    # the baseline leaves an environment knob unset; a one-process probe drops NCCL's
    assert searched[3].startswith("NCCL_ALGO choices 'Ring', 'Tree' baseline unset"), searched
    assert len(searched) == 4
    fixed = _section(result.output, "fixed:")
    assert "lr 0.01" in fixed
    assert "adam_eps 1e-06" in fixed
    assert "beta1 0.9 [PyTorch default]" in fixed
    assert "NCCL_PROTO 'Simple' [env]" in fixed
    assert not any(line.split()[0] in {"clip_norm", "warmup_steps"} for line in fixed)


def test_check_with_set_moves_a_knob_from_searched_to_fixed(
    write_space: Callable[..., Path],
) -> None:
    path = write_space(CHECKED)
    result = invoke("check", path, "--set", "knobs.clip_norm=0.5", "--set", "probe.steps=77")
    assert result.exit_code == 0, result.output
    assert not any(line.startswith("clip_norm") for line in _section(result.output, "searched:"))
    assert "clip_norm 0.5" in _section(result.output, "fixed:")
    assert "77 steps" in result.output


def test_check_everything_fixed(write_space: Callable[..., Path]) -> None:
    result = invoke("check", write_space(TINY))
    assert result.exit_code == 0, result.output
    assert "searched:  (nothing: every knob is fixed)" in result.output


def test_check_every_builtin_space(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in sp.builtin_names():
        result = invoke("check", name)
        assert result.exit_code == 0, (name, result.output)
        assert f"({sp.builtin_dir() / name}.yaml)" in result.output.splitlines()[0]
        if name == "gradclip":  # a relative constraint reads as one, not as an absolute bound
            assert "final_loss <= 1.05 x baseline" in result.output, result.output
            assert "batch 64 (micro-batch = batch / accum_steps)" in result.output
            assert "target     750 steps: the best promoted through rungs" in result.output
            assert "stopping early on 2 agreeing rung pair(s) in a row" in result.output


# --------------------------------------------------------------------------------------------
# User errors: one line, exit 2, no traceback
# --------------------------------------------------------------------------------------------

# (id, edit of TINY (old, new) or text to append, key path named, line named or None, rule)
BAD_FILES = [
    ("malformed", ("lr: 0.003", "lr: [0.003"), "malformed YAML", None, "column"),
    ("wrong-type", ("steps: 30", "steps: thirty"), "probe.steps", 4, "integer"),
    ("low-above-high", ("lr: 0.003", "lr: {low: 0.1, high: 0.01}"), "knobs.lr", 8, "low <= high"),
    (
        "log-low-zero",
        ("lr: 0.003", "clip_norm: {low: 0.0, high: 1.0, log: true}"),
        "knobs.clip_norm.low",
        8,
        "low > 0",
    ),
    ("unknown-knob", "  clip_nrom: 1.0\n", "knobs.clip_nrom", 9, "did you mean 'clip_norm'?"),
    ("unknown-top-key", "knbos: {}\n", "knbos", 9, "did you mean 'knobs'?"),
    (
        "unknown-domain-key",
        ("lr: 0.003", "lr: {low: 0.001, hihg: 0.1}"),
        "knobs.lr.hihg",
        8,
        "did you mean 'high'?",
    ),
    ("beta1-is-one", "  beta1: 1.0\n", "knobs.beta1", 9, "out of range"),
    ("lr-zero", ("lr: 0.003", "lr: 0"), "knobs.lr", 8, "out of range"),
    ("adam-eps-negative", "  adam_eps: -1\n", "knobs.adam_eps", 9, "out of range"),
    ("ld-preload", "env:\n  LD_PRELOAD: /x.so\n", "env.LD_PRELOAD", 10, "refused"),
    ("pythonpath", "env:\n  PYTHONPATH: /x\n", "env.PYTHONPATH", 10, "refused"),
    ("site", "env:\n  NCCL_SOCKET_IFNAME: eth0\n", "env.NCCL_SOCKET_IFNAME", 10, "site setting"),
    (
        "unknown-metric",
        "objectives:\n  - {metric: throughput, direction: maximize}\n"
        "  - {metric: spike_cnt, direction: minimize}\n",
        "objectives.1.metric",
        11,
        "did you mean 'spike_count'?",
    ),
    (
        "duplicate-objectives",
        "objectives:\n  - {metric: loss_cv, direction: minimize}\n"
        "  - {metric: loss_cv, direction: maximize}\n",
        "objectives",
        9,
        "at most once",
    ),
]


@pytest.mark.parametrize(
    ("change", "key", "line", "rule"),
    [case[1:] for case in BAD_FILES],
    ids=[case[0] for case in BAD_FILES],
)
def test_check_bad_file(
    write_space: Callable[..., Path],
    change: tuple[str, str] | str,
    key: str,
    line: int | None,
    rule: str,
) -> None:
    if isinstance(change, tuple):
        assert TINY.count(change[0]) == 1
        text = TINY.replace(*change)
    else:
        text = TINY + change
    path = write_space(text)
    where = f"{key} (line {line}): " if line else key
    assert_user_error(invoke("check", path), f"{path}: {where}", rule)


@pytest.mark.parametrize(
    ("override", "fragments"),
    [
        ("knobs.lr", ["--set knobs.lr: expected key.path=value"]),
        ("knbos.lr=0.1", ["unknown key 'knbos'", "did you mean 'knobs'?"]),
        ("knobs.lr.low=0.1", ["'knobs.lr' is a value in", "not a section"]),
        ("knobs.beta1=1.0", ["knobs.beta1 (from --set)", "out of range"]),
        ("probe.stpes=60", ["probe.stpes (from --set)", "did you mean 'steps'?"]),
    ],
)
def test_check_bad_set(
    write_space: Callable[..., Path], override: str, fragments: list[str]
) -> None:
    assert_user_error(invoke("check", write_space(TINY), "--set", override), *fragments)


def test_check_missing_file_and_unknown_builtin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke("check", "sub/missing.yaml"), "sub/missing.yaml: no such file")
    line = assert_user_error(invoke("check", "gradclp"), "no built-in space 'gradclp'")
    assert "built-in spaces: " + ", ".join(sp.builtin_names()) in line


# --------------------------------------------------------------------------------------------
# probe (a real probe of the mlp workload on the CPU)
# --------------------------------------------------------------------------------------------


def test_probe_json_ok(write_space: Callable[..., Path]) -> None:
    result = probe_json("--space", write_space(TINY))
    assert result["status"] == "ok"
    assert result["diverged"] is False
    assert "series" not in result
    assert (result["workload"], result["steps_run"], result["steps_planned"]) == ("mlp", 30, 30)
    assert result["knobs"]["lr"] == 0.003  # type: ignore[index]
    metrics = result["metrics"]
    assert isinstance(metrics, dict)
    for name in ("initial_loss", "final_loss", "loss_drop", "loss_cv", "grad_norm_max"):
        value = metrics[name]
        assert isinstance(value, float) and math.isfinite(value), (name, value)
    assert metrics["final_loss"] < metrics["initial_loss"]  # it learns
    assert metrics["spike_count"] == 0


def test_probe_text_summary(write_space: Callable[..., Path]) -> None:
    result = invoke("probe", "--space", write_space(TINY), "--set", "probe.steps=20")
    assert result.exit_code == 0, result.output
    assert "status        ok" in result.stdout
    assert "steps         20/20" in result.stdout
    assert "lr=0.003" in result.stdout
    # throughput with its 95% interval from the step timings (17 steady steps)
    line = next(x for x in result.stdout.splitlines() if x.startswith("throughput "))
    assert line.endswith("(95%, step timings)") and " [" in line


SEARCHED = """\
name: searched
workload: {name: mlp, size: tiny}
probe: {steps: 30, micro_batch: 32, device: cpu}
knobs:
  lr: 0.003
  clip_norm: {low: 0.01, high: 1.0}
  warmup_steps: {low: 0, high: 20, step: 5}
"""


def test_probe_runs_the_baseline_with_a_trials_threads(write_space: Callable[..., Path]) -> None:
    """By default the probe runs trial 0 (PyTorch's defaults for the searched knobs) with the
    CPU threads a trial gets (1 on up to 4 cores, else 2), not every thread of the machine."""
    import os

    import torch

    path = write_space(SEARCHED)
    threads_before = torch.get_num_threads()
    result = probe_json("--space", path, "--set", "probe.steps=10")
    assert result["config"] == "baseline"
    knobs = result["knobs"]
    assert isinstance(knobs, dict)
    assert (knobs["clip_norm"], knobs["warmup_steps"], knobs["lr"]) == (0.0, 0, 0.003)
    assert result["threads"] == (1 if (os.cpu_count() or 1) <= 4 else 2)
    assert torch.get_num_threads() == threads_before  # given back to this process

    text = invoke("probe", "--space", path, "--set", "probe.steps=10")
    assert text.exit_code == 0, text.output
    assert "baseline config (PyTorch's defaults for the searched knobs" in text.stderr
    assert f"config        baseline, {result['threads']} CPU thread(s)" in text.stdout
    assert "clip_norm=0," in text.stdout


def test_probe_other_configs(write_space: Callable[..., Path]) -> None:
    path = write_space(SEARCHED)
    mid = probe_json("--space", path, "--config", "midpoint", "--set", "probe.steps=10")
    assert mid["config"] == "midpoint"
    assert mid["knobs"]["clip_norm"] == pytest.approx(0.505)  # type: ignore[index]
    assert mid["knobs"]["warmup_steps"] == 0  # PyTorch's default lies inside its domain
    fixed = probe_json("--space", path, "--set", "knobs.clip_norm=0.2", "--set", "probe.steps=10")
    assert fixed["config"] == "baseline"
    assert fixed["knobs"]["clip_norm"] == 0.2  # type: ignore[index]
    assert_user_error(invoke("probe", "--space", path, "--config", "best"), "--config best")


NCCL_SEARCHED = """\
name: nccl
workload: {name: mlp, size: tiny}
probe: {steps: 30, micro_batch: 32, device: cpu}
knobs: {lr: 0.003}
env:
  NCCL_ALGO: {choices: [Ring, Tree]}
  NCCL_DEBUG: WARN
"""


def test_probe_midpoint_leaves_unset_what_a_study_here_drops(
    write_space: Callable[..., Path],
) -> None:
    """A study on one process drops the NCCL/RCCL variables it searches and leaves them unset
    in every trial; the midpoint set them at their domains' defaults (NCCL_ALGO=Ring), a
    configuration no trial runs. Now unset as in the study, and said as the study says it."""
    path = write_space(NCCL_SEARCHED)
    args = ("--space", path, "--config", "midpoint", "--set", "probe.steps=10")
    result = invoke("probe", "--json", *args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["env"] == {"NCCL_DEBUG": "WARN"}  # the fixed one stays
    assert (
        "dropped knob NCCL_ALGO: NCCL/RCCL variables act only on GPU collectives (one process "
        "here); left unset, as a study here leaves it"
    ) in result.stderr.splitlines()
    base = invoke("probe", "--space", path, "--set", "probe.steps=10")  # unset there anyway
    assert base.exit_code == 0, base.output
    assert "dropped knob" not in base.stderr


K20 = ("--set", "probe.divergence.persist_steps=20")


def test_probe_high_lr_without_clipping_diverges(write_space: Callable[..., Path]) -> None:
    """lr=5 with no clipping: on mlp the loss jumps from ~1 to ~1e8 at step 1, ~1e11 at step 2.

    The issue asks for `diverged` or spikes; a 1e8-fold loss that persists is a divergence (here
    after 20 spikes in a row: this loss is back under 10x its reference after ~30 steps, and
    then stalls, so the default k = 75 leaves it to the constraints), and the probe stops early
    (stop_early is on by default).
    """
    path = write_space(TINY)
    result = probe_json("--space", path, "--set", "knobs.lr=5", "--set", "probe.steps=60", *K20)
    assert result["knobs"]["lr"] == 5.0  # type: ignore[index]
    assert result["knobs"]["clip_norm"] == 0.0  # type: ignore[index]
    assert result["status"] == "diverged", result
    assert result["divergence_cause"] in {"loss_explosion", "grad_explosion", "nonfinite_loss"}
    # the explosion begins in the first steps and is a verdict once it persisted (or went NaN)
    assert isinstance(result["divergence_onset_step"], int) and result["divergence_onset_step"] < 10
    assert isinstance(result["diverged_at_step"], int) and result["diverged_at_step"] < 60
    assert result["steps_planned"] == 60
    steps_run = result["steps_run"]
    assert isinstance(steps_run, int) and steps_run < 60


@pytest.mark.parametrize("command", ["probe", "check"])
def test_unknown_workload_names_the_space_file(
    write_space: Callable[..., Path], command: str
) -> None:
    path = write_space(TINY.replace("name: mlp", "name: mpl"))
    args = ["probe", "--space", path, "--json"] if command == "probe" else ["check", path]
    assert_user_error(
        invoke(*args),
        f"{path}: workload: ",
        "unknown workload 'mpl'",
        "did you mean 'mlp'?",
        "mlp, resnet, tiny_gpt",
    )


def test_probe_workload_file_missing(
    write_space: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_space(TINY.replace("name: mlp", "name: nope.py:make"))
    monkeypatch.chdir(tmp_path)
    assert_user_error(
        invoke("probe", "--space", path), f"workload file not found: {tmp_path / 'nope.py'}"
    )


WORKLOAD_FILE = """\
from autotune.probe.workload import resolve


def make(size="tiny"):
    return resolve("mlp", size)
"""


def test_a_relative_workload_file_is_found_next_to_its_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wl.py:make` in a space file means the file beside it, from whatever folder autotune is
    run; the space (which the study stores) records its absolute path."""
    folder_a, folder_b = tmp_path / "a", tmp_path / "b"
    folder_a.mkdir(), folder_b.mkdir()
    (folder_a / "wl.py").write_text(WORKLOAD_FILE)
    space = folder_a / "space.yaml"
    space.write_text(TINY.replace("name: mlp", "name: wl.py:make"))
    monkeypatch.chdir(folder_b)
    absolute = f"{folder_a.resolve() / 'wl.py'}:make"
    checked = invoke("check", "../a/space.yaml")
    assert checked.exit_code == 0, checked.output
    assert f"workload   {absolute} (size tiny)" in checked.stdout
    assert sp.load("../a/space.yaml").workload.name == absolute  # what a study stores
    result = probe_json("--space", "../a/space.yaml", "--set", "probe.steps=10")
    assert (result["status"], result["steps_run"]) == ("ok", 10)
    # Given on the command line, the path is relative to the current folder.
    (folder_b / "mine.py").write_text(WORKLOAD_FILE)
    here = invoke("check", space, "--set", "workload.name=mine.py:make")
    assert here.exit_code == 0, here.output
    assert f"workload   {folder_b.resolve() / 'mine.py'}:make" in here.stdout


def test_probe_workload_raising_while_built(
    write_space: Callable[..., Path], tmp_path: Path
) -> None:
    factory = tmp_path / "broken_workload.py"
    factory.write_text(
        "def make(size='tiny'):\n    raise ValueError(f'no data prepared for size {size}')\n"
    )
    path = write_space(TINY.replace("name: mlp", f"name: {factory}:make"))
    assert_user_error(
        invoke("probe", "--space", path, "--json"),
        f"workload '{factory}:make'",
        "ValueError: no data prepared for size tiny",
    )


def test_recipe_commands_name_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke("export", "nosuch"), "no study 'nosuch'")
    assert_user_error(invoke("export", "nosuch", "--format", "docx"), "--format docx", "yaml")
    assert_user_error(invoke("verify", tmp_path / "missing.yaml"), "missing.yaml", "no such recipe")
    bad_steps = invoke("verify", tmp_path / "missing.yaml", "--steps", "0")  # rejected first
    assert_user_error(bad_steps, "--steps 0: steps are a whole number from 10 to 10,000,000")
    assert_user_error(
        invoke("study", "--space", "gradclip", "--warm-start", "nosuch"), "no study 'nosuch'"
    )


# --------------------------------------------------------------------------------------------
# studies, and show of a study that is not here (real SQLite studies, told without Ray)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def three_studies(tmp_path: Path) -> tuple[Path, str]:
    """Folder a/ with studies gradclip (3 of 4 trials) and amp (none yet); a storage elsewhere
    with study remote (2 of 2). Returns a/ and the storage's URL."""
    (tmp_path / "a").mkdir()
    recorded_study(tmp_path / "a", "gradclip", trials=4, finished=3)
    recorded_study(tmp_path / "a", "amp", trials=6, finished=0)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    recorded_study(tmp_path / "c", "remote", trials=2, finished=2, storage=url)
    return tmp_path / "a", url


def studies_json(*args: str | Path) -> list[dict[str, object]]:
    result = invoke("studies", "--json", *args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert isinstance(rows, list)
    return rows


def test_studies_lists_the_studies_here_and_in_a_storage(
    three_studies: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, url = three_studies
    monkeypatch.chdir(here)
    rows = studies_json()
    assert [(r["name"], r["finished"], r["total"]) for r in rows] == [
        ("amp", 0, 6),
        ("gradclip", 3, 4),
    ]
    amp, gradclip = rows
    assert amp["pick"] is None
    # The last trial is best on both objectives: the balanced pick.
    assert gradclip["pick"] == {
        "number": 2,
        "verified": False,
        # Not verified over seeds: no paired comparison with the baseline, said so.
        "verdict": "not compared",
        "defaults_preferred": False,
        "values": {"loss_cv": pytest.approx(0.1 / 3), "throughput": 102.0},
    }
    db = here.resolve() / "autotune-studies/gradclip/optuna.db"
    assert gradclip["storage"] == f"sqlite:///{db}"
    assert str(gradclip["last_change"]).startswith(str(datetime.date.today()))
    with_storage = studies_json("--storage", url)
    assert [(r["name"], r["finished"], r["study_dir"]) for r in with_storage] == [
        ("amp", 0, str(here.resolve() / "autotune-studies/amp")),
        ("gradclip", 3, str(here.resolve() / "autotune-studies/gradclip")),
        ("remote", 2, None),
    ]
    text = invoke("studies")
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[0].split() == [
        "study", "trials", "pick", "(balanced)", "last", "change", "storage"
    ]  # fmt: skip
    # both stopped before their budget.trials ran (`unfinished`): said after their trials
    assert gradclip["unfinished"]["phase"] == amp["unfinished"]["phase"] == "screen"
    lines = {line.split()[0]: line for line in text.stdout.splitlines()[1:]}
    shown = "gradclip  3/4 (stopped in its screen)  trial 2: loss_cv 0.0333, throughput 102"
    assert shown in lines["gradclip"]
    assert "amp       0/6 (stopped in its screen)  none yet" in lines["amp"]

    elsewhere = tmp_path / "b"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    nothing = invoke("studies")
    assert (nothing.exit_code, nothing.stdout) == (0, "no studies under ./autotune-studies\n")
    there = studies_json("--study-dir", here / "autotune-studies")
    assert [r["name"] for r in there] == ["amp", "gradclip"]
    one = studies_json("--study-dir", here / "autotune-studies" / "amp")
    assert [r["name"] for r in one] == ["amp"]
    missing = elsewhere / "nope.db"
    assert_user_error(
        invoke("studies", "--storage", f"sqlite:///{missing}"), f"{missing}: no such database"
    )
    assert not missing.exists()


def test_show_of_an_unknown_study_offers_the_studies_found(
    three_studies: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, url = three_studies
    monkeypatch.chdir(here)
    assert invoke("show", "gradclip").exit_code == 0
    assert_user_error(
        invoke("show", "gradclp"),
        "no study 'gradclp'",
        "(did you mean 'gradclip'?); studies here: amp, gradclip",
    )
    assert_user_error(
        invoke("show", "remot", "--storage", url),
        f"no study 'remot' in {url} (did you mean 'remote'?); studies there: remote",
    )
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    assert_user_error(
        invoke("export", "gradclip"),
        "no study 'gradclip'",
        "no studies under ./autotune-studies here (`autotune studies --study-dir DIR`",
    )


def test_study_seed_out_of_range_names_the_flag() -> None:
    for bad in ("99999999999", "-1"):
        result = invoke("study", "--space", "gradclip.yaml", "--seed", bad)
        line = assert_user_error(result, "--seed: a seed is a whole number from 0 to")
        assert "sampler.seed" not in line


def test_audit_seed_out_of_range_names_the_flag() -> None:
    for bad in (str(2**63), "-5"):
        result = invoke("audit", "--seed", bad, "--no-log")
        assert_user_error(result, "--seed: a seed is a whole number from 0 to")


@pytest.mark.parametrize("bad", ["abc", "0", "-64", "1.5", "99999999999999999999", str(2**42 + 1)])
def test_a_bad_probe_memory_limit_stops_every_probe_command_up_front(
    bad: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`AUTOTUNE_PROBE_MEMORY_MB` is read by each probe process; a bad value is named once by
    the command, before anything runs or is written, not once per failed trial."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_PROBE_MEMORY_MB", bad)
    (tmp_path / "r.yaml").write_text("not read: the environment is checked first\n")
    for args in (
        ["study", "--space", "gradclip"],
        ["probe", "--space", "gradclip"],
        ["verify", "r.yaml"],
        ["migrate", "r.yaml"],
        ["repro", "gradclip"],
    ):
        line = assert_user_error(invoke(*args), f"AUTOTUNE_PROBE_MEMORY_MB={bad!r}", "MiB")
        # a value past what a process can be limited to (a black-box review: an OverflowError
        # in the baseline's probe, and a study folder left behind) is refused as such
        huge = len(bad) > 10
        assert ("at most 4398046511104 MiB" if huge else "positive whole number") in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"], "something was written"
    monkeypatch.setenv("AUTOTUNE_PROBE_MEMORY_MB", "")  # empty: no limit, the command goes on
    line = assert_user_error(invoke("verify", "r.yaml"), "r.yaml")
    assert "AUTOTUNE_PROBE_MEMORY_MB" not in line, line
