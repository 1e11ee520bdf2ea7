"""gcd, lcm, frexp and nextafter on "tpu" (torch_tpu/lowering/number_parts.py) against CPU, over
every integer width (Euclid's worst case, negative values, zeros, lcm's wrapping of narrow
types) and every float type's edges (zeros of both signs, subnormals, the largest finite value,
infinities, NaN)."""

from __future__ import annotations

import pytest
import torch

import torch_tpu

DEV = "tpu"
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _ints(dtype: torch.dtype, seed: int) -> torch.Tensor:
    info = torch.iinfo(dtype)
    hi = min(info.max, 10**6)
    lo = 0 if dtype == torch.uint8 else -hi
    t = torch.randint(lo, hi, (400,), generator=torch.Generator().manual_seed(seed), dtype=dtype)
    t[:4] = 0
    return t


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", INTS)
def test_gcd_and_lcm_match_cpu(mode: str, dtype: torch.dtype) -> None:
    a, b = _ints(dtype, 0), _ints(dtype, 1)
    b[2:6] = 0
    with torch_tpu.mode(mode):
        got_gcd, got_lcm = torch.gcd(a.to(DEV), b.to(DEV)).cpu(), torch.lcm(a.to(DEV), b.to(DEV)).cpu()
    assert torch.equal(got_gcd, torch.gcd(a, b))
    assert torch.equal(got_lcm, torch.lcm(a, b))  # narrow types wrap as CPU's int arithmetic does


def test_gcd_takes_euclids_longest_path_and_broadcasts() -> None:
    fib = torch.tensor([7540113804746346429], dtype=torch.int64)  # F92 and F91: 90 steps
    assert torch.gcd(fib.to(DEV), torch.tensor([4660046610375530309]).to(DEV)).item() == 1
    a = torch.tensor([[12], [-18], [0]])
    torch.testing.assert_close(torch.gcd(a.to(DEV), torch.tensor([8, 27]).to(DEV)).cpu(),
                               torch.gcd(a, torch.tensor([8, 27])), rtol=0, atol=0)
    with pytest.raises(NotImplementedError, match="gcd"):
        torch.gcd(torch.ones(2, device=DEV), torch.ones(2, device=DEV))


def _edges(dtype: torch.dtype) -> torch.Tensor:
    fi = torch.finfo(dtype)
    base = torch.tensor([0.0, 1.0, 0.75, 3.0, 1e-3, 2.0**-5, 123.456, fi.tiny, fi.tiny / 4, fi.max, float("inf")],
                        dtype=torch.float64)
    subnormals = fi.tiny * torch.tensor([2.0**-k for k in range(30)], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(500, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (500,), generator=g)
    x = torch.cat([base, subnormals, spread]).to(dtype)
    return torch.cat([x, -x, torch.tensor([float("nan")], dtype=dtype)])


@pytest.mark.parametrize("dtype", FLOATS)
def test_frexp_matches_cpu(dtype: torch.dtype) -> None:
    x = _edges(dtype)
    mantissa, exponent = torch.frexp(x.to(DEV))
    want_m, want_e = torch.frexp(x)
    assert exponent.dtype == torch.int32
    torch.testing.assert_close(mantissa.cpu(), want_m, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(mantissa.cpu()[:-1]), torch.signbit(want_m[:-1]))
    assert torch.equal(exponent.cpu(), want_e)
    # ldexp computes 2^e first, which overflows near the largest finite value (CPU's too)
    small = x.abs() < torch.finfo(dtype).max / 4
    torch.testing.assert_close(torch.ldexp(mantissa, exponent).cpu()[small], x[small], rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_nextafter_matches_cpu(mode: str, dtype: torch.dtype) -> None:
    x = _edges(dtype)
    targets = [torch.zeros_like(x), -torch.zeros_like(x), torch.full_like(x, float("inf")),
               torch.full_like(x, float("-inf")), x.flip(0), x, x.roll(1)]
    for y in targets:
        with torch_tpu.mode(mode):
            got = torch.nextafter(x.to(DEV), y.to(DEV)).cpu()
        want = torch.nextafter(x, y)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        real = ~want.isnan()  # a NaN's sign carries no meaning
        assert torch.equal(torch.signbit(got[real]), torch.signbit(want[real]))
