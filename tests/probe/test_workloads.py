"""autotune.probe.workload: every built-in passes the same contract; the resolver finds workloads by
name, file or module, and says clearly what is wrong when it cannot."""

from __future__ import annotations

import ast
import importlib
import math
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autotune.errors import WorkloadError
from autotune.probe.workload import BUILTINS, SIZES, Workload, describe, resolve

MICRO_BATCH = 8


# ---------------------------------------------------------------------------------------------
# The contract: every built-in through the same checks
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models step faster on one thread, and a busy machine cannot stall them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=sorted(BUILTINS))
def workload(request: pytest.FixtureRequest) -> Workload:
    return resolve(request.param, "tiny")


def _same(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_resolves_to_a_workload(workload: Workload) -> None:
    assert isinstance(workload, Workload)
    assert workload.name in BUILTINS
    assert workload.size == "tiny"
    assert 0 < workload.default_lr < workload.unstable_lr


def test_sizes_table_matches_the_module(workload: Workload) -> None:
    module = importlib.import_module(type(workload).__module__)
    assert type(workload).__module__ == f"autotune.workloads.{workload.name}"
    assert tuple(module.SIZES) == SIZES[workload.name]
    for size in SIZES[workload.name]:
        built = resolve(workload.name, size)  # cheap: data and model are made on first use
        assert built.size == size
        assert 0 < built.default_lr < built.unstable_lr


def test_model_builds_the_same_under_the_same_seed(workload: Workload) -> None:
    torch.manual_seed(0)
    a = workload.build_model()
    torch.manual_seed(0)
    b = workload.build_model()
    assert isinstance(a, torch.nn.Module)
    assert a.state_dict().keys() == b.state_dict().keys()
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())


def test_loss_is_a_finite_scalar_and_reaches_every_parameter(workload: Workload) -> None:
    torch.manual_seed(0)
    model = workload.build_model()
    loss = workload.loss(model, next(workload.batches(MICRO_BATCH, seed=0)))
    assert loss.ndim == 0 and loss.dtype == torch.float32
    assert math.isfinite(loss.item())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} gets no gradient"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"


def test_batches_are_cpu_tensors_fixed_by_the_seed(workload: Workload) -> None:
    def first(seed: int, n: int = 3) -> list[tuple[torch.Tensor, ...]]:
        stream = workload.batches(MICRO_BATCH, seed)
        return [next(stream) for _ in range(n)]

    a, b, c = first(1), first(1), first(2)
    assert all(_same(x, y) for x, y in zip(a, b, strict=True))
    assert not all(_same(x, y) for x, y in zip(a, c, strict=True))
    for batch in a:
        assert isinstance(batch, tuple)
        assert all(t.device.type == "cpu" for t in batch)
        assert workload.samples(batch) == MICRO_BATCH


def test_batches_do_not_touch_the_global_rng(workload: Workload) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    stream = workload.batches(MICRO_BATCH, seed=5)
    for _ in range(3):
        next(stream)
    assert torch.equal(torch.rand(3), expected)


def test_batches_never_run_out(workload: Workload) -> None:
    stream = workload.batches(1024, seed=0)
    for _ in range(12):  # 12 x 1024 is more than a tiny training set holds
        assert workload.samples(next(stream)) == 1024


def test_a_micro_batch_below_one_is_refused_at_once(workload: Workload) -> None:
    with pytest.raises(ValueError, match="micro_batch"):
        workload.batches(0, seed=0)


def test_eval_batches_are_fixed_and_small(workload: Workload) -> None:
    a, b = workload.eval_batches(16), workload.eval_batches(16)
    fresh = resolve(workload.name, "tiny").eval_batches(16)
    assert len(a) == len(b) == len(fresh) > 0
    assert all(_same(x, y) and _same(x, z) for x, y, z in zip(a, b, fresh, strict=True))
    assert all(workload.samples(batch) <= 16 for batch in a)
    assert sum(workload.samples(batch) for batch in a) <= 4096


def test_samples_and_tokens_count_the_batch(workload: Workload) -> None:
    batch = next(workload.batches(MICRO_BATCH, seed=0))
    assert workload.samples(batch) == MICRO_BATCH == batch[0].shape[0]
    expected_tokens = batch[1].numel() if workload.name == "tiny_gpt" else 0
    assert workload.tokens(batch) == expected_tokens
    if workload.name == "tiny_gpt":
        assert expected_tokens == MICRO_BATCH * batch[0].shape[1]  # a target per input byte


def test_a_few_adamw_steps_reduce_the_loss_on_a_fixed_batch(workload: Workload) -> None:
    torch.manual_seed(0)
    model = workload.build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=workload.default_lr)
    batch = next(workload.batches(16, seed=0))
    first = workload.loss(model, batch).item()
    for _ in range(25):
        loss = workload.loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert workload.loss(model, batch).item() < 0.8 * first


def test_builtin_files_import_no_autotune_internals() -> None:
    folder = Path(__file__).resolve().parents[2] / "workloads"
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                assert not name.startswith("autotune") or name == "autotune.probe.workload", (
                    f"{path.name} imports {name}"
                )


# ---------------------------------------------------------------------------------------------
# The resolver
# ---------------------------------------------------------------------------------------------

USER_WORKLOAD = """
    import torch
    from torch import nn

    SIZES = ("tiny", "big")


    class Line:
        name = "line"
        default_lr = 1e-2
        unstable_lr = 1.0

        def __init__(self, size="tiny"):
            self.size = size

        def build_model(self):
            return nn.Linear(2, 1)

        def batches(self, micro_batch, seed):
            g = torch.Generator().manual_seed(seed)
            while True:
                x = torch.randn(micro_batch, 2, generator=g)
                yield x, x.sum(1, keepdim=True)

        def eval_batches(self, micro_batch):
            x = torch.ones(micro_batch, 2)
            return [(x, x.sum(1, keepdim=True))]

        def loss(self, model, batch):
            x, y = batch
            return ((model(x) - y) ** 2).mean()

        def samples(self, batch):
            return len(batch[0])

        def tokens(self, batch):
            return 0


    def make(size="tiny"):
        return Line(size)


    def broken(size="tiny"):
        raise ValueError("no such thing")


    def not_a_workload(size="tiny"):
        return object()


    def no_size():
        return Line()


    def bad_lr(size="tiny"):
        line = Line(size)
        line.unstable_lr = "fast"
        return line


    NOT_CALLABLE = 3
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_workload.py"
    path.write_text(textwrap.dedent(USER_WORKLOAD))
    return path


@pytest.fixture
def on_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """tmp_path on sys.path; modules imported from it are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("userpkg") or name.startswith("user_module"):
            del sys.modules[name]


def test_every_builtin_has_a_module_ref_and_sizes() -> None:
    assert set(BUILTINS) == set(SIZES) == {"mlp", "resnet", "tiny_gpt"}
    for name, ref in BUILTINS.items():
        assert ref == f"autotune.workloads.{name}:make"
        assert SIZES[name][0] == "tiny"


def test_a_builtin_can_also_be_named_by_its_module() -> None:
    assert resolve("autotune.workloads.mlp:make", size="small").size == "small"


def test_unknown_name_lists_the_builtins_and_suggests_the_closest() -> None:
    with pytest.raises(WorkloadError) as err:
        resolve("mpl")
    message = str(err.value)
    assert "unknown workload 'mpl'" in message
    assert "(did you mean 'mlp'?)" in message
    assert "mlp, resnet, tiny_gpt" in message
    assert "\n" not in message


def test_a_file_without_factory_is_told_how_to_name_it() -> None:
    with pytest.raises(WorkloadError, match=r"'train\.py:make'"):
        resolve("train.py")


def test_file_ref_resolves(user_file: Path) -> None:
    workload = resolve(f"{user_file}:make")
    assert workload.name == "line" and workload.size == "tiny"
    assert isinstance(workload, Workload)


def test_file_ref_accepts_a_class_and_a_size(user_file: Path) -> None:
    workload = resolve(f"{user_file}:Line", size="big")
    assert type(workload).__name__ == "Line" and workload.size == "big"


def test_relative_file_ref_resolves_from_the_working_directory(
    user_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(user_file.parent)
    assert resolve("my_workload.py:make").name == "line"


def test_module_ref_resolves(on_sys_path: Path) -> None:
    (on_sys_path / "user_module.py").write_text(textwrap.dedent(USER_WORKLOAD))
    assert resolve("user_module:make").name == "line"


def test_package_module_ref_resolves(on_sys_path: Path) -> None:
    package = on_sys_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "workloads.py").write_text(textwrap.dedent(USER_WORKLOAD))
    workload = resolve("userpkg.workloads:make", size="big")
    assert workload.name == "line" and workload.size == "big"


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "missing.py"
    with pytest.raises(WorkloadError, match="workload file not found") as err:
        resolve(f"{missing}:make")
    assert str(missing) in str(err.value)


def test_missing_module_says_it_cannot_be_imported() -> None:
    with pytest.raises(WorkloadError, match="cannot import module 'no_such_module_xyz'"):
        resolve("no_such_module_xyz:make")


def test_module_raising_on_import_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "explodes.py"
    path.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(WorkloadError, match="raised while importing: RuntimeError: boom"):
        resolve(f"{path}:make")


def test_missing_attribute_lists_the_public_callables(user_file: Path) -> None:
    with pytest.raises(WorkloadError) as err:
        resolve(f"{user_file}:mkae")
    message = str(err.value)
    assert "has no attribute 'mkae'" in message
    assert "(did you mean 'make'?)" in message
    assert "Line, bad_lr, broken, make, no_size, not_a_workload" in message
    assert "NOT_CALLABLE" not in message and "nn" not in message.split(":")[-1]


def test_attribute_that_is_not_callable_is_refused(user_file: Path) -> None:
    with pytest.raises(WorkloadError, match=r"'NOT_CALLABLE' is not callable \(its type is int\)"):
        resolve(f"{user_file}:NOT_CALLABLE")


def test_unknown_size_of_a_builtin_lists_its_sizes() -> None:
    with pytest.raises(WorkloadError) as err:
        resolve("mlp", size="huge")
    assert "has no size 'huge'" in str(err.value)
    assert "tiny, small, medium, large" in str(err.value)


def test_unknown_size_of_a_user_workload_lists_its_declared_sizes(user_file: Path) -> None:
    with pytest.raises(WorkloadError, match="sizes are: tiny, big") as err:
        resolve(f"{user_file}:make", size="bgi")
    assert "(did you mean 'big'?)" in str(err.value)


def test_factory_that_raises_is_wrapped_with_its_cause(user_file: Path) -> None:
    ref = f"{user_file}:broken"
    with pytest.raises(WorkloadError) as err:
        resolve(ref)
    assert str(err.value) == f"workload '{ref}' raised while building: ValueError: no such thing"
    assert isinstance(err.value.__cause__, ValueError)


def test_factory_without_a_size_keyword_is_refused(user_file: Path) -> None:
    with pytest.raises(WorkloadError, match="must accept the keyword argument size="):
        resolve(f"{user_file}:no_size")


def test_object_that_is_not_a_workload_names_what_it_lacks(user_file: Path) -> None:
    with pytest.raises(WorkloadError) as err:
        resolve(f"{user_file}:not_a_workload")
    message = str(err.value)
    assert "the factory's result (type object) lacks" in message
    for member in ("name", "default_lr", "build_model", "batches", "loss", "tokens"):
        assert member in message


def test_learning_rates_must_be_positive_numbers(user_file: Path) -> None:
    with pytest.raises(WorkloadError, match="unstable_lr must be a positive number, got 'fast'"):
        resolve(f"{user_file}:bad_lr")


def test_describe_builds_and_counts(user_file: Path) -> None:
    info = describe("mlp")
    assert info["name"] == "mlp" and info["size"] == "tiny"
    assert info["sizes"] == list(SIZES["mlp"])
    assert info["parameters"] > 1000
    assert describe(f"{user_file}:make")["parameters"] == 3  # nn.Linear(2, 1)


@pytest.mark.integration
def test_importing_the_module_is_cheap() -> None:
    code = (
        "import sys, autotune.probe.workload; "
        "print(sorted(m for m in ('torch', 'ray', 'mlflow', 'optuna') if m in sys.modules))"
    )
    repo = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo
    )
    assert out.stdout.strip() == "[]"
