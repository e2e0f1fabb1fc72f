"""The Workload protocol and its resolver.

A workload is what a probe trains: a model, a stream of batches and a loss. One string names it:

    mlp                               a built-in (see BUILTINS and SIZES below)
    path/to/my_workload.py:make       a factory in a file
    my_package.my_module:make         a factory in an importable module

The factory is called as ``factory(size=size)`` and returns an object that follows ``Workload``
(a class qualifies). The string is the whole registry: nothing registers itself on import.

Importing this module is cheap: torch is imported only where a model is built.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from autotune.errors import WorkloadError, did_you_mean
from autotune.probe.workload_guard import WorkloadExited, workload_code

if TYPE_CHECKING:
    import torch

Batch: TypeAlias = tuple["torch.Tensor", ...]


@runtime_checkable
class Workload(Protocol):
    """What the probe needs from a workload. Data lives in memory, so a step measures compute."""

    name: str  # e.g. "mlp"
    size: str  # e.g. "tiny"
    default_lr: float  # AdamW with sensible knobs trains well at this learning rate
    unstable_lr: float  # PyTorch defaults (no clipping, no warmup, eps 1e-8) spike or diverge here

    def build_model(self) -> torch.nn.Module:
        """A freshly initialised model on the CPU. The caller seeds torch first."""
        ...

    def batches(self, micro_batch: int, seed: int) -> Iterator[Batch]:
        """An endless stream of CPU batches whose order is fixed by `seed` alone."""
        ...

    def eval_batches(self, micro_batch: int) -> list[Batch]:
        """A small held-out set, the same on every call: the probe measures its initial loss on
        it (`autotune.probe.reference`)."""
        ...

    def loss(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """The scalar mean loss of `model` on `batch` (already on the model's device)."""
        ...

    def samples(self, batch: Batch) -> int:
        """How many samples `batch` holds."""
        ...

    def tokens(self, batch: Batch) -> int:
        """How many target tokens `batch` holds; 0 for a workload without tokens."""
        ...


# name -> "module:factory". The folder workloads/ of the repository ships as autotune.workloads.
BUILTINS: dict[str, str] = {
    "mlp": "autotune.workloads.mlp:make",
    "resnet": "autotune.workloads.resnet:make",
    "tiny_gpt": "autotune.workloads.tiny_gpt:make",
}

# The sizes of each built-in. tiny: CPU unit tests, a step takes milliseconds. small: a CPU or a
# GPU. medium and large: a GPU. Comments: parameters per size, and tiny's step on one CPU thread.
SIZES: dict[str, tuple[str, ...]] = {
    # 6k (1 ms at micro_batch 16-32), 79k, 1.2M, 17M
    "mlp": ("tiny", "small", "medium", "large"),
    # 20k (12-14 ms at micro_batch 16-32), 0.3M, 2.8M, 25M
    "resnet": ("tiny", "small", "medium", "large"),
    # 84k (12-15 ms at micro_batch 8-16), 0.9M, 11M, 86M
    "tiny_gpt": ("tiny", "small", "medium", "large"),
}

_ATTRIBUTES = ("name", "size", "default_lr", "unstable_lr")
_METHODS = ("build_model", "batches", "eval_batches", "loss", "samples", "tokens")
_BUILTIN_PACKAGE = "autotune.workloads"
_SOURCE_WORKLOADS = Path(__file__).resolve().parent.parent.parent / "workloads"


def resolve(ref: str, size: str = "tiny") -> Workload:
    """Find the workload named by `ref`, build it at `size`, and check it follows `Workload`."""
    factory, sizes = _find_factory(ref)
    if sizes is not None and size not in sizes:
        raise WorkloadError(
            f"workload {ref!r} has no size {size!r}; its sizes are: "
            f"{', '.join(sizes)}{did_you_mean(size, sizes)}"
        )
    try:
        inspect.signature(factory).bind(size=size)
    except TypeError:
        raise WorkloadError(
            f"workload {ref!r}: the factory must accept the keyword argument size=, "
            f"but its signature is {inspect.signature(factory)}"
        ) from None
    except ValueError:
        pass  # no signature to inspect (a C function): let the call decide
    try:
        with workload_code(ref, "its factory ran", ref):  # its prints on stderr, its exit named
            workload = factory(size=size)
    except WorkloadError:
        raise
    except Exception as exc:
        raise WorkloadError(_raised(ref, "building", exc)) from exc
    _check(ref, workload)
    return workload


def describe(ref: str, size: str = "tiny") -> dict[str, Any]:
    """Resolve `ref`, build its model once, and say what it is (for `autotune` to print)."""
    import torch

    workload = resolve(ref, size)
    try:
        with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
            model = workload.build_model()
        batch = next(iter(workload.batches(2, seed=0)))
    except Exception as exc:
        raise WorkloadError(_raised(ref, "building", exc)) from exc
    return {
        "ref": ref,
        "name": workload.name,
        "size": workload.size,
        "sizes": list(SIZES.get(ref, ())) or None,  # known for built-ins
        "parameters": sum(p.numel() for p in model.parameters()),
        "default_lr": workload.default_lr,
        "unstable_lr": workload.unstable_lr,
        "batch_shapes": [tuple(t.shape) for t in batch],
    }


def _raised(ref: str, doing: str, exc: BaseException) -> str:
    return f"workload {ref!r} raised while {doing}: {type(exc).__name__}: {exc}"


def _find_factory(ref: str) -> tuple[Callable[..., Any], Collection[str] | None]:
    """The factory `ref` names, and the sizes it declares (None when it declares none)."""
    if ":" not in ref:
        if ref not in BUILTINS:
            hint = (
                f"; a file is named as '{ref}:make'"
                if ref.endswith(".py")
                else " (or give 'path/to/file.py:factory' or 'package.module:factory')"
            )
            raise WorkloadError(
                f"unknown workload {ref!r}{did_you_mean(ref, BUILTINS)}; built-ins are: "
                f"{', '.join(sorted(BUILTINS))}{hint}"
            )
        module_name, _, attr = BUILTINS[ref].partition(":")
        module = _import_module(module_name, ref)
        return _factory(module, attr, ref, f"module {module_name!r}"), SIZES[ref]

    where, _, attr = ref.rpartition(":")
    if not where or not attr:
        raise WorkloadError(
            f"workload {ref!r} must be 'path/to/file.py:factory' or 'package.module:factory'"
        )
    if names_file(ref):
        module = _import_file(Path(where), ref)
        source = f"file {module.__file__}"
    else:
        module = _import_module(where, ref)
        source = f"module {where!r}"
    declared = getattr(module, "SIZES", None)  # optional: lets a bad size fail before building
    sizes = [str(s) for s in declared] if isinstance(declared, (dict, list, tuple)) else None
    return _factory(module, attr, ref, source), sizes


def names_file(ref: str) -> bool:
    """Whether `ref` names a factory in a file (`path/to/file.py:attr`), not in a module."""
    where = ref.rpartition(":")[0]
    return where.endswith(".py") or "/" in where or "\\" in where


def _factory(module: ModuleType, attr: str, ref: str, source: str) -> Callable[..., Any]:
    factory = getattr(module, attr, None)
    if factory is None:
        own = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and callable(value)
            and getattr(value, "__module__", None) == module.__name__
        ]
        listed = ", ".join(sorted(own)) or "none"
        raise WorkloadError(
            f"workload {ref!r}: {source} has no attribute {attr!r}"
            f"{did_you_mean(attr, own)}; its public callables are: {listed}"
        )
    if not callable(factory):
        raise WorkloadError(
            f"workload {ref!r}: {attr!r} is not callable (its type is {type(factory).__name__}); "
            "the factory must be a function or a class taking size= and returning a Workload"
        )
    return factory


def _import_file(path: Path, ref: str) -> ModuleType:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise WorkloadError(f"workload file not found: {path} (from {ref!r})")
    # A private module name per path: two files called model.py do not collide, and loading the
    # same file twice gives the same classes.
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = "_autotune_file_" + re.sub(r"\W", "_", path.stem) + "_" + digest
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"workload file {path} cannot be loaded as Python (from {ref!r})")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it, as `import` does (dataclasses look it up)
    try:
        with workload_code(ref, "it was imported", str(path)):  # see workload_guard
            spec.loader.exec_module(module)
    except WorkloadExited:
        del sys.modules[name]
        raise
    except Exception as exc:
        del sys.modules[name]
        raise WorkloadError(_raised(ref, "importing", exc)) from exc
    return module


def _import_module(name: str, ref: str) -> ModuleType:
    try:
        with workload_code(ref, "it was imported", name):  # see workload_guard
            return importlib.import_module(name)
    except WorkloadExited:
        raise
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not (name == missing or name.startswith(missing + ".")):
            raise WorkloadError(_raised(ref, "importing", exc)) from exc  # an import inside it
        if missing == _BUILTIN_PACKAGE and (_SOURCE_WORKLOADS / "__init__.py").is_file():
            _mount_source_workloads()
            return _import_module(name, ref)
        raise WorkloadError(
            f"workload {ref!r}: cannot import module {name!r} (no module named {missing!r}); "
            "is it installed, or on PYTHONPATH?"
        ) from exc
    except Exception as exc:
        raise WorkloadError(_raised(ref, "importing", exc)) from exc


def _mount_source_workloads() -> None:
    """From a source checkout (not installed), load <repo>/workloads as autotune.workloads.

    An install maps the folder onto the package; a checkout has no autotune/workloads/, so the
    package is created from the folder's path here, once. Its modules then import normally.
    """
    spec = importlib.util.spec_from_file_location(
        _BUILTIN_PACKAGE,
        _SOURCE_WORKLOADS / "__init__.py",
        submodule_search_locations=[str(_SOURCE_WORKLOADS)],
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[_BUILTIN_PACKAGE] = package
    spec.loader.exec_module(package)


def _check(ref: str, workload: object) -> None:
    missing = [name for name in _ATTRIBUTES if not hasattr(workload, name)]
    missing += [name for name in _METHODS if not callable(getattr(workload, name, None))]
    if missing:
        raise WorkloadError(
            f"workload {ref!r}: the factory's result (type {type(workload).__name__}) lacks "
            f"{', '.join(missing)} (see autotune.probe.workload.Workload)"
        )
    for name in ("default_lr", "unstable_lr"):
        value = getattr(workload, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise WorkloadError(
                f"workload {ref!r}: {name} must be a positive number, got {value!r}"
            )
