"""logcumsumexp on "tpu" (torch_tpu/lowering/logcumsumexp.py: a Hillis-Steele scan of logaddexp
in CPU's accumulation dtype), beyond OpInfo's 5x5x5 samples: long and odd lengths, every dim,
value ranges where log(cumsum(exp(x))) overflows or underflows, CPU's handling of inf and NaN,
half types, gradients and what raises.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu

DEV = "tpu"
MODES = ["strict", "fused"]
INF, NAN = float("inf"), float("nan")


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _on_tpu(x: torch.Tensor, dim: int, mode: str = "strict") -> torch.Tensor:
    with torch_tpu.mode(mode):
        return torch.logcumsumexp(x.to(DEV), dim).cpu()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((4, 33), 1), ((4, 33), -2), ((2, 3, 1000), -1), ((1000, 3), 0),
                                       ((3, 1, 5), 1), ((2, 0, 4), 1), ((2, 0, 4), 2)])
def test_matches_cpu(mode: str, dtype: torch.dtype, shape: tuple[int, ...], dim: int) -> None:
    x = _randn(*shape, dtype=dtype) * 10
    torch.testing.assert_close(_on_tpu(x, dim, mode), torch.logcumsumexp(x, dim))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_ranges_stay_finite_where_cpu_is(dtype: torch.dtype) -> None:
    big = torch.finfo(dtype).max / 4
    rows = [[-big, -big, -big * 0.5, -1e4, 1e4, -1e4, 0.0, big, big],  # exp() of any of these overflows or is 0
            [-1e30, -1e30 + 1e24, -1e30, -1e30, -2e30, -1e30, -1e30, -1e30, -1e30],  # all far below exp's range
            [1e4, 1e4 - 1, 1e4 - 50, 1e4 + 30, -1e4, 1e4 + 30, 1e4 + 30.5, 0.0, 1e4]]
    x = torch.tensor(rows, dtype=dtype)
    got, want = _on_tpu(x, 1), torch.logcumsumexp(x, 1)
    assert got.isfinite().all() and want.isfinite().all()
    torch.testing.assert_close(got, want)
    # what log(cumsum(exp(x))) gets wrong: terms whose exp underflows still add log(k)
    tiny = torch.full((4,), -800.0, dtype=dtype)
    want = -800.0 + torch.log(torch.arange(1, 5, dtype=torch.float64)).to(dtype)
    torch.testing.assert_close(_on_tpu(tiny, 0), want)


@pytest.mark.parametrize("mode", MODES)
def test_inf_and_nan_follow_cpu(mode: str) -> None:
    x = torch.tensor([[-INF, -INF, 1.0, INF, 2.0, NAN, 3.0, -INF],
                      [INF, -INF, INF, 1.0, -INF, 5.0, 6.0, 7.0],
                      [-INF, -INF, -INF, -INF, -INF, -INF, -INF, -INF],
                      [NAN, -INF, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                      [-INF, 0.0, -INF, 0.0, -INF, 0.0, -INF, 0.0]])
    torch.testing.assert_close(_on_tpu(x, 1, mode), torch.logcumsumexp(x, 1), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_accumulate_in_float32(dtype: torch.dtype) -> None:
    x = (_randn(3, 300) * 5).to(dtype)
    x[0, 0] = 1000.0  # fits float16 and bfloat16; exp of it does not
    got = _on_tpu(x, 1)
    assert got.dtype == dtype
    torch.testing.assert_close(got, torch.logcumsumexp(x, 1))


def test_zero_dim_and_single_element() -> None:
    for x in (torch.tensor(3.5), torch.tensor(-INF), torch.tensor([2.0]), torch.tensor([[NAN]])):
        torch.testing.assert_close(_on_tpu(x, 0), torch.logcumsumexp(x, 0), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("large", [False, True])
def test_gradients_match_cpu(dtype: torch.dtype, large: bool) -> None:
    # ATen's backward runs logcumsumexp of log|g| - out on the flipped tensor; with a 1e4 entry
    # (OpInfo's "large number" sample) it cancels values of 1e4, so it depends on every output
    # rounding as CPU's does (which the float64 accumulation gives)
    x = _randn(5, 6, 7, dtype=dtype)
    if large:
        x[0] = 1e4
    g = _randn(5, 6, 7, seed=1, dtype=dtype)
    for dim in (0, 2):
        a = x.clone().requires_grad_()
        t = x.to(DEV).requires_grad_()
        torch.autograd.backward(torch.logcumsumexp(a, dim), g)
        torch.autograd.backward(torch.logcumsumexp(t, dim), g.to(DEV))
        torch.testing.assert_close(t.grad.cpu(), a.grad, rtol=1e-4, atol=1e-4)


def test_gradcheck() -> None:
    x = _randn(3, 9, dtype=torch.float64).to(DEV).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch.logcumsumexp(t, 1), (x,))


def test_unsupported_inputs_raise_clearly() -> None:
    with pytest.raises(NotImplementedError, match="_logcumsumexp"):
        _on_tpu(_randn(4).to(torch.complex64), 0)
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        _on_tpu(torch.ones(4, dtype=torch.int64), 0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        _on_tpu(_randn(3, 4), 2)


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="the StableHLO runtime needs jax")
def test_stablehlo_runtime_matches_cpu() -> None:
    code = """
import torch, torch_tpu
torch_tpu.set_fallback(None)
inf, nan = float("inf"), float("nan")
for dtype in (torch.float32, torch.float64, torch.bfloat16):
    x = torch.randn(4, 37, generator=torch.Generator().manual_seed(0)).to(dtype) * 100
    x[0, :5] = -inf; x[1, 3] = nan; x[2, 7] = inf; x[3, 0] = 1e4
    torch.testing.assert_close(torch.logcumsumexp(x.to("tpu"), 1).cpu(), torch.logcumsumexp(x, 1), equal_nan=True)
print("ok")
"""
    env = dict(os.environ, TORCH_TPU_RUNTIME="jax")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
