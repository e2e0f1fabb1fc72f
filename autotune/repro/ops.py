"""The audit's battery: the ops a transformer step uses, each with seeded float64 inputs of
realistic shapes (`Op`, `OPS`), and the dtypes they are audited in.

`OPS` is a list of `Op`: a test (or a user chasing a kernel) can add ops or swap in a suspect
implementation with `Op(fn=suspect, reference=known_good)` and pass the list to `run_audit`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}

REDUCE = 10.0  # tolerance factor of ops that reduce (sums, norms, softmax)

# Shapes of a small transformer step: batch 8, sequence 128, width 512, 8 heads of 64.
B, T, D, H = 8, 128, 512, 8
VOCAB = 1000

Inputs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Op:
    """One entry of the battery.

    `make(g)` returns the op's inputs as float64 CPU tensors (integer tensors pass unchanged),
    drawn from the generator `g`; `fn(*inputs)` is the implementation under test;
    `reference(*inputs)` the float64 reference (default: `fn`). `backward`: also audit the
    gradient. `tol_factor` scales the dtype's tolerance for ops whose error grows with a
    reduction.
    """

    name: str
    make: Callable[[torch.Generator], Inputs]
    fn: Callable[..., torch.Tensor]
    reference: Callable[..., torch.Tensor] | None = None
    backward: bool = True
    tol_factor: float = 1.0
    note: str = ""


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _uniform(g: torch.Generator, low: float, high: float, *shape: int) -> torch.Tensor:
    return low + (high - low) * torch.rand(*shape, generator=g, dtype=torch.float64)


def _gelu_inputs(g: torch.Generator) -> Inputs:
    x = 2.0 * _randn(g, B, T, D)
    # Every fourth value near ±1.7, where erf-based and tanh-approximated GELUs part most.
    flat = x.view(-1)
    near = flat[::4]
    sign = torch.where(torch.rand(near.shape, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    flat[::4] = sign * (1.7 + 0.05 * torch.randn(near.shape, generator=g, dtype=torch.float64))
    return {"x": x}


def _large_logits(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Logits of scale 5 with every eighth one at ±30..80: softmax near one-hot."""
    x = 5.0 * _randn(g, *shape)
    flat = x.view(-1)
    big = flat[::8]
    sign = torch.where(torch.rand(big.shape, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    flat[::8] = sign * _uniform(g, 30.0, 80.0, big.numel())
    return x


def _layer_norm_inputs(g: torch.Generator) -> Inputs:
    return {
        "x": 1.0 + 3.0 * _randn(g, B, T, D),  # off-centre: the mean subtraction matters
        "weight": 1.0 + 0.1 * _randn(g, D),
        "bias": 0.1 * _randn(g, D),
    }


def _attention_inputs(g: torch.Generator) -> Inputs:
    return {name: _randn(g, B, H, T, D // H) for name in ("q", "k", "v")}


def _pair(g: torch.Generator) -> Inputs:
    return {"x": _randn(g, B, T, D), "y": _randn(g, B, T, D)}


def _div_inputs(g: torch.Generator) -> Inputs:
    # Denominators down to 0.02: the quotient and its gradient (x/y²) stay inside fp16's range.
    y = 10.0 ** _uniform(g, math.log10(0.02), math.log10(2.0), B, T, D)
    return {"x": _randn(g, B, T, D), "y": y}


def _cross_entropy_inputs(g: torch.Generator) -> Inputs:
    return {
        "logits": _large_logits(g, B * T, VOCAB),
        "target": torch.randint(0, VOCAB, (B * T,), generator=g),
    }


OPS: list[Op] = [
    Op("gelu", _gelu_inputs, lambda x: F.gelu(x)),
    Op(
        "layer_norm",
        _layer_norm_inputs,
        lambda x, w, b: F.layer_norm(x, (D,), w, b),
        tol_factor=REDUCE,
    ),
    Op(
        "softmax",
        lambda g: {"x": _large_logits(g, B, H, T, T)},
        lambda x: F.softmax(x, dim=-1),
        tol_factor=REDUCE,
    ),
    Op(
        "log_softmax",
        lambda g: {"x": _large_logits(g, B, T, VOCAB)},
        lambda x: F.log_softmax(x, dim=-1),
        tol_factor=REDUCE,
    ),
    Op(
        "scaled_dot_product_attention",
        _attention_inputs,
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        tol_factor=REDUCE,
        note="causal",
    ),
    Op(
        "matmul",
        lambda g: {"a": _randn(g, B, T, D), "b": _randn(g, D, D) / math.sqrt(D)},
        lambda a, b: a @ b,
        tol_factor=REDUCE,
    ),
    Op("add", _pair, lambda x, y: x + y),
    Op("mul", _pair, lambda x, y: x * y),
    Op("div", _div_inputs, lambda x, y: x / y),
    Op("sqrt", lambda g: {"x": 10.0 ** _uniform(g, -6.0, 2.0, B, T, D)}, lambda x: torch.sqrt(x)),
    Op("exp", lambda g: {"x": _uniform(g, -10.0, 10.0, B, T, D)}, lambda x: torch.exp(x)),
    Op(
        "cross_entropy",
        _cross_entropy_inputs,
        lambda logits, target: F.cross_entropy(logits, target),
        tol_factor=REDUCE,
        note="mean over the batch",
    ),
]
