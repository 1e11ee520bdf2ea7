"""Lowerings of special.py (angle, polygamma, zeta, cummax/cummin, put, tri indices, cross) and
regressions found by the OpInfo run (decomposition tracing of Tensor[] returns, batch norm with
one value per channel, integer and transposed-convolution backward, dropout backward dtypes)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torch_tpu.lowering  # noqa: F401
from torch_tpu.ir.builder import GraphBuilder
from torch_tpu.lowering.apply import trace_decomposition
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten


def test_decomposition_with_tensor_list_return() -> None:
    # torch._refs.linalg.cross calls broadcast_tensors (one Tensor[] return): the tracer must map
    # the returned list as one schema return, not one entry per tensor.
    torch.manual_seed(0)
    x, y = torch.randn(4, 3), torch.randn(1, 3)
    b = GraphBuilder(reference=True)
    vx = b.parameter(0, x.dtype, x.shape, x)
    vy = b.parameter(1, y.dtype, y.shape, y)
    out = trace_decomposition(b, aten.linalg_cross.default, [vx, vy, -1])
    torch.testing.assert_close(out.data, torch.linalg.cross(x, y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64], ids=str)
def test_cross(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (torch.randn(5, 3, 4) * 4).to(dtype)
    y = (torch.randn(5, 3, 4) * 4).to(dtype)
    # Half types: products and difference are rounded to the dtype like CPU, so results are equal;
    # float32 may differ by an ulp (CPU's vectorized kernel can fuse multiply-subtract).
    exact = dtype != torch.float32
    torch.testing.assert_close(run_reference(aten.linalg_cross.default, x, y, dim=1), torch.linalg.cross(x, y, dim=1),
                               **({"atol": 0, "rtol": 0} if exact else {}))


def test_batch_norm_one_value_per_channel() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 3, 1)
    rm, rv = torch.zeros(3), torch.ones(3)
    rm2, rv2 = rm.clone(), rv.clone()
    exp = aten.native_batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5)
    got = run_reference(aten.native_batch_norm.default, x, None, None, rm2, rv2, True, 0.1, 1e-5)
    # invstd is 1/sqrt(eps) ~ 316, so the output's rounding noise (CPU: x*alpha + beta) is ~1e-5.
    for g, e in zip(got, exp):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(rm2, rm)
    assert torch.isnan(rv).all() and torch.isnan(rv2).all()  # unbiased variance 0/0


def test_conv_transpose_backward_output_padding_beyond_stride() -> None:
    # output_padding may reach the dilation (>= stride): grad_input must still have x's shape.
    torch.manual_seed(0)
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    w = torch.randn(2, 2, 3, 3, dtype=torch.float64)
    args = ([1, 1], [1, 1], [2, 2], True, [1, 1], 1)
    y = aten.convolution(x, w, None, *args)
    go = torch.randn_like(y)
    exp = aten.convolution_backward(go, x, w, [2], *args, [True, True, True])
    got = run_reference(aten.convolution_backward.default, go, x, w, [2], *args, [True, True, True])
    for g, e in zip(got, exp):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int8], ids=str)
def test_integer_convolution(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randint(0, 20, (2, 3, 6, 6)).to(dtype)
    w = torch.randint(0, 20, (4, 3, 3, 3)).to(dtype)
    bias = torch.randint(0, 9, (4,)).to(dtype)
    exp = F.conv2d(x, w, bias, padding=1)  # uint8/int8 results wrap around
    got = run_reference(aten.convolution.default, x, w, bias, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert got.dtype == dtype
    torch.testing.assert_close(got, exp, atol=0, rtol=0)
    if dtype == torch.int64:
        wt = torch.randint(-5, 5, (3, 2, 3, 3))
        exp = F.conv_transpose2d(x, wt, stride=2)
        got = run_reference(aten.convolution.default, x, wt, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1)
        torch.testing.assert_close(got, exp, atol=0, rtol=0)
    else:
        with pytest.raises(NotImplementedError, match="slow_conv_transpose2d"):
            run_reference(aten.convolution.default, x, torch.zeros(3, 2, 3, 3, dtype=dtype), None, [1, 1],
                          [0, 0], [1, 1], True, [0, 0], 1)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool, torch.float16, torch.float32], ids=str)
def test_native_dropout_backward_dtypes(dtype: torch.dtype) -> None:
    g = torch.tensor([[1, 2, 0], [3, 1, 1]]).to(dtype)
    m = torch.tensor([[True, False, True], [True, True, False]])
    exp = aten.native_dropout_backward(g, m, 0.3)
    got = run_reference(aten.native_dropout_backward.default, g, m, 0.3)
    assert got.dtype == exp.dtype
    torch.testing.assert_close(got, exp)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_angle(dtype: torch.dtype) -> None:
    x = torch.tensor([-2.0, 0.0, -0.0, 3.5, math.nan, -math.inf]).to(dtype) if dtype.is_floating_point \
        else torch.tensor([-3, 0, 4])
    torch.testing.assert_close(run_reference(aten.angle.default, x), torch.angle(x), equal_nan=True)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_polygamma(n: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (torch.randn(64, dtype=torch.float64) * 6).to(dtype)
    x[:3] = torch.tensor([-2.0, 0.0, 1e-3])  # poles and a near-pole value
    # Same algorithm as ATen (reflection/recurrence/Euler-Maclaurin); only rounding differs.
    rtol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(run_reference(aten.polygamma.default, n, x), torch.polygamma(n, x),
                               rtol=rtol, atol=0, equal_nan=True)


def test_zeta() -> None:
    x = torch.tensor([2.0, 3.0, 1.0, 0.5, 2.5, 4.0, 2.0], dtype=torch.float64)
    q = torch.tensor([1.0, 0.3, 2.0, 1.0, -1.5, -3.0, 50.0], dtype=torch.float64)
    torch.testing.assert_close(run_reference(aten.special_zeta.default, x, q), torch.special.zeta(x, q),
                               rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_cummax_cummin(dtype: torch.dtype) -> None:
    t = torch.tensor([[1, 3, 3, 0, 2, 0, 5], [5, 4, 4, 6, 1, 0, 7]]).to(dtype)
    if dtype.is_floating_point:
        t[0, 3] = t[0, 5] = math.nan
    for fn, helper in ((torch.cummax, aten._cummax_helper.default), (torch.cummin, aten._cummin_helper.default)):
        for dim in (0, 1):
            v, i = torch.empty_like(t), torch.empty(t.shape, dtype=torch.int64)
            run_reference(helper, t, v, i, dim)
            e = fn(t, dim)
            torch.testing.assert_close(v, e.values, equal_nan=True)
            assert torch.equal(i, e.indices), (fn, dim, i, e.indices)


@pytest.mark.parametrize("accumulate", [False, True])
def test_put(accumulate: bool) -> None:
    x = torch.arange(12.0).reshape(3, 4)
    idx = torch.tensor([[0, -1], [5, 7]]) if not accumulate else torch.tensor([[0, -1], [5, 5]])
    src = torch.tensor([[10.0, 20.0], [30.0, 40.0]])
    torch.testing.assert_close(run_reference(aten.put.default, x, idx, src, accumulate), x.put(idx, src, accumulate))


@pytest.mark.parametrize("shape", [(4, 5, 0), (3, 3, -1), (5, 3, 2), (4, 4, -5), (0, 3, 0), (1, 1, 0)])
def test_tri_indices(shape) -> None:
    r, c, off = shape
    assert torch.equal(run_reference(aten.tril_indices.default, r, c, off), torch.tril_indices(r, c, off))
    assert torch.equal(run_reference(aten.triu_indices.default, r, c, off), torch.triu_indices(r, c, off))
    got = run_reference(aten.tril_indices.default, r, c, off, dtype=torch.int32)
    assert got.dtype == torch.int32 and torch.equal(got.long(), torch.tril_indices(r, c, off))
