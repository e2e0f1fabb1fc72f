"""A script's recipe records the SHA-256 of the script its trial ran (`workload.script_sha256`,
from the trial's probe summary), `Recipe.load` refuses a malformed one in one line (and reads a
recipe without one), and `autotune verify`, `repro` and `migrate` each say once, before their
probes, when the script has changed since: a warning, not a refusal. The export's hash comes
from a real script probe; the commands' probes are stand-ins (the process boundary) in the unit
tests and real in the integration test."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from assets.cli import invoke, one_line_error
from assets.studies import recorded_study

from autotune import Recipe
from autotune import space as sp
from autotune import study as st
from autotune.errors import RecipeError
from autotune.probe.script_run import run_script
from autotune.recipe.script_hash import script_changed
from autotune.study import export as ex
from autotune.study.records import write_outcome

SCRIPT = """\
import torch
import autotune

trial = autotune.trial(steps=10, micro_batch=4)
model = torch.nn.Linear(4, 1)
opt = trial.recipe.optimizer(model.parameters())
g = torch.Generator().manual_seed(trial.seed)
for step in range(trial.steps):
    x = torch.randn(trial.micro_batch, 4, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    loss.backward()
    norm = trial.recipe.clip_and_step(opt)
    trial.report(step, loss=loss.detach(), grad_norm=norm)
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def script_recipe(script: Path, recorded: str | None) -> Recipe:
    knobs = {name: info.default for name, info in sp.KNOBS.items()}
    workload: dict[str, Any] = {"script": str(script), "args": []}
    if recorded is not None:
        workload["script_sha256"] = recorded
    return Recipe(
        name="s-trial1",
        workload=workload,
        precision="fp32",
        micro_batch=4,
        knobs={**knobs, "lr": 0.01, "clip_norm": 1.0},
        probe={"steps": 10, "seed": 0, "device": "cpu"},
        source={"study": "s", "trial": 1, "searched": ["clip_norm"]},
    )


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("autotune: warning: ")]


# ----- the export records it ---------------------------------------------------------------------


def exported_from_a_script_study(tmp_path: Path) -> tuple[Recipe, Path]:
    """A study of `train.py` (trials told with made-up values, `recorded_study`) whose trials'
    records hold a real probe's summary of the script: the recipe export writes, and the
    script."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    folder = recorded_study(
        tmp_path, "sc", trials=3, finished=3, overrides=[f"workload={{script: {script}}}"]
    )
    _, space, _, _ = st.find_study(str(folder))
    summary = run_script(replace(sp.probe_config(space), steps=10, device="cpu", threads=1))
    assert summary["status"] == "ok", summary
    for number in range(3):
        write_outcome(folder, {"number": number, "outcome": "complete", "summary": summary})
    return ex.recipe_from_study(str(folder)), script


def test_the_export_records_the_scripts_sha256(tmp_path: Path) -> None:
    recipe, script = exported_from_a_script_study(tmp_path)
    assert recipe.workload == {
        "script": str(script),
        "args": [],
        "script_sha256": sha256(script),
    }
    path = recipe.save(tmp_path / "r.yaml")
    assert f"script_sha256: {sha256(script)}" in path.read_text()
    assert Recipe.load(path) == recipe


# ----- the file ----------------------------------------------------------------------------------


def test_a_recipe_keeps_its_scripts_hash_and_an_older_one_loads_without(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    digest = sha256(script)
    r = script_recipe(script, digest.upper())  # read in either case, kept lowercase
    back = Recipe.load(r.save(tmp_path / "r.yaml"))
    assert back.workload["script_sha256"] == digest
    assert Recipe.loads(back.dump()) == back
    old = Recipe.load(script_recipe(script, None).save(tmp_path / "old.yaml"))
    assert "script_sha256" not in old.workload
    assert old.probe_config().script == str(script)


def edited(tmp_path: Path, **workload: Any) -> Path:
    """A script's recipe (train.py in tmp_path) whose workload section is edited by hand."""
    data = yaml.safe_load(script_recipe(tmp_path / "train.py", None).dump())
    data["workload"].update(workload)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("xyz", "'xyz'"),
        ("a" * 63, repr("a" * 63)),
        ("g" * 64, repr("g" * 64)),
        ("a" * 64 + "\n", None),
        (12345, "12345"),
        (["a" * 64], None),
        (True, "True"),
    ],
    ids=["short", "63", "not_hex", "newline", "int", "list", "bool"],
)
def test_a_malformed_script_hash_is_refused_in_one_line(
    tmp_path: Path, value: Any, shown: str | None
) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    path = edited(tmp_path, script_sha256=value)
    prefix = f"{path}: workload.script_sha256: must be the script's SHA-256, 64 hex digits, got "
    with pytest.raises(RecipeError) as e:
        Recipe.load(path)
    message = str(e.value)
    assert message.startswith(prefix) and "\n" not in message, message
    if shown is not None:
        assert message == prefix + shown
    one_line_error(invoke("verify", path, "--seeds", "1"), prefix)


def test_a_named_workload_has_no_script_hash(tmp_path: Path) -> None:
    path = edited(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["workload"] = {"name": "mlp", "size": "tiny", "script_sha256": "0" * 64}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError) as e:
        Recipe.load(path)
    assert str(e.value) == (
        f"{path}: workload.script_sha256: is the SHA-256 of a `script`; a named workload has none"
    )


# ----- the comparison: one helper, three commands ---------------------------------------------


def test_script_changed_names_the_script_and_both_hashes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    was = sha256(script)
    workload = {"script": str(script), "args": [], "script_sha256": was}
    assert script_changed(workload) is None  # the file the recipe recorded
    assert script_changed({"script": str(script), "args": []}) is None  # none recorded
    assert script_changed({"name": "mlp", "size": "tiny"}) is None
    script.write_text(SCRIPT + "# edited\n")
    now = sha256(script)
    assert script_changed(workload) == (
        f"{script} changed since the recipe was made (sha256 {was[:12]} -> {now[:12]}); "
        "the probes measure the script as it is now"
    )
    script.unlink()
    assert script_changed(workload) is None  # a missing script is each command's own error


class ProbeRan(Exception):
    """A command reached its first probe (a stand-in's: the process boundary)."""


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every probe verify, migrate or repro would start records itself and stops the command."""
    import autotune.process.launcher as launcher
    from autotune.repro import repro as rp

    ran: list[str] = []

    def stand_in(*_a: Any, **_k: Any) -> Any:
        ran.append("probe")
        raise ProbeRan

    monkeypatch.setattr(launcher, "run_trial_process", stand_in)  # verify's and migrate's
    monkeypatch.setattr(rp, "_run_fresh", stand_in)  # repro's: a script's, in its own process
    monkeypatch.setattr(rp, "_run_here", stand_in)
    return ran


COMMANDS: dict[str, Callable[[Path, Path], list[str | Path]]] = {
    "verify": lambda r, out: ["verify", r, "--seeds", "1", "--no-baseline"],
    "repro": lambda r, out: ["repro", r],
    "migrate": lambda r, out: ["migrate", r, "--seeds", "2", "--no-audit", "-o", out],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_warns_once_when_the_script_changed_and_runs_it(
    tmp_path: Path, probes: list[str], command: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    path = script_recipe(script, sha256(script)).save(tmp_path / "r.yaml")
    old = script_recipe(script, None).save(tmp_path / "old.yaml")
    args = COMMANDS[command]

    was = sha256(script)
    same = invoke(*args(path, tmp_path / "out1"))
    assert isinstance(same.exception, ProbeRan) and warnings(same.stderr) == []
    script.write_text(SCRIPT + "# edited\n")
    changed = invoke(*args(path, tmp_path / "out2"))
    assert isinstance(changed.exception, ProbeRan), changed.output  # a warning, not a refusal
    assert warnings(changed.stderr) == [
        f"autotune: warning: {script} changed since the recipe was made (sha256 {was[:12]} -> "
        f"{sha256(script)[:12]}); the probes measure the script as it is now"
    ]
    unrecorded = invoke(*args(old, tmp_path / "out3"))
    assert isinstance(unrecorded.exception, ProbeRan) and warnings(unrecorded.stderr) == []
    assert probes == ["probe"] * 3


# ----- for real: a script study's recipe, its script edited, then missing ------------------------


@pytest.mark.integration
def test_repro_runs_the_edited_script_of_an_exported_recipe_and_says_so(tmp_path: Path) -> None:
    recipe, script = exported_from_a_script_study(tmp_path)
    path = recipe.save(tmp_path / "r.yaml")
    was = sha256(script)
    script.write_text(SCRIPT.replace("torch.randn(", "2 * torch.randn("))
    run = invoke("repro", path)
    assert run.exit_code == 0, (run.output, run.exception)
    assert "REPRODUCIBLE: bitwise identical" in run.stdout
    assert warnings(run.stderr) == [
        f"autotune: warning: {script} changed since the recipe was made (sha256 {was[:12]} -> "
        f"{sha256(script)[:12]}); the probes measure the script as it is now"
    ]
    # A missing script: one line, the same from each command (the recipe's key, before any
    # probe: repro reported the probe's FileNotFoundError once), no traceback, no warning.
    script.unlink()
    no_file = f"{path}: workload.script: {script}: no such file"
    one_line_error(invoke("verify", path, "--seeds", "1"), no_file)
    one_line_error(invoke("migrate", path, "-o", tmp_path / "out"), no_file)
    one_line_error(invoke("repro", path), no_file)


@pytest.mark.integration
def test_migrate_says_in_its_report_that_the_script_changed(tmp_path: Path) -> None:
    """A review: only stderr said the script had changed since export; migration.md did not."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    path = script_recipe(script, sha256(script)).save(tmp_path / "r.yaml")
    was = sha256(script)
    script.write_text(SCRIPT + "# edited\n")
    out = tmp_path / "mig"
    run = invoke("migrate", path, "--seeds", "2", "--no-audit", "--threads", "1", "-o", out)
    assert run.exit_code in (0, 1), (run.output, run.exception)
    text = (out / "migration.md").read_text()
    assert "The workload's script changed since the recipe was made" in text
    assert f"(sha256 {was[:12]} -> {sha256(script)[:12]})" in text
