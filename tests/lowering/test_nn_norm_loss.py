"""Normalization and loss lowerings (nn_norm.py, nn_loss.py) vs PyTorch CPU, forward and backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu.lowering  # noqa: F401
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten
# float64: results agree to ~1e-12 relative; 1e-7 leaves room for cancellation in losses whose
# gradients reach 1e12 (binary_cross_entropy at p = 0 or 1).
TOL = {torch.float32: 2e-5, torch.float64: 1e-7, torch.bfloat16: 3e-2}


def _close(got, expected, dtype: torch.dtype) -> None:
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None
            continue
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        torch.testing.assert_close(g, e, atol=TOL[dtype], rtol=TOL[dtype], equal_nan=True)


def _check(op, *args, dtype: torch.dtype, **kwargs) -> None:
    _close(run_reference(op, *args, **kwargs), op(*args, **kwargs), dtype)


FLOATS = [torch.float32, torch.float64]


# -- batch norm --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)], ids=str)
def test_native_batch_norm(shape, affine: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(3, dtype=dtype) if affine else None
    bias = torch.randn(3, dtype=dtype) if affine else None
    rm, rv = torch.randn(3, dtype=dtype), torch.rand(3, dtype=dtype) + 0.5
    # Training: results and the in-place running-stat update.
    rm_r, rv_r, rm_c, rv_c = rm.clone(), rv.clone(), rm.clone(), rv.clone()
    got = run_reference(aten.native_batch_norm.default, x, w, bias, rm_r, rv_r, True, 0.1, 1e-5)
    exp = aten.native_batch_norm(x, w, bias, rm_c, rv_c, True, 0.1, 1e-5)
    _close(got, exp, dtype)
    _close((rm_r, rv_r), (rm_c, rv_c), dtype)
    assert not torch.equal(rm_r, rm)
    # Evaluation: the running stats are read, not written.
    rm_e, rv_e = rm.clone(), rv.clone()
    _check(aten.native_batch_norm.default, x, w, bias, rm_e, rv_e, False, 0.1, 1e-5, dtype=dtype)
    assert torch.equal(rm_e, rm) and torch.equal(rv_e, rv)
    # Backward, both modes, every output_mask pattern that autograd uses.
    _, sm, si = exp
    go = torch.randn_like(x)
    for mask in ([True, True, True], [True, False, False]):
        _check(aten.native_batch_norm_backward.default, go, x, w, rm, rv, sm, si, True, 1e-5, mask, dtype=dtype)
        _check(aten.native_batch_norm_backward.default, go, x, w, rm, rv, None, None, False, 1e-5, mask,
               dtype=dtype)


def test_batch_norm_variants() -> None:
    torch.manual_seed(1)
    dtype = torch.float64
    x, w, bias = torch.randn(4, 3, 5, dtype=dtype), torch.randn(3, dtype=dtype), torch.randn(3, dtype=dtype)
    rm, rv = torch.randn(3, dtype=dtype), torch.rand(3, dtype=dtype) + 0.5
    for op, extra in ((aten._native_batch_norm_legit.default, (True,)), (aten._batch_norm_with_update.default, ())):
        a1, a2, b1, b2 = rm.clone(), rv.clone(), rm.clone(), rv.clone()
        _close(run_reference(op, x, w, bias, a1, a2, *extra, 0.1, 1e-5), op(x, w, bias, b1, b2, *extra, 0.1, 1e-5), dtype)
        _close((a1, a2), (b1, b2), dtype)
    _check(aten._native_batch_norm_legit.no_stats, x, w, bias, True, 0.1, 1e-5, dtype=dtype)
    _check(aten._native_batch_norm_legit_no_training.default, x, w, bias, rm, rv, 0.1, 1e-5, dtype=dtype)
    _check(aten._native_batch_norm_legit_functional.default, x, w, bias, rm, rv, True, 0.1, 1e-5, dtype=dtype)
    _check(aten._batch_norm_no_update.default, x, w, bias, rm, rv, 0.1, 1e-5, dtype=dtype)
    out, sm, si, res = aten._batch_norm_with_update(x, w, bias, rm.clone(), rv.clone(), 0.1, 1e-5)
    _check(aten.batch_norm_backward.default, torch.randn_like(x), x, w, rm, rv, sm, si, True, 1e-5,
           [True, True, True], res, dtype=dtype)


def test_batch_norm_bfloat16() -> None:
    # bf16 input: statistics in float32, results rounded to bf16 once (CPU does the same).
    torch.manual_seed(2)
    x = torch.randn(4, 3, 6).bfloat16()
    _check(aten.native_batch_norm.default, x, None, None, None, None, True, 0.1, 1e-5, dtype=torch.bfloat16)
    _check(aten.native_layer_norm.default, x, [6], None, None, 1e-5, dtype=torch.bfloat16)


# -- layer / group / rms norm ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("norm_shape", [[5], [3, 5]], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(norm_shape, affine: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, 5, dtype=dtype)
    w = torch.randn(norm_shape, dtype=dtype) if affine else None
    bias = torch.randn(norm_shape, dtype=dtype) if affine else None
    _check(aten.native_layer_norm.default, x, norm_shape, w, bias, 1e-5, dtype=dtype)
    _, m, r = aten.native_layer_norm(x, norm_shape, w, bias, 1e-5)
    # (CPU itself fails when asked for weight/bias gradients without weight/bias.)
    _check(aten.native_layer_norm_backward.default, torch.randn_like(x), x, norm_shape, m, r, w, bias,
           [True, affine, affine], dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,groups", [((2, 6, 4), 3), ((3, 4, 2, 3), 2), ((2, 4, 3), 4)], ids=str)
def test_group_norm(shape, groups: int, affine: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    n, c = shape[:2]
    hxw = x[0, 0].numel()
    w = torch.randn(c, dtype=dtype) if affine else None
    bias = torch.randn(c, dtype=dtype) if affine else None
    _check(aten.native_group_norm.default, x, w, bias, n, c, hxw, groups, 1e-5, dtype=dtype)
    _, m, r = aten.native_group_norm(x, w, bias, n, c, hxw, groups, 1e-5)
    _check(aten.native_group_norm_backward.default, torch.randn_like(x), x, m, r, w, n, c, hxw, groups,
           [True, affine, affine], dtype=dtype)


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_fused_rms_norm(eps: float | None) -> None:
    torch.manual_seed(0)
    dtype = torch.float64
    x = torch.randn(2, 3, 5, dtype=dtype, requires_grad=True)
    w = torch.randn(5, dtype=dtype, requires_grad=True)
    _check(aten._fused_rms_norm.default, x.detach(), [5], w.detach(), eps, dtype=dtype)
    # _fused_rms_norm_backward has no CPU kernel: compare with autograd through F.rms_norm.
    go = torch.randn(2, 3, 5, dtype=dtype)
    F.rms_norm(x, [5], w, eps).backward(go)
    _, rstd = aten._fused_rms_norm(x.detach(), [5], w.detach(), eps)
    gi, gw = run_reference(aten._fused_rms_norm_backward.default, go, x.detach(), [5], rstd, w.detach(),
                           [True, True])
    _close((gi, gw), (x.grad, w.grad), dtype)


# -- losses ------------------------------------------------------------------------------------

def _go(reduction: int, shape, dtype):
    return torch.randn(shape if reduction == 0 else (), dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
def test_regression_losses(reduction: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x, t = torch.randn(4, 5, dtype=dtype), torch.randn(4, 5, dtype=dtype)
    t[0, 0] = x[0, 0]  # a zero difference exercises the beta == 0 sign branch
    go = _go(reduction, x.shape, dtype)
    _check(aten.mse_loss.default, x, t, reduction, dtype=dtype)
    _check(aten.mse_loss_backward.default, go, x, t, reduction, dtype=dtype)
    _check(aten.l1_loss.default, x, t, reduction, dtype=dtype)
    for beta in (0.0, 0.7):
        _check(aten.smooth_l1_loss.default, x, t, reduction, beta, dtype=dtype)
        _check(aten.smooth_l1_loss_backward.default, go, x, t, reduction, beta, dtype=dtype)
    for delta in (0.3, 1.0):
        _check(aten.huber_loss.default, x, t, reduction, delta, dtype=dtype)
        _check(aten.huber_loss_backward.default, go, x, t, reduction, delta, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
def test_binary_losses(reduction: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    p, t, w = torch.rand(4, 5, dtype=dtype), torch.rand(4, 5, dtype=dtype), torch.rand(5, dtype=dtype)
    p[0, 0], p[0, 1] = 0.0, 1.0  # log clamps at -100
    x = torch.randn(4, 5, dtype=dtype) * 10
    go = _go(reduction, p.shape, dtype)
    for weight in (None, w):
        _check(aten.binary_cross_entropy.default, p, t, weight, reduction, dtype=dtype)
        _check(aten.binary_cross_entropy_backward.default, go, p, t, weight, reduction, dtype=dtype)
        _check(aten.binary_cross_entropy_with_logits.default, x, t, weight, None, reduction, dtype=dtype)
        _check(aten.binary_cross_entropy_with_logits.default, x, t, weight, w * 3, reduction, dtype=dtype)
    sign = torch.randint(0, 2, (4, 5)).to(dtype) * 2 - 1
    _check(aten.soft_margin_loss.default, x, sign, reduction, dtype=dtype)
    _check(aten.soft_margin_loss_backward.default, go, x, sign, reduction, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction: int, weighted: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    w = torch.rand(5, dtype=dtype) if weighted else None
    cases = [
        (aten.nll_loss_forward.default, aten.nll_loss_backward.default,
         torch.randn(4, 5, dtype=dtype), torch.tensor([1, -100, 4, 0]), -100),
        (aten.nll_loss_forward.default, aten.nll_loss_backward.default,
         torch.randn(5, dtype=dtype), torch.tensor(2), -100),
        (aten.nll_loss2d_forward.default, aten.nll_loss2d_backward.default,
         torch.randn(2, 5, 3, 4, dtype=dtype), torch.randint(0, 5, (2, 3, 4)), 1),
        # every target ignored: mean is 0/0 = NaN, total_weight 0
        (aten.nll_loss_forward.default, aten.nll_loss_backward.default,
         torch.randn(3, 5, dtype=dtype), torch.tensor([7, 7, 7]), 7),
    ]
    for fwd, bwd, x, t, ignore in cases:
        _check(fwd, x, t, w, reduction, ignore, dtype=dtype)
        loss, tw = fwd(x, t, w, reduction, ignore)
        _check(bwd, torch.randn_like(loss), x, t, w, reduction, ignore, tw, dtype=dtype)


def test_losses_bfloat16() -> None:
    # Computed in float32, rounded once; CPU's bf16 loss kernels round intermediates, hence bf16 tolerance.
    torch.manual_seed(0)
    x, t = torch.randn(4, 5).bfloat16(), torch.randn(4, 5).bfloat16()
    _check(aten.mse_loss.default, x, t, 1, dtype=torch.bfloat16)
    _check(aten.nll_loss_forward.default, x, torch.tensor([0, 1, 2, 3]), None, 1, -100, dtype=torch.bfloat16)
