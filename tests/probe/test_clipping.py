"""The clipping policies against reference formulas written here (numpy, float64) and, where
the library is installed, against the library itself (pytorch-optimizer's agc, the zclip
package): property tests over random gradients and norm sequences."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autotune.probe.clipping import (
    AgcClip,
    AutoClip,
    NoClip,
    NormClip,
    ZClip,
    make_clip_policy,
)

SETTINGS = settings(max_examples=40, deadline=None)

# ----- helpers --------------------------------------------------------------------------------


def params_with_grads(seed: int, shapes: list[tuple[int, ...]], grad_scale: float) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.randn(shape, generator=g, dtype=torch.float64))
        p.grad = torch.randn(shape, generator=g, dtype=torch.float64) * grad_scale
        out.append(p)
    return out


def one_param_with_norm(norm: float, seed: int = 0) -> list:
    """One parameter whose gradient has total L2 norm `norm` (float64)."""
    g = torch.Generator().manual_seed(seed)
    direction = torch.randn(7, generator=g, dtype=torch.float64)
    p = torch.nn.Parameter(torch.zeros(7, dtype=torch.float64))
    p.grad = direction / direction.norm() * norm
    return [p]


def ref_unit_norm(x: np.ndarray) -> np.ndarray:
    """Written out: the whole tensor for ndim <= 1, else each slice along axis 0."""
    if x.ndim <= 1:
        return np.array(math.sqrt(float(np.sum(x * x))))
    flat = x.reshape(x.shape[0], -1)
    return np.sqrt(np.sum(flat * flat, axis=1)).reshape((x.shape[0],) + (1,) * (x.ndim - 1))


def ref_agc(w: np.ndarray, g: np.ndarray, lam: float, eps: float) -> np.ndarray:
    limit = np.maximum(ref_unit_norm(w), eps) * lam
    gn = ref_unit_norm(g)
    return np.where(gn > limit, g * limit / np.maximum(gn, 1e-6), g)


def ref_zclip(norms: list[float], z: float, alpha: float, warmup: int) -> list[float]:
    """The coefficient of each step, by the rule in plain floats."""
    buf: list[float] = []
    mean = var = 0.0
    ready = False
    out = []
    for n in norms:
        if not math.isfinite(n):
            out.append(1.0)
            continue
        if not ready:
            buf.append(n)
            if len(buf) == warmup:
                mean = sum(buf) / warmup
                var = sum((b - mean) ** 2 for b in buf) / warmup
                ready = True
            out.append(1.0)
            continue
        limit = mean + z * math.sqrt(var)
        if n > limit:
            out.append(limit / (n + 1e-6))
            n = limit
        else:
            out.append(1.0)
        mean = alpha * mean + (1 - alpha) * n
        var = alpha * var + (1 - alpha) * (n - mean) ** 2
    return out


def ref_autoclip(norms: list[float], p: float) -> list[float]:
    seen: list[float] = []
    out = []
    for n in norms:
        if not math.isfinite(n):
            out.append(1.0)
            continue
        seen.append(n)
        limit = float(np.percentile(seen, p))
        out.append(min(1.0, limit / (n + 1e-6)))
    return out


def coefficients(policy: NoClip, norms: list[float]) -> list[float]:
    """Run `policy` over steps whose gradient has each total norm; each step's coefficient."""
    out = []
    for i, n in enumerate(norms):
        params = one_param_with_norm(n if math.isfinite(n) else 1.0, seed=i)
        if not math.isfinite(n):
            params[0].grad[0] = n
        before = params[0].grad.clone()
        total, _, clipped = policy(params)
        assert float(total) == pytest.approx(n, rel=1e-6) or not math.isfinite(n)
        if not math.isfinite(n):
            assert not bool(clipped)  # nothing clipped, and the statistics left as they were
            out.append(1.0)
            continue
        coef = float(params[0].grad.norm() / before.norm())
        assert bool(clipped) == (coef < 1.0)
        out.append(coef)
    return out


norm_seqs = st.lists(
    st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=60,
)

# ----- norm -----------------------------------------------------------------------------------


@SETTINGS
@given(seed=st.integers(0, 10_000), clip=st.floats(1e-3, 1e2), scale=st.floats(1e-3, 1e2))
def test_norm_global_matches_the_formula_and_torch(seed: int, clip: float, scale: float) -> None:
    shapes = [(3, 4), (5,), (2, 2, 3)]
    ours = params_with_grads(seed, shapes, scale)
    theirs = params_with_grads(seed, shapes, scale)
    grads = [p.grad.numpy().copy() for p in ours]
    total = math.sqrt(sum(float(np.sum(g * g)) for g in grads))
    norm, layers, clipped = NormClip(clip)(ours)
    assert float(norm) == pytest.approx(total, rel=1e-6)
    assert bool(clipped) == (total > clip)
    coef = min(1.0, clip / (total + 1e-6))
    torch.nn.utils.clip_grad_norm_(theirs, clip)
    for p, q, g in zip(ours, theirs, grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-6)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(
        layers.numpy(), [math.sqrt(float(np.sum(g * g))) for g in grads], rtol=1e-6
    )


@SETTINGS
@given(seed=st.integers(0, 10_000), clip=st.floats(1e-3, 1e2), scale=st.floats(1e-3, 1e2))
def test_norm_per_layer_bounds_each_tensor(seed: int, clip: float, scale: float) -> None:
    params = params_with_grads(seed, [(3, 4), (5,), (6,)], scale)
    grads = [p.grad.numpy().copy() for p in params]
    NormClip(clip, per_layer=True)(params)
    for p, g in zip(params, grads, strict=True):
        n = math.sqrt(float(np.sum(g * g)))
        np.testing.assert_allclose(p.grad.numpy(), g * min(1.0, clip / (n + 1e-6)), rtol=1e-6)


def test_norm_zero_and_none_leave_the_gradients() -> None:
    for policy in (NormClip(0.0), NoClip(), make_clip_policy({"clip_policy": "none"})):
        params = params_with_grads(1, [(4, 4)], 100.0)
        g = params[0].grad.clone()
        _, _, clipped = policy(params)
        assert torch.equal(params[0].grad, g) and not bool(clipped)


# ----- agc ------------------------------------------------------------------------------------

shapes_st = st.lists(
    st.sampled_from([(), (5,), (4, 3), (2, 3, 4), (3, 2, 2, 2)]), min_size=1, max_size=4
)


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    shapes=shapes_st,
    lam=st.floats(1e-3, 1.0),
    scale=st.floats(1e-4, 1e2),
)
def test_agc_matches_the_unitwise_formula(
    seed: int, shapes: list[tuple[int, ...]], lam: float, scale: float
) -> None:
    params = params_with_grads(seed, shapes, scale)
    expected = [
        ref_agc(p.detach().numpy(), p.grad.numpy(), lam, 1e-3) for p in params
    ]  # before the policy changes them
    grads = [p.grad.numpy().copy() for p in params]
    total, _, clipped = AgcClip(lam, 1e-3)(params)
    assert float(total) == pytest.approx(
        math.sqrt(sum(float(np.sum(g * g)) for g in grads)), rel=1e-6
    )
    for p, e in zip(params, expected, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), e, rtol=1e-9, atol=1e-300)
    assert bool(clipped) == any(
        not np.allclose(e, g, rtol=0, atol=0) for e, g in zip(expected, grads, strict=True)
    )


def test_agc_clips_a_row_to_lambda_times_its_weight_norm() -> None:
    p = torch.nn.Parameter(torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64))
    p.grad = torch.tensor([[30.0, 40.0], [1.0, 0.0]], dtype=torch.float64)
    AgcClip(0.1, eps=1e-3)([p])
    assert p.grad[0].norm().item() == pytest.approx(0.5, rel=1e-6)  # 0.1 * |[3, 4]|
    assert p.grad[1].norm().item() == pytest.approx(1e-4, rel=1e-3)  # 0.1 * eps: w is zero


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    shapes=st.lists(st.sampled_from([(), (5,), (4, 3), (3, 2, 2, 2)]), min_size=1, max_size=3),
    lam=st.floats(1e-3, 1.0),
    scale=st.floats(1e-4, 1e2),
)
def test_agc_matches_pytorch_optimizer(
    seed: int, shapes: list[tuple[int, ...]], lam: float, scale: float
) -> None:
    """pytorch-optimizer's agc (its unit norm agrees with timm's for 0-, 1-, 2- and 4-d
    tensors; for 3-d ones it reduces dim 1 only, timm and NFNets every dim after the first)."""
    lib = pytest.importorskip("pytorch_optimizer.optimizer.agc")
    params = params_with_grads(seed, shapes, scale)
    expected = [lib.agc(p.detach(), p.grad.clone(), 1e-3, lam, 1e-6) for p in params]
    AgcClip(lam, 1e-3)(params)
    for p, e in zip(params, expected, strict=True):
        torch.testing.assert_close(p.grad, e, rtol=1e-9, atol=0)


# ----- zclip ----------------------------------------------------------------------------------


@SETTINGS
@given(
    norms=norm_seqs,
    z=st.floats(0.5, 4.0),
    alpha=st.floats(0.5, 0.999),
    warmup=st.integers(1, 10),
)
def test_zclip_matches_the_rule(norms: list[float], z: float, alpha: float, warmup: int) -> None:
    got = coefficients(ZClip(z, alpha, warmup), norms)
    np.testing.assert_allclose(got, ref_zclip(norms, z, alpha, warmup), rtol=1e-6)


def test_zclip_leaves_out_non_finite_norms_and_clips_a_spike() -> None:
    norms = [1.0, math.inf, 1.1, 0.9, 1.0, math.nan, 1.05, 50.0, 1.0]
    got = coefficients(ZClip(2.5, 0.9, warmup=4), norms)
    np.testing.assert_allclose(got, ref_zclip(norms, 2.5, 0.9, 4), rtol=1e-6)
    assert got[7] < 0.05 and got[:7] == [1.0] * 7


@SETTINGS
@given(
    norms=norm_seqs,
    z=st.floats(0.5, 4.0),
    alpha=st.floats(0.5, 0.999),
    warmup=st.integers(1, 10),
)
def test_zclip_matches_the_zclip_package(
    norms: list[float], z: float, alpha: float, warmup: int
) -> None:
    lib = pytest.importorskip("zclip")
    # A norm equal to the threshold (a repeated norm against a zero variance) is clipped by
    # 1 / (1 + 1e-6 / norm) or not, depending on the norm's last bit: the library computes it
    # in the parameters' dtype, the probe in float32. The rule itself is checked exactly above.
    assume(len(set(norms)) == len(norms))
    theirs = lib.ZClip(
        alpha=alpha, z_thresh=z, max_grad_norm=None, warmup_steps=warmup, mode="percentile"
    )
    ours = ZClip(z, alpha, warmup)
    for i, n in enumerate(norms):
        model = torch.nn.Linear(7, 1, bias=False).double()
        model.weight.grad = one_param_with_norm(n, seed=i)[0].grad.reshape(1, 7).clone()
        twin = [torch.nn.Parameter(model.weight.detach().clone())]
        twin[0].grad = model.weight.grad.clone()
        theirs.step(model)
        ours(twin)
        # 1e-5: at a norm equal to the threshold (within rounding), one clips by 1 / (1 + 1e-6)
        torch.testing.assert_close(twin[0].grad, model.weight.grad, rtol=1e-5, atol=0)
    if theirs.initialized:
        assert float(ours.state["mean"]) == pytest.approx(theirs.mean, rel=1e-5)
        assert float(ours.state["var"]) == pytest.approx(theirs.var, rel=1e-5, abs=1e-10)


# ----- autoclip -------------------------------------------------------------------------------


@SETTINGS
@given(norms=norm_seqs, p=st.floats(0.0, 100.0))
def test_autoclip_matches_the_percentile_rule(norms: list[float], p: float) -> None:
    got = coefficients(AutoClip(p), norms)
    np.testing.assert_allclose(got, ref_autoclip(norms, p), rtol=1e-6)


def test_autoclip_grows_its_history_past_its_first_block() -> None:
    norms = [float(1 + (i % 7)) for i in range(150)] + [math.nan, 30.0]
    got = coefficients(AutoClip(50.0), norms)
    np.testing.assert_allclose(got, ref_autoclip(norms, 50.0), rtol=1e-6)


# ----- replay (a continued probe) -------------------------------------------------------------


@SETTINGS
@given(norms=norm_seqs, cut=st.integers(0, 60), kind=st.sampled_from(["zclip", "autoclip"]))
def test_replay_rebuilds_the_state_of_the_run(norms: list[float], cut: int, kind: str) -> None:
    knobs = {"clip_policy": kind, "zclip_warmup": 5, "autoclip_percentile": 30.0}
    whole = make_clip_policy(knobs)
    head = [float(np.float32(n)) for n in norms[:cut]]
    coefficients(whole, head)
    continued = make_clip_policy(knobs)
    continued.replay(head)
    tail = norms[cut:]
    assert coefficients(continued, tail) == pytest.approx(coefficients(whole, tail), rel=1e-12)


def test_make_clip_policy_reads_the_knobs_and_refuses_an_unknown_one() -> None:
    assert isinstance(make_clip_policy({}), NormClip)  # no clip_policy: norm, as before
    p = make_clip_policy({"clip_policy": "zclip", "zclip_z": 3.0, "zclip_alpha": 0.9})
    assert isinstance(p, ZClip) and (p.z, p.alpha, p.warmup) == (3.0, 0.9, 25)
    a = make_clip_policy({"clip_policy": "agc", "agc_lambda": 0.02})
    assert isinstance(a, AgcClip) and (a.lam, a.eps) == (0.02, 1e-3)
    with pytest.raises(ValueError, match="clip_policy must be one of"):
        make_clip_policy({"clip_policy": "value"})
