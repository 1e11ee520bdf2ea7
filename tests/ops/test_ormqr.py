"""torch.ormqr on "tpu" (torch_tpu/lowering/qr.py): Q from geqrf's compact form applied without
forming it, on each side, transposed or not, against CPU; and the least-squares solve that uses it
(R x = Q^T b)."""

from __future__ import annotations

import pytest
import torch

import torch_tpu

DEV = "tpu"


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr_matches_cpu(mode: str, left: bool, transpose: bool) -> None:
    a = _randn(2, 6, 4)
    packed, tau = torch.geqrf(a)
    other = _randn(2, 6, 3, seed=1) if left else _randn(2, 3, 6, seed=1)
    want = torch.ormqr(packed, tau, other, left=left, transpose=transpose)
    with torch_tpu.mode(mode):
        got = torch.ormqr(packed.to(DEV), tau.to(DEV), other.to(DEV), left=left, transpose=transpose)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_least_squares_through_geqrf_and_ormqr() -> None:
    a, rhs = _randn(8, 3), _randn(8, 2, seed=1)
    packed, tau = torch.geqrf(a.to(DEV))
    qtb = torch.ormqr(packed, tau, rhs.to(DEV), left=True, transpose=True)[:3]
    x = torch.linalg.solve_triangular(packed[:3].triu(), qtb, upper=True)
    torch.testing.assert_close(x.cpu(), torch.linalg.lstsq(a, rhs).solution, rtol=1e-4, atol=1e-5)


def test_ormqr_rejects_mismatched_shapes() -> None:
    packed, tau = torch.geqrf(_randn(6, 4).to(DEV))
    with pytest.raises(RuntimeError, match="ormqr"):
        torch.ormqr(packed, tau, _randn(5, 2).to(DEV))
