"""SVD and the symmetric eigendecomposition on "tpu" (torch_tpu/lowering/svd.py: one-sided
Jacobi written in IR ops), beyond OpInfo's 3x5 samples: the largest order the program unrolls,
rank-deficient and repeated spectra, batches, empty shapes, what builds on them (pinv, lstsq,
matrix_rank, spectral norms) and what raises.

Singular vectors and eigenvectors are unique only up to sign (CUDA's differ from CPU's too), so
they are checked through sign-free quantities: reconstructions, orthonormality, |v|.
"""

from __future__ import annotations

import pytest
import torch

import torch_tpu

DEV = "tpu"


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _orthonormal_columns(q: torch.Tensor, atol: float) -> None:
    eye = torch.eye(q.shape[-1], dtype=q.dtype).expand(*q.shape[:-2], q.shape[-1], q.shape[-1])
    torch.testing.assert_close(q.mT @ q, eye, rtol=0, atol=atol)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5), (64, 64), (96, 64)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_matches_cpu_up_to_signs(mode: str, shape: tuple[int, ...], full_matrices: bool) -> None:
    a = _randn(*shape)
    with torch_tpu.mode(mode):
        u, s, vh = (t.cpu() for t in torch.linalg.svd(a.to(DEV), full_matrices=full_matrices))
    u_ref, s_ref, vh_ref = torch.linalg.svd(a, full_matrices=full_matrices)
    assert u.shape == u_ref.shape and s.shape == s_ref.shape and vh.shape == vh_ref.shape
    # Jacobi's error is O(eps * |A|) per value, with ~n sweeps of rounding in float32
    torch.testing.assert_close(s, s_ref, rtol=0, atol=3e-6 * s_ref.max().item() * shape[-1])
    k = min(shape[-2:])
    torch.testing.assert_close(u[..., :k] * s.unsqueeze(-2) @ vh[..., :k, :], a, rtol=0, atol=2e-5 * shape[-1])
    _orthonormal_columns(u, 1e-5 * shape[-1])
    _orthonormal_columns(vh.mT, 1e-5 * shape[-1])
    # distinct singular values: each singular vector is CPU's up to its sign. A vector's error is
    # ~eps/gap (its singular value's distance to the next); random 64-96 wide matrices have gaps
    # near 1e-2 of the largest value, so 2e-3 bounds float32 vectors, not the values above.
    torch.testing.assert_close(u[..., :k].abs(), u_ref[..., :k].abs(), rtol=0, atol=2e-3)
    torch.testing.assert_close(vh[..., :k, :].abs(), vh_ref[..., :k, :].abs(), rtol=0, atol=2e-3)


def test_rank_deficient_matrices_give_orthonormal_factors_and_their_pinv() -> None:
    a = _randn(7, 3) @ _randn(3, 5, seed=1)  # rank 3 of 5
    u, s, vh = (t.cpu() for t in torch.linalg.svd(a.to(DEV), full_matrices=True))
    torch.testing.assert_close(s, torch.linalg.svdvals(a), rtol=0, atol=1e-5)
    assert (s[3:] < 1e-5).all()
    _orthonormal_columns(u, 1e-5)  # columns of zero singular values are completed, not 0/0
    _orthonormal_columns(vh.mT, 1e-5)
    torch.testing.assert_close(torch.linalg.pinv(a.to(DEV)).cpu(), torch.linalg.pinv(a), rtol=1e-4, atol=1e-4)
    assert torch.linalg.matrix_rank(a.to(DEV)).item() == 3


def test_spectral_norms_and_condition_numbers_follow_the_singular_values() -> None:
    a = _randn(4, 8, 8)
    t = a.to(DEV)
    for got, want in [(torch.linalg.matrix_norm(t, ord=2), torch.linalg.matrix_norm(a, ord=2)),
                      (torch.linalg.matrix_norm(t, ord="nuc"), torch.linalg.matrix_norm(a, ord="nuc")),
                      (torch.linalg.cond(t), torch.linalg.cond(a)),
                      (torch.linalg.svdvals(t), torch.linalg.svdvals(a))]:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


def test_svd_gradients_match_cpu() -> None:
    a = _randn(6, 4)
    x = a.clone().requires_grad_()
    y = a.to(DEV).requires_grad_()
    for t in (x, y):
        u, s, vh = torch.linalg.svd(t, full_matrices=False)
        # sign-free loss: the reconstruction and the spectrum
        ((u * s.unsqueeze(-2)) @ vh).pow(2).sum().add(s.pow(3).sum()).backward()
    torch.testing.assert_close(y.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_matches_cpu(mode: str, uplo: str) -> None:
    a = _randn(3, 16, 16)
    a = a + a.mT  # indefinite: negative eigenvalues too
    noisy = a + torch.triu(_randn(3, 16, 16, seed=2), 1) if uplo == "L" else a + torch.tril(_randn(3, 16, 16, seed=2), -1)
    with torch_tpu.mode(mode):
        w, v = (t.cpu() for t in torch.linalg.eigh(noisy.to(DEV), UPLO=uplo))  # reads only the UPLO triangle
    w_ref, v_ref = torch.linalg.eigh(noisy, UPLO=uplo)
    torch.testing.assert_close(w, w_ref, rtol=0, atol=2e-5 * w_ref.abs().max().item())
    torch.testing.assert_close(v @ torch.diag_embed(w) @ v.mT, a, rtol=0, atol=1e-4)
    _orthonormal_columns(v, 1e-5)
    torch.testing.assert_close(v.abs(), v_ref.abs(), rtol=0, atol=2e-3)  # ~eps/gap, as for SVD above


def test_eigh_with_repeated_eigenvalues_and_hermitian_helpers() -> None:
    q, _ = torch.linalg.qr(_randn(6, 6))
    a = q @ torch.diag(torch.tensor([-2.0, 1.0, 1.0, 1.0, 3.0, 3.0])) @ q.T
    w, v = (t.cpu() for t in torch.linalg.eigh(a.to(DEV)))
    torch.testing.assert_close(w, torch.tensor([-2.0, 1.0, 1.0, 1.0, 3.0, 3.0]), rtol=0, atol=1e-5)
    torch.testing.assert_close(v @ torch.diag(w) @ v.T, a, rtol=0, atol=1e-5)  # any basis of each eigenspace
    _orthonormal_columns(v, 1e-5)
    torch.testing.assert_close(torch.linalg.eigvalsh(a.to(DEV)).cpu(), w, rtol=0, atol=0)
    torch.testing.assert_close(torch.linalg.pinv(a.to(DEV), hermitian=True).cpu(), torch.linalg.pinv(a),
                               rtol=1e-4, atol=1e-5)
    assert torch.linalg.matrix_rank(a.to(DEV), hermitian=True).item() == 6


def test_empty_shapes_and_float64() -> None:
    for shape in [(0, 3), (3, 0), (0, 4, 4)]:
        a = torch.zeros(shape)
        got = torch.linalg.svd(a.to(DEV))
        for g, w in zip(got, torch.linalg.svd(a)):
            assert g.shape == w.shape
    a = _randn(5, 5, dtype=torch.float64)
    torch.testing.assert_close(torch.linalg.svdvals(a.to(DEV)).cpu(), torch.linalg.svdvals(a), rtol=0, atol=1e-12)


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("shape", [(6, 3), (3, 6), (4, 4)])
def test_lstsq_outputs_follow_each_cpu_driver(driver: str, shape: tuple[int, int]) -> None:
    a, rhs = _randn(2, *shape), _randn(1, shape[0], 2, seed=1)  # rhs's batch broadcasts
    got = torch.linalg.lstsq(a.to(DEV), rhs.to(DEV), driver=driver)
    want = torch.linalg.lstsq(a, rhs, driver=driver)
    for name, g, w in zip(("solution", "residuals", "rank", "singular_values"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5, msg=name)


def test_lstsq_of_a_rank_deficient_system_is_the_minimum_norm_solution() -> None:
    a = _randn(8, 2) @ _randn(2, 4, seed=1)  # rank 2 of 4
    rhs = _randn(8, seed=2)  # a vector right-hand side
    got = torch.linalg.lstsq(a.to(DEV), rhs.to(DEV), driver="gelsd")
    want = torch.linalg.lstsq(a, rhs, driver="gelsd")
    for name, g, w in zip(("solution", "rank", "singular_values"), got[::2] + got[3:], want[::2] + want[3:]):
        assert g.shape == w.shape, name
    torch.testing.assert_close(got.solution.cpu(), want.solution, rtol=1e-4, atol=1e-4)
    # CPU leaves the residuals empty for a rank-deficient A (a shape picked from the data); a
    # program's shapes are fixed, so they are computed: |A x - b|^2
    residual = (a @ want.solution - rhs).pow(2).sum().reshape(1)
    torch.testing.assert_close(got.residuals.cpu(), residual, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(got.singular_values.cpu(), want.singular_values, rtol=0, atol=1e-4)
    assert got.rank.item() == want.rank.item() == 2


def test_unsupported_inputs_raise_clear_errors() -> None:
    with pytest.raises(NotImplementedError, match="min\\(m, n\\) = 64"):
        torch.linalg.svdvals(torch.zeros(65, 65, device=DEV))
    with pytest.raises(NotImplementedError, match="_linalg_svd"):
        torch.linalg.svd(torch.zeros(3, 3, dtype=torch.complex64, device=DEV))
    with pytest.raises(NotImplementedError, match="_linalg_eigh"):
        torch.linalg.eigh(torch.zeros(3, 3, dtype=torch.complex64, device=DEV))
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.eigh(torch.zeros(3, 4, device=DEV))
    x = torch.ones(2, 2, device=DEV)
    assert x.sum().item() == 4.0  # the device stays usable
