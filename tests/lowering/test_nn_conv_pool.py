"""Convolution and pooling lowerings (nn_conv.py, nn_pool.py) vs PyTorch CPU, forward and backward."""

from __future__ import annotations

import pytest
import torch

import torch_tpu.lowering  # noqa: F401
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten
# bfloat16 convolutions: the lowering convolves in float32 and rounds once; CPU's bf16 kernels
# round partial products differently, so compare at bf16 resolution.
TOL = {torch.float32: 2e-5, torch.float64: 1e-10, torch.bfloat16: 3e-2}
ATOL = {**TOL, torch.bfloat16: 1e-1}  # bf16 sums that cancel to ~0 keep an absolute error of ~1 ulp of the terms


def _close(got, expected, dtype: torch.dtype) -> None:
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None
            continue
        assert g.dtype == e.dtype and g.shape == e.shape
        if e.dtype == torch.int64:
            assert torch.equal(g, e)
        else:
            torch.testing.assert_close(g, e, atol=ATOL[dtype], rtol=TOL[dtype])


def _check(op, *args, dtype: torch.dtype, **kwargs) -> None:
    _close(run_reference(op, *args, **kwargs), op(*args, **kwargs), dtype)


# (input shape, weight shape, stride, padding, dilation, transposed, output_padding, groups)
CONVS = [
    ((2, 3, 10), (4, 3, 3), [3], [1], [1], False, [0], 1),
    ((2, 4, 9, 9), (6, 2, 3, 3), [2, 1], [1, 2], [1, 2], False, [0, 0], 2),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), [1, 2, 1], [1, 0, 1], [1, 1, 2], False, [0, 0, 0], 1),
    ((2, 4, 9, 9), (4, 3, 3, 2), [2, 3], [1, 0], [2, 1], True, [1, 2], 2),
    ((2, 3, 7), (3, 2, 4), [2], [1], [1], True, [1], 1),
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 3), [2, 1, 2], [0, 1, 1], [1, 1, 1], True, [1, 0, 0], 1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{len(c[1]) - 2}d{'T' if c[5] else ''}-g{c[7]}-{len(c[0])}")
def test_convolution_and_backward(case, dtype: torch.dtype) -> None:
    xs, ws, stride, pad, dil, transposed, opad, groups = case
    torch.manual_seed(0)
    x, w = torch.randn(xs, dtype=dtype), torch.randn(ws, dtype=dtype)
    cout = ws[1] * groups if transposed else ws[0]
    bias = torch.randn(cout, dtype=dtype)
    args = (stride, pad, dil, transposed, opad, groups)
    _check(aten.convolution.default, x, w, bias, *args, dtype=dtype)
    _check(aten.convolution.default, x, w, None, *args, dtype=dtype)
    y = aten.convolution(x, w, bias, *args)
    go = torch.randn_like(y)
    for mask in ([True, True, True], [False, True, False], [True, False, False]):
        _check(aten.convolution_backward.default, go, x, w, [cout], *args, mask, dtype=dtype)


def test_convolution_bfloat16() -> None:
    torch.manual_seed(1)
    x, w = torch.randn(2, 4, 8, 8).bfloat16(), torch.randn(6, 2, 3, 3).bfloat16()
    _check(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 2, dtype=torch.bfloat16)
    y = aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 2)
    _check(aten.convolution_backward.default, torch.randn_like(y), x, w, None, [1, 1], [1, 1], [1, 1], False,
           [0, 0], 2, [True, False, False], dtype=torch.bfloat16)


def test_convolution_errors() -> None:
    with pytest.raises(RuntimeError, match="4-dimensional input"):  # unbatched input is conv2d's job
        run_reference(aten.convolution.default, torch.randn(3, 5, 5), torch.randn(2, 3, 3, 3), None,
                      [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    with pytest.raises(RuntimeError, match="channels"):
        run_reference(aten.convolution.default, torch.randn(1, 3, 5, 5), torch.randn(2, 2, 3, 3), None,
                      [1, 1], [0, 0], [1, 1], False, [0, 0], 1)


# (input shape, kernel, stride, padding, dilation, ceil_mode)
MAXPOOLS = [
    ((2, 3, 9, 8), [3, 2], [2, 2], [1, 1], [1, 2], True),
    ((2, 3, 9, 8), [3, 3], [2, 2], [1, 1], [1, 1], False),
    ((3, 7, 7), [2, 2], [], [0, 0], [1, 1], False),
    ((1, 2, 5, 6, 7), [2, 3, 2], [2, 2, 1], [1, 1, 0], [1, 1, 2], True),
    ((2, 1, 5, 6, 4), [3, 3, 3], [1, 2, 2], [1, 1, 1], [1, 1, 1], False),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", MAXPOOLS, ids=lambda c: f"{len(c[1])}d-{len(c[0])}-ceil{int(c[5])}")
def test_max_pool(case, dtype: torch.dtype) -> None:
    xs, k, s, p, d, ceil = case
    torch.manual_seed(0)
    x = torch.randn(xs, dtype=dtype)
    x.view(-1)[::7] = 0.5  # ties: the first maximum's index wins, as on CPU
    fwd = aten.max_pool2d_with_indices.default if len(k) == 2 else aten.max_pool3d_with_indices.default
    bwd = aten.max_pool2d_with_indices_backward.default if len(k) == 2 else aten.max_pool3d_with_indices_backward.default
    _check(fwd, x, k, s, p, d, ceil, dtype=dtype)
    out, ind = fwd(x, k, s, p, d, ceil)
    _check(bwd, torch.randn_like(out), x, k, s, p, d, ceil, ind, dtype=dtype)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("ceil_mode", [True, False])
@pytest.mark.parametrize("divisor_override", [None, 3])
@pytest.mark.parametrize("nd", [2, 3])
def test_avg_pool(count_include_pad: bool, ceil_mode: bool, divisor_override: int | None, nd: int) -> None:
    torch.manual_seed(0)
    dtype = torch.float64
    if nd == 2:
        x, k, s, p = torch.randn(2, 3, 9, 8, dtype=dtype), [3, 2], [2, 3], [1, 1]
        fwd, bwd = aten.avg_pool2d.default, aten.avg_pool2d_backward.default
    else:
        x, k, s, p = torch.randn(1, 2, 5, 6, 7, dtype=dtype), [2, 3, 2], [2, 2, 1], [1, 1, 0]
        fwd, bwd = aten.avg_pool3d.default, aten.avg_pool3d_backward.default
    args = (k, s, p, ceil_mode, count_include_pad, divisor_override)
    _check(fwd, x, *args, dtype=dtype)
    _check(bwd, torch.randn_like(fwd(x, *args)), x, *args, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape,out", [((2, 3, 9, 8), [4, 3]), ((3, 7, 5), [7, 2]), ((2, 2, 4, 4), [1, 1]),
                                       ((1, 2, 5, 6, 7), [2, 4, 3])], ids=str)
def test_adaptive_pools(shape, out, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    n = len(out)
    avg = aten._adaptive_avg_pool2d.default if n == 2 else aten._adaptive_avg_pool3d.default
    avg_b = aten._adaptive_avg_pool2d_backward.default if n == 2 else aten._adaptive_avg_pool3d_backward.default
    mx = aten.adaptive_max_pool2d.default if n == 2 else aten.adaptive_max_pool3d.default
    mx_b = aten.adaptive_max_pool2d_backward.default if n == 2 else aten.adaptive_max_pool3d_backward.default
    _check(avg, x, out, dtype=dtype)
    y = avg(x, out)
    _check(avg_b, torch.randn_like(y), x, dtype=dtype)
    _check(mx, x, out, dtype=dtype)
    y, ind = mx(x, out)
    _check(mx_b, torch.randn_like(y), x, ind, dtype=dtype)


def test_pools_bfloat16() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8).bfloat16()
    _check(aten.max_pool2d_with_indices.default, x, [2, 2], [2, 2], [0, 0], [1, 1], False, dtype=torch.bfloat16)
    _check(aten.avg_pool2d.default, x, [3, 3], [2, 2], [1, 1], False, True, None, dtype=torch.bfloat16)
    _check(aten._adaptive_avg_pool2d.default, x, [3, 3], dtype=torch.bfloat16)


def test_max_pool_values_and_indices_exact() -> None:
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    out, ind = run_reference(aten.max_pool2d_with_indices.default, x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    assert out.flatten().tolist() == [5.0, 7.0, 13.0, 15.0]
    assert ind.flatten().tolist() == [5, 7, 13, 15]
