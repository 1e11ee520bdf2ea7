"""Matrix-product lowerings (linalg.py) on the reference interpreter vs PyTorch CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu.lowering  # noqa: F401
from torch_tpu.lowering.testing import ReferenceMode, run_reference

aten = torch.ops.aten
# bfloat16: both sides accumulate in float32, but rounding of the inputs/outputs and summation
# order differ, so allow a few bf16 ulps.
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2, torch.int64: 0}


def _rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.int64:
        return torch.randint(-6, 7, shape)
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def _check(op, *args, dtype: torch.dtype, **kwargs) -> None:
    expected = op(*args, **kwargs)
    got = run_reference(op, *args, **kwargs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=TOL[dtype], rtol=TOL[dtype], equal_nan=True)


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_products(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    r = lambda *s: _rand(*s, dtype=dtype)  # noqa: E731
    _check(aten.mm.default, r(3, 4), r(4, 5), dtype=dtype)
    _check(aten.bmm.default, r(2, 3, 4), r(2, 4, 5), dtype=dtype)
    _check(aten.mv.default, r(3, 4), r(4), dtype=dtype)
    _check(aten.dot.default, r(7), r(7), dtype=dtype)
    _check(aten.vdot.default, r(7), r(7), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, -2.0), (0, 3)] , ids=["default", "scaled", "beta0"])
def test_add_products(dtype: torch.dtype, beta: float, alpha: float) -> None:
    torch.manual_seed(1)
    if dtype == torch.int64:
        beta, alpha = int(beta), int(alpha)
    r = lambda *s: _rand(*s, dtype=dtype)  # noqa: E731
    _check(aten.addmm.default, r(5), r(3, 4), r(4, 5), beta=beta, alpha=alpha, dtype=dtype)
    _check(aten.addmm.default, r(3, 1), r(3, 4), r(4, 5), beta=beta, alpha=alpha, dtype=dtype)
    _check(aten.baddbmm.default, r(2, 3, 5), r(2, 3, 4), r(2, 4, 5), beta=beta, alpha=alpha, dtype=dtype)
    _check(aten.addbmm.default, r(3, 5), r(2, 3, 4), r(2, 4, 5), beta=beta, alpha=alpha, dtype=dtype)
    _check(aten.addmv.default, r(3), r(3, 4), r(4), beta=beta, alpha=alpha, dtype=dtype)


def test_beta_zero_ignores_nan_self() -> None:
    # BLAS semantics: with beta == 0, NaN/inf in self must not reach the result.
    s = torch.full((3, 5), float("nan"))
    m1, m2 = torch.randn(3, 4), torch.randn(4, 5)
    got = run_reference(aten.addmm.default, s, m1, m2, beta=0, alpha=2)
    assert not got.isnan().any()
    torch.testing.assert_close(got, 2 * (m1 @ m2))
    got = run_reference(aten.addmm.default, s, m1, m2, beta=0.5)
    assert got.isnan().all()


@pytest.mark.parametrize("use_gelu", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_addmm_activation(use_gelu: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    r = lambda *s: _rand(*s, dtype=dtype)  # noqa: E731
    _check(aten._addmm_activation.default, r(5), r(3, 4), r(4, 5), beta=0.5, alpha=1.5, use_gelu=use_gelu,
           dtype=dtype)


def test_errors() -> None:
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        run_reference(aten.mm.default, torch.randn(2, 3), torch.randn(4, 2))
    with pytest.raises(RuntimeError, match="same dtype"):
        run_reference(aten.mm.default, torch.randn(2, 3), torch.randn(3, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="1D tensors expected"):
        run_reference(aten.dot.default, torch.randn(2, 3), torch.randn(3))


def test_matmul_and_linear_compose_to_lowered_ops() -> None:
    # matmul/linear are composite: their batched forms reach dispatch as views + mm/bmm/addmm.
    torch.manual_seed(3)
    x, w, bias = torch.randn(2, 3, 4), torch.randn(5, 4), torch.randn(5)
    a, b4 = torch.randn(2, 1, 3, 4), torch.randn(3, 4, 6)
    mode = ReferenceMode()
    with mode:
        got = (F.linear(x, w, bias), torch.matmul(a, b4), torch.matmul(x[0, 0], w.t()), torch.outer(bias, bias))
    expected = (F.linear(x, w, bias), torch.matmul(a, b4), torch.matmul(x[0, 0], w.t()), torch.outer(bias, bias))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    assert mode.lowered.get("aten.addmm.default") and (mode.lowered.get("aten.bmm.default") or mode.lowered.get("aten.mm.default"))
