"""igamma / igammac (special.gammainc / gammaincc) on "tpu" (torch_tpu/lowering/incomplete_gamma.py)
against CPU: a grid of a and x (small, large, x near a, both sides of the series / continued
fraction switch at x = a + 1), every special value of CPU's kernel, strict and fused modes,
broadcasting and promotion, the gradient wrt x, and torch.distributions.Gamma.cdf. Where a > 20
and x is near a, CPU's own asymptotic expansion is good to ~1e-9 only, so those points are also
checked against mpmath (when installed) at the precision the lowering reaches."""

from __future__ import annotations

import math

import pytest
import torch

import torch_tpu

DEV = "tpu"
OPS = [torch.igamma, torch.igammac]
INF, NAN = math.inf, math.nan


def _grid(dtype: torch.dtype, max_a: float = 1000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """a from 1e-3 to max_a, x from a / 1000 to 10 a, densest around x = a (and x = a + 1)."""
    a = torch.logspace(-3, math.log10(max_a), 25, dtype=torch.float64)
    ratio = torch.cat([torch.logspace(-3, 1, 17, dtype=torch.float64),
                       1 + torch.linspace(-0.3, 0.3, 13, dtype=torch.float64)])
    aa, rr = torch.meshgrid(a, ratio, indexing="ij")
    xx = aa * rr
    # also x = a + 1 exactly and just around it, where the method switches
    near = aa[:, :3] + torch.tensor([1.0 - 1e-6, 1.0, 1.0 + 1e-6], dtype=torch.float64)
    return torch.cat([aa.flatten(), aa[:, :3].flatten()]).to(dtype), torch.cat([xx.flatten(), near.flatten()]).to(dtype)


# CPU's float64 kernel is itself only ~1.5e-9 accurate for a > 20 with x near a (its asymptotic
# series); the float32 kernels differ in rounding of the prefactor (~|log f| ulps).
_TOL = {torch.float64: dict(rtol=5e-9, atol=1e-15), torch.float32: dict(rtol=1e-4, atol=2e-6),
        torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5), torch.float16: dict(rtol=1e-3, atol=1e-5)}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("op", OPS)
def test_values_match_cpu_over_a_grid(op, dtype: torch.dtype, mode: str) -> None:
    a, x = _grid(dtype)
    with torch_tpu.mode(mode):
        got = op(a.to(DEV), x.to(DEV)).cpu()
    assert got.dtype == dtype
    torch.testing.assert_close(got, op(a, x), **_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", OPS)
def test_half_types_compute_in_float32(op, dtype: torch.dtype) -> None:
    a, x = _grid(dtype, max_a=100.0)
    got = op(a.to(DEV), x.to(DEV)).cpu()
    assert got.dtype == dtype
    torch.testing.assert_close(got, op(a, x), **_TOL[dtype])


def test_large_a_near_x_against_mpmath() -> None:
    """P and Q to ~1e-12 relative for a up to 3000, x within a few standard deviations sqrt(a)."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    rows = [(a, a + d * math.sqrt(a)) for a in (25.5, 300.0, 1000.0, 3000.0) for d in (-3, -1, -0.1, 0, 0.1, 1, 3)]
    a = torch.tensor([r[0] for r in rows], dtype=torch.float64)
    x = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    want_p = torch.tensor([float(mpmath.gammainc(p, 0, q, regularized=True)) for p, q in rows], dtype=torch.float64)
    want_q = torch.tensor([float(mpmath.gammainc(p, q, mpmath.inf, regularized=True)) for p, q in rows],
                          dtype=torch.float64)
    torch.testing.assert_close(torch.igamma(a.to(DEV), x.to(DEV)).cpu(), want_p, rtol=2e-12, atol=0)
    torch.testing.assert_close(torch.igammac(a.to(DEV), x.to(DEV)).cpu(), want_q, rtol=2e-12, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", OPS)
def test_special_values_match_cpu(op, dtype: torch.dtype) -> None:
    values = [0.0, -0.0, 1e-30, 0.5, 1.0, 7.0, 300.0, INF, -1.0, -INF, NAN]
    a, x = torch.meshgrid(torch.tensor(values, dtype=dtype), torch.tensor(values, dtype=dtype), indexing="ij")
    got = op(a.to(DEV), x.to(DEV)).cpu()
    torch.testing.assert_close(got, op(a, x), equal_nan=True, **_TOL[dtype])
    # the exact special cases agree exactly (NaN where CPU has NaN, 0 and 1 exactly)
    want = op(a, x)
    exact = torch.isnan(want) | (want == 0) | (want == 1)
    assert torch.equal(torch.isnan(got[exact]), torch.isnan(want[exact]))
    assert torch.equal(got[exact].nan_to_num(2.0), want[exact].nan_to_num(2.0))


def test_igamma_and_igammac_sum_to_one_and_special_aliases() -> None:
    a, x = _grid(torch.float64)
    p = torch.special.gammainc(a.to(DEV), x.to(DEV)).cpu()
    q = torch.special.gammaincc(a.to(DEV), x.to(DEV)).cpu()
    torch.testing.assert_close(p + q, torch.ones_like(p), rtol=0, atol=1e-14)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_broadcasting_promotion_and_out_variants(mode: str) -> None:
    a = torch.tensor([[0.5], [3.0], [40.0]], dtype=torch.float32)
    x = torch.tensor([0.1, 2.0, 39.0, 100.0], dtype=torch.float64)
    with torch_tpu.mode(mode):
        got = torch.igamma(a.to(DEV), x.to(DEV)).cpu()
        got_c = torch.igammac(x.to(DEV), a.to(DEV)).cpu()
        inplace = a.to(DEV).expand(3, 4).contiguous()
        inplace.igamma_(x.to(DEV, torch.float32))
        out = torch.empty(3, 4, dtype=torch.float64, device=DEV)
        torch.special.gammaincc(a.double().to(DEV), x.to(DEV), out=out)
    assert got.shape == (3, 4) and got.dtype == torch.float64
    torch.testing.assert_close(got, torch.igamma(a, x), **_TOL[torch.float64])
    torch.testing.assert_close(got_c, torch.igammac(x, a), **_TOL[torch.float64])
    torch.testing.assert_close(inplace.cpu(), a.expand(3, 4).contiguous().igamma_(x.float()), **_TOL[torch.float32])
    torch.testing.assert_close(out.cpu(), torch.special.gammaincc(a.double(), x), **_TOL[torch.float64])


def test_integer_inputs_raise_like_cpu() -> None:
    with pytest.raises(NotImplementedError, match="igamma"):
        torch.igamma(torch.tensor([1, 2], device=DEV), torch.tensor([1, 2], device=DEV))


@pytest.mark.parametrize("op", OPS)
def test_gradient_wrt_x_matches_cpu(op) -> None:
    a = torch.tensor([0.3, 1.0, 2.5, 10.0, 50.0], dtype=torch.float64)
    x = torch.tensor([0.2, 1.5, 2.0, 12.0, 45.0], dtype=torch.float64)
    xt = x.to(DEV).requires_grad_()
    op(a.to(DEV), xt).sum().backward()
    xc = x.clone().requires_grad_()
    op(a, xc).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-12, atol=1e-15)
    # PyTorch defines no derivative wrt a
    at = a.to(DEV).requires_grad_()
    with pytest.raises(RuntimeError, match="not implemented"):
        op(at, x.to(DEV)).sum().backward()


def test_gamma_distribution_cdf_matches_cpu() -> None:
    conc = torch.tensor([0.5, 2.0, 9.0, 150.0], dtype=torch.float64)
    rate = torch.tensor([1.0, 0.5, 3.0, 2.0], dtype=torch.float64)
    value = torch.tensor([[0.3], [2.0], [80.0]], dtype=torch.float64)
    want = torch.distributions.Gamma(conc, rate).cdf(value)
    got = torch.distributions.Gamma(conc.to(DEV), rate.to(DEV)).cdf(value.to(DEV)).cpu()
    torch.testing.assert_close(got, want, **_TOL[torch.float64])
