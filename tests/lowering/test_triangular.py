"""Cholesky factorizations and triangular solves as a PyTorch user meets them (the OpInfo suite
covers the ops themselves): MultivariateNormal, the not-positive-definite error, broadcasting."""

from __future__ import annotations

import pytest
import torch

import torch_tpu


def _spd(*batch: int, n: int = 4) -> torch.Tensor:
    a = torch.randn(*batch, n, n, dtype=torch.float64)
    return a @ a.mT + n * torch.eye(n, dtype=torch.float64)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_multivariate_normal_matches_cpu(mode: str) -> None:
    torch.manual_seed(0)
    cov, mu, x = _spd(n=5).float(), torch.randn(5), torch.randn(7, 5)
    with torch_tpu.mode(mode):
        d = torch.distributions.MultivariateNormal(mu.to("tpu"), covariance_matrix=cov.to("tpu"))
        log_prob, entropy = d.log_prob(x.to("tpu")).cpu(), d.entropy().cpu()
    ref = torch.distributions.MultivariateNormal(mu, covariance_matrix=cov)
    torch.testing.assert_close(log_prob, ref.log_prob(x))
    torch.testing.assert_close(entropy, ref.entropy())


def test_not_positive_definite_raises_like_cpu() -> None:
    a = _spd(3)
    a[1, 2, 2] = -100.0
    _, info = torch.linalg.cholesky_ex(a.to("tpu"))
    assert info.cpu().tolist() == torch.linalg.cholesky_ex(a).info.tolist() == [0, 3, 0]
    for factorize in (torch.linalg.cholesky, torch.cholesky):  # torch.cholesky: deprecated, still used
        with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 3 is not positive-definite"):
            factorize(a.to("tpu"))
    good = a[0]
    torch.testing.assert_close(torch.cholesky(good.to("tpu"), upper=True).cpu(), torch.cholesky(good, upper=True))


def test_solve_triangular_broadcasts_batch_dims() -> None:
    torch.manual_seed(1)
    a, b = torch.linalg.cholesky(_spd(2, 1)), torch.randn(3, 4, 2, dtype=torch.float64)
    got = torch.linalg.solve_triangular(a.to("tpu"), b.to("tpu"), upper=False)
    torch.testing.assert_close(got.cpu(), torch.linalg.solve_triangular(a, b, upper=False))
    assert got.shape == (2, 3, 4, 2)


def test_half_precision_is_refused_with_a_clear_error() -> None:
    with pytest.raises(TypeError, match="float32 or float64"):
        torch.linalg.cholesky(_spd().to(torch.bfloat16).to("tpu"))
