"""Finding a space: built-in spaces by bare name, a local file first; the shipped spaces'
own checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import space as sp
from autotune.errors import SpaceError

# --------------------------------------------------------------------------------------------
# find: built-in spaces by bare name
# --------------------------------------------------------------------------------------------

GRADCLIP = sp.builtin_dir() / "gradclip.yaml"


def test_find_gradclip_by_bare_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no local file of that name
    assert sp.find("gradclip") == GRADCLIP
    assert sp.find("gradclip.yaml") == GRADCLIP
    assert "gradclip" in sp.builtin_names()
    assert sp.load("gradclip") == sp.load(GRADCLIP)
    with pytest.raises(SpaceError, match=r"did you mean 'gradclip'\?"):
        sp.find("gradclp")


@pytest.fixture
def fake_builtins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of built-in spaces standing in for the shipped one; cwd is elsewhere."""
    folder = tmp_path / "builtin"
    folder.mkdir()
    for name in ("gradclip", "amp", "full"):
        (folder / f"{name}.yaml").write_text(f"name: {name}\nworkload: mlp\n")
    (folder / "notes.txt").write_text("not a space")
    monkeypatch.setattr(sp.builtin, "builtin_dir", lambda: folder)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return folder


def test_find_bare_name_in_builtin_folder(fake_builtins: Path) -> None:
    assert sp.builtin_names() == ["amp", "full", "gradclip"]
    assert sp.find("amp") == fake_builtins / "amp.yaml"
    assert sp.find("amp.yaml") == fake_builtins / "amp.yaml"
    assert sp.load("full").name == "full"


def test_local_file_wins_over_builtin(fake_builtins: Path) -> None:
    Path("amp.yaml").write_text("name: local\nworkload: mlp\n")
    assert sp.load("amp.yaml").name == "local"


def test_unknown_name_lists_builtins_with_did_you_mean(fake_builtins: Path) -> None:
    with pytest.raises(SpaceError) as info:
        sp.find("gradclp")
    message = str(info.value)
    assert message.startswith("gradclp: no such file")
    assert "did you mean 'gradclip'?" in message
    assert "built-in spaces: amp, full, gradclip" in message


def test_missing_path_with_folder_is_no_such_file(fake_builtins: Path) -> None:
    with pytest.raises(SpaceError, match=r"^sub/gradclip\.yaml: no such file$"):
        sp.load("sub/gradclip.yaml")


def test_real_builtin_listing_matches_the_folder() -> None:
    shipped = sorted(p.stem for p in sp.builtin_dir().glob("*.yaml"))
    assert sp.builtin_names() == shipped
    assert (sp.builtin_dir() / "__init__.py").is_file()


EXAMPLE_SPACES = sorted((Path(__file__).parents[2] / "examples").glob("*/space.yaml"))


@pytest.mark.parametrize(
    "ref", [*sp.builtin_names(), *map(str, EXAMPLE_SPACES)], ids=lambda r: Path(r).parent.name or r
)
def test_stability_spaces_bound_the_final_loss_by_the_baselines(ref: str) -> None:
    """A stability space (its first objective not a hardware number) keeps the final loss
    within 5% of the defaults' at the same length; a speed space (nccl) does not need to."""
    from autotune.knobs import HARDWARE_METRICS

    space = sp.load(ref)
    labels = [c.label for c in space.constraints]
    stability = space.objectives[0].metric not in HARDWARE_METRICS
    assert ("final_loss <= 1.05 x baseline" in labels) == stability, labels
    assert "loss_drop >= 0.05" in labels
    target = space.budget.target_steps
    assert target is not None and space.probe.steps < target <= 5 * space.probe.steps


def test_a_grid_space_keeps_its_name() -> None:
    s = sp.loads(
        "name: failures\nworkload: mlp\nsampler: {name: grid}\n"
        "knobs: {clip_norm: {low: 0.1, high: 1.0}}\nenv: {HSA_X: {choices: [a, b]}}\n"
    )
    assert s.name == "failures"
