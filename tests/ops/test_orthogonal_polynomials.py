"""torch.special orthogonal polynomials on "tpu" (torch_tpu/lowering/orthogonal_polynomials.py) against
CPU: grids of x inside and outside [-1, 1] (and [0, 1] for the shifted Chebyshev ones), at the
endpoints and at NaN, against degrees that are negative, non-integer (truncated), NaN and infinite (0),
and 0 up to the unrolled cap of 128; strict and fused modes, broadcasting, integer promotion, the
scalar overloads, and the documented NaN for degrees above the cap that need the recurrence.

The recurrences agree with CPU bit for bit (the lowering rounds a * q - c once, as CPU's contracted
kernels do); the Chebyshev closed forms go through cos / acos, whose last bits differ between math
libraries, so comparisons allow a few ulps scaled by the degree.
"""

from __future__ import annotations

import pytest
import torch

import torch_tpu

DEV = "tpu"
CAP = 128
NAMES = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
         "legendre_polynomial_p"]
CHEBYSHEV = [n for n in NAMES if "chebyshev" in n]

X = [-3.0, -1.5, -1.0, -0.999, -0.5, -1e-30, 0.0, 1e-3, 0.3, 0.5, 0.7, 0.9999, 1.0, 1.2, 2.5, float("nan")]
N = [-3.0, -0.5, 0.0, 0.7, 1.0, 1.9, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 17.0, 40.0, 63.0, 100.0, 127.0,
     128.0, float("nan"), float("inf"), -float("inf"), 1e30]


def _grid(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor(X, dtype=dtype)[:, None].expand(-1, len(N)).contiguous()
    n = torch.tensor(N, dtype=dtype)[None, :].expand(len(X), -1).contiguous()
    return x, n


def _assert_matches(got: torch.Tensor, exp: torch.Tensor, exact_recurrence: bool = False) -> None:
    assert got.dtype == exp.dtype
    assert torch.equal(got.isnan(), exp.isnan())
    if exact_recurrence:
        assert torch.equal(got.nan_to_num(0.0), exp.nan_to_num(0.0))
    else:
        rtol = 1e-4 if exp.dtype == torch.float32 else 1e-12
        torch.testing.assert_close(got, exp, rtol=rtol, atol=rtol, equal_nan=True)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", NAMES)
def test_matches_cpu_over_grid(name: str, dtype: torch.dtype, mode: str) -> None:
    fn = getattr(torch.special, name)
    x, n = _grid(dtype)
    with torch_tpu.mode(mode):
        got = fn(x.to(DEV), n.to(DEV)).cpu()
    # (the Chebyshev closed forms' cos / acos differ from CPU's in the last bits)
    _assert_matches(got, fn(x, n), exact_recurrence=name not in CHEBYSHEV)


@pytest.mark.parametrize("name", NAMES)
def test_recurrence_is_bitwise_outside_the_closed_forms(name: str) -> None:
    """|x| > 1 (x > 1 or < 0 shifted): every family runs the recurrence there, as CPU does."""
    fn = getattr(torch.special, name)
    for dtype in (torch.float32, torch.float64):
        x = torch.tensor([-2.75, -1.5, -1.0625, 1.03, 1.5, 3.1], dtype=dtype)[:, None].expand(-1, CAP + 1)
        n = torch.arange(CAP + 1, dtype=dtype)[None, :].expand(6, -1)
        got, exp = fn(x.to(DEV), n.to(DEV)).cpu(), fn(x, n)
        assert torch.equal(got.isnan(), exp.isnan())
        assert torch.equal(got.nan_to_num(0.0, 1.0, -1.0), exp.nan_to_num(0.0, 1.0, -1.0))


@pytest.mark.parametrize("name", NAMES)
def test_degree_above_cap_is_nan_where_the_recurrence_is_needed(name: str) -> None:
    fn = getattr(torch.special, name)
    n = torch.tensor([CAP + 1.0, 500.0, 10.0**6])
    x = torch.full_like(n, 1.05)
    got = fn(x.to(DEV), n.to(DEV)).cpu()
    assert got.isnan().all()
    # shortcuts need no recurrence and hold for every degree: negative degrees, the endpoints, 0 for Laguerre
    assert torch.equal(fn(x.to(DEV), (-n).to(DEV)).cpu(), torch.zeros(3))
    endpoint = 0.0 if name == "laguerre_polynomial_l" else 1.0
    if "hermite" not in name:
        xe = torch.full_like(n, endpoint)
        assert torch.equal(fn(xe.to(DEV), n.to(DEV)).cpu(), fn(xe, n))


@pytest.mark.parametrize("name", CHEBYSHEV)
def test_chebyshev_closed_form_has_no_cap(name: str) -> None:
    fn = getattr(torch.special, name)
    x = torch.tensor([0.3, 0.45, 0.6, 0.95], dtype=torch.float64)
    n = torch.tensor([200.0, 1000.0, 12345.0, 10.0**6], dtype=torch.float64)
    # cos((n + 1) acos x): acos's last-bit difference between math libraries grows with n
    torch.testing.assert_close(fn(x.to(DEV), n.to(DEV)).cpu(), fn(x, n), rtol=1e-9, atol=1e-9)


def test_float32_hermite_matches_cpu_limit() -> None:
    """CPU's own limit for Hermite in float32 is 128 (NaN above), the same as the cap."""
    x = torch.tensor([0.5, 0.5, 0.5])
    n = torch.tensor([128.0, 129.0, 200.0])
    for name in ("hermite_polynomial_h", "hermite_polynomial_he"):
        fn = getattr(torch.special, name)
        _assert_matches(fn(x.to(DEV), n.to(DEV)).cpu(), fn(x, n), exact_recurrence=True)


@pytest.mark.parametrize("name", NAMES)
def test_broadcasting_and_mixed_dtypes(name: str) -> None:
    fn = getattr(torch.special, name)
    x = torch.linspace(-1.5, 1.5, 7, dtype=torch.float32).reshape(7, 1, 1)
    n = torch.arange(-1, 11, dtype=torch.int64).reshape(1, 3, 4)
    _assert_matches(fn(x.to(DEV), n.to(DEV)).cpu(), fn(x, n))
    nd = n.to(torch.float64)  # float32 x, float64 n: computed in float64
    _assert_matches(fn(x.to(DEV), nd.to(DEV)).cpu(), fn(x, nd))


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "hermite_polynomial_h", "legendre_polynomial_p"])
def test_integer_inputs_promote_to_float(name: str) -> None:
    fn = getattr(torch.special, name)
    x = torch.tensor([-2, -1, 0, 1, 3], dtype=torch.int32)
    n = torch.tensor([0, 1, 2, 5, 9], dtype=torch.int64)
    _assert_matches(fn(x.to(DEV), n.to(DEV)).cpu(), fn(x, n), exact_recurrence=True)


@pytest.mark.parametrize("name", NAMES)
def test_scalar_overloads(name: str) -> None:
    fn = getattr(torch.special, name)
    x = torch.tensor([-1.25, -0.5, 0.0, 0.25, 1.0, 2.0], dtype=torch.float64)
    n = torch.tensor([0.0, 1.0, 3.0, 7.0, 12.0, 20.0], dtype=torch.float64)
    _assert_matches(fn(x.to(DEV), 5).cpu(), fn(x, 5))             # n_scalar
    _assert_matches(fn(x.to(DEV), 9.8).cpu(), fn(x, 9.8))         # non-integer degree: truncated
    _assert_matches(fn(0.375, n.to(DEV)).cpu(), fn(0.375, n))     # x_scalar


def test_half_types_are_rejected_like_cpu() -> None:
    x = torch.tensor([0.5], dtype=torch.float16)
    with pytest.raises(NotImplementedError):
        torch.special.chebyshev_polynomial_t(x.to(DEV), x.to(DEV)).cpu()
