"""The Optuna attribute keys (a study's and its trials' user attributes) are spelled in one
module, `autotune.study.attrs`: no other module of the study or the CLI writes an `"autotune.`
key, so the writer of a key and its readers cannot drift apart."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

from autotune.study import attrs as ua

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autotune"
OWNER = PACKAGE / "study" / "attrs.py"


def _names_a_module(text: str, package: Path) -> bool:
    """`autotune.x.y` names a module or package of `package` (a module to import or run)."""
    rel = Path(*text.split(":")[0].split(".")[1:])
    return (package / rel).with_suffix(".py").is_file() or (package / rel).is_dir()


def key_literals(folders: list[Path], package: Path, owner: Path) -> list[str]:
    """`path:line text` for each string (or f-string) starting with `autotune.` in the modules
    of `folders` but `owner`, unless it names a module of `package`."""
    out = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            if path == owner:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                head = node
                if isinstance(node, ast.JoinedStr) and node.values:
                    head = node.values[0]
                if not (isinstance(head, ast.Constant) and isinstance(head.value, str)):
                    continue
                text = head.value
                if text.startswith("autotune.") and not _names_a_module(text, package):
                    rel = path.relative_to(package.parent)
                    out.append(f"{rel}:{node.lineno} {text}")
    return sorted(set(out))


def test_only_attrs_spells_an_optuna_key() -> None:
    folders = [PACKAGE / "study", PACKAGE / "cli", ROOT / "benchmarks"]
    assert key_literals(folders, PACKAGE, OWNER) == []


def test_the_check_catches_a_key_spelled_elsewhere(tmp_path: Path) -> None:
    pkg = tmp_path / "autotune"
    (pkg / "study").mkdir(parents=True)
    (pkg / "recipe").mkdir()
    (pkg / "recipe" / "trial.py").write_text("")
    (pkg / "study" / "attrs.py").write_text('METRICS = "autotune.metrics"\n')
    (pkg / "study" / "pick.py").write_text(
        "def f(t, n):\n"
        '    t.user_attrs.get("autotune.metrics")\n'
        '    return f"autotune.rung.{n}", "autotune.recipe.trial", "autotune.recipe.trial:x"\n'
    )
    assert key_literals([pkg / "study"], pkg, pkg / "study" / "attrs.py") == [
        "autotune/study/pick.py:2 autotune.metrics",
        "autotune/study/pick.py:3 autotune.rung.",
    ]


def test_every_key_is_autotune_s_and_one_of_a_kind() -> None:
    keys = {k: v for k, v in vars(ua).items() if k.isupper() and isinstance(v, str)}
    assert len(keys) > 30
    assert all(v.startswith("autotune.") for v in keys.values())
    assert len(set(keys.values())) == len(keys)
    # A rung's and a verification's keys are read back by their prefixes (`pick`).
    assert ua.rung_key(3, 60) == "autotune.rung.3.60"
    assert ua.rung_key(3, 60).startswith(ua.RUNG_PREFIX)
    assert ua.verified_key(7) == "autotune.verified.7"
    assert ua.verified_key(7).startswith(ua.VERIFIED_PREFIX)


def test_a_rung_s_and_a_verification_s_key_read_back_as_what_made_them() -> None:
    assert ua.rung_of(ua.rung_key(3, 60)) == (3, 60)
    assert ua.verified_of(ua.verified_key(12)) == 12
    for other in (ua.DECIDED, ua.RUNGS, "autotune.rung.x.60", "autotune.rung.3", ua.KNOBS):
        assert ua.rung_of(other) is None, other
    for other in (ua.verified_key(3) + ".1", "autotune.verified.", ua.rung_key(3, 60)):
        assert ua.verified_of(other) is None, other


def test_the_readers_type_what_they_read() -> None:
    stored = {ua.BASELINE: True, ua.METRICS: {"loss": 1.5}, ua.KNOBS: None}
    trial = SimpleNamespace(user_attrs=stored)
    bare = SimpleNamespace(user_attrs={})
    assert ua.is_baseline(trial) is True
    assert ua.is_baseline(bare) is False
    assert ua.metrics(trial) == {"loss": 1.5}
    assert ua.metrics(trial) is not stored[ua.METRICS]  # a copy: the caller may change it
    assert ua.knobs(trial) == {} and ua.env(bare) == {}
    assert ua.outcome(bare) == "failed"  # none stored: it gave no result
    assert ua.outcome(SimpleNamespace(user_attrs={ua.OUTCOME: "diverged"})) == "diverged"
    study = SimpleNamespace(user_attrs={ua.DECIDED: {"target_steps": 300}})
    assert ua.decided(study) == {"target_steps": 300}
    assert ua.decided(bare) == {}
