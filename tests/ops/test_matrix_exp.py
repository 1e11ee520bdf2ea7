"""linalg.matrix_exp on "tpu" (torch_tpu/lowering/matrix_exp.py: scaling and squaring with the
exponent computed per matrix as a tensor, a fixed degree-18 Taylor polynomial and a static number
of squarings, each kept only where still needed), beyond OpInfo's two random samples.

Results are compared with CPU relative to each matrix's largest entry: exp(A) of a matrix with a
large norm has entries of very different sizes, and a small entry's error is set by the largest
ones (CPU's own exp(A^T)^T differs from its exp(A) by more than assert_close's elementwise float32
tolerance), so an elementwise rtol would test rounding order, not correctness. Where CPU is wrong
(float16/bfloat16, which its kernel returns as NaN) the reference is float64.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from torch_tpu.lowering import matrix_exp as M

DEV = "tpu"
MODES = ["strict", "fused"]


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _on_tpu(a: torch.Tensor, mode: str = "strict") -> torch.Tensor:
    with torch_tpu.mode(mode):
        return torch.linalg.matrix_exp(a.to(DEV)).cpu()


def _close_per_matrix(got: torch.Tensor, want: torch.Tensor, rel: float) -> None:
    """|got - want| <= rel * max|want| within each matrix."""
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = want.abs().amax((-2, -1), keepdim=True).clamp_min(1.0).expand_as(want)
    err = (got.double() - want.double()).abs() / scale.double()
    assert err.max().item() <= rel, f"largest error relative to the matrix: {err.max().item():.3g} > {rel:.3g}"


_REL = {torch.float32: 2e-5, torch.float64: 1e-12}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (3, 4, 4), (2, 3, 6, 6), (16, 16)])
def test_matches_cpu(mode: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    a = _randn(*shape, dtype=dtype) * 2
    _close_per_matrix(_on_tpu(a, mode), torch.linalg.matrix_exp(a), _REL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_each_matrix_of_a_batch_gets_its_own_scaling(dtype: torch.dtype) -> None:
    # norms from 1e-3 (no squaring) to ~1e3 (about 10 squarings) in one batch; the squarings
    # must apply per matrix, so every matrix matches the one computed alone
    scales = torch.tensor([1e-3, 0.5, 3.0, 40.0, 600.0], dtype=dtype).view(-1, 1, 1)
    a = _randn(5, 4, 4, dtype=dtype) * scales / 4
    a[3:] = a[3:] - a[3:].mT  # skew-symmetric: exp is orthogonal, so finite for any norm
    got = _on_tpu(a)
    _close_per_matrix(got, torch.linalg.matrix_exp(a), 2e-4 if dtype == torch.float32 else 1e-10)
    for i in range(5):
        _close_per_matrix(got[i], _on_tpu(a[i]), 2e-4 if dtype == torch.float32 else 1e-10)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm", [1e2, 1e4, 1e6])
def test_large_norm_rotations_need_many_squarings(mode: str, norm: float) -> None:
    # exp of a skew-symmetric matrix is orthogonal; a 1-norm of 1e6 needs ~20 squarings
    s = _randn(2, 6, 6, dtype=torch.float64)
    s = (s - s.mT) * (norm / torch.linalg.matrix_norm(s - s.mT, 1).max())
    got = _on_tpu(s, mode)
    eye = torch.eye(6, dtype=torch.float64).expand(2, 6, 6)
    # the squarings amplify the approximant's rounding by 2^s, as on CPU
    tol = 1e-14 * norm
    torch.testing.assert_close(got @ got.mT, eye, rtol=0, atol=tol)
    _close_per_matrix(got, torch.linalg.matrix_exp(s), tol)


def test_exact_cases() -> None:
    # nilpotent with huge entries: exp = I + N exactly; diagonal: exp of each entry (e^-1e6 = 0)
    n = torch.tensor([[0.0, 1e12], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(_on_tpu(n), torch.tensor([[1.0, 1e12], [0.0, 1.0]], dtype=torch.float64))
    v = torch.tensor([-1e6, -30.0, 0.0, 2.0, 50.0], dtype=torch.float64)
    # the norm 1e6 takes ~20 squarings, each doubling the relative error of the diagonal's terms
    torch.testing.assert_close(_on_tpu(torch.diag(v)), torch.diag(v.exp()), rtol=1e-9, atol=0)
    z = torch.zeros(3, 4, 4)
    torch.testing.assert_close(_on_tpu(z), torch.eye(4).expand(3, 4, 4))


def test_overflow_and_non_finite_inputs_match_cpu() -> None:
    # exp(1e3) overflows in float32 on both; inf and NaN entries give NaN matrices on both
    a = torch.tensor([[[1e3, 0.0], [0.0, 1.0]], [[float("inf"), 0.0], [0.0, 1.0]],
                      [[float("nan"), 0.0], [0.0, 1.0]], [[0.5, 0.2], [0.1, 0.3]]])
    torch.testing.assert_close(_on_tpu(a), torch.linalg.matrix_exp(a), equal_nan=True)


def test_norms_beyond_the_static_squarings_give_nan() -> None:
    theta = M.THETA[torch.float64]
    inside = torch.diag(torch.tensor([-theta * 2.0 ** (M.MAX_SQUARINGS - 1), 0.0], dtype=torch.float64))
    outside = torch.diag(torch.tensor([-theta * 2.0 ** (M.MAX_SQUARINGS + 1), 0.0], dtype=torch.float64))
    got = _on_tpu(torch.stack([inside, outside]))
    torch.testing.assert_close(got[0], torch.diag(torch.tensor([0.0, 1.0], dtype=torch.float64)))
    assert got[1].isnan().all()  # documented: the program cannot scale that far


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_are_computed_in_float32(dtype: torch.dtype) -> None:
    # CPU's half kernel returns NaN for these (it evaluates its polynomial in half); the reference
    # is float64 of the same (rounded) input
    a = (_randn(3, 5, 5) * 3).to(dtype)
    got = _on_tpu(a)
    assert got.dtype == dtype
    want = torch.linalg.matrix_exp(a.double()).to(dtype)
    _close_per_matrix(got, want, 1e-2 if dtype == torch.bfloat16 else 2e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3)])
def test_gradients_match_cpu(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    # ATen's backward is exp of the 2n x 2n block matrix [[A^T, G], [0, A^T]]: a second
    # matrix_exp on tpu, with a larger norm than A's
    a = _randn(*shape, dtype=dtype) * 2
    g = _randn(*shape, seed=1, dtype=dtype)
    x = a.clone().requires_grad_()
    y = a.to(DEV).requires_grad_()
    torch.autograd.backward(torch.linalg.matrix_exp(x), g)
    torch.autograd.backward(torch.linalg.matrix_exp(y), g.to(DEV))
    _close_per_matrix(y.grad.cpu(), x.grad, _REL[dtype] * 10)


def test_gradcheck() -> None:
    a = (_randn(2, 3, 3, dtype=torch.float64) * 2).to(DEV).requires_grad_()
    assert torch.autograd.gradcheck(torch.linalg.matrix_exp, (a,))


def test_empty_shapes() -> None:
    for shape in [(0, 3, 3), (2, 0, 0), (0, 0)]:
        a = torch.zeros(shape)
        assert _on_tpu(a).shape == torch.linalg.matrix_exp(a).shape


def test_unsupported_inputs_raise_clearly() -> None:
    with pytest.raises(NotImplementedError, match="linalg_matrix_exp"):
        _on_tpu(_randn(3, 3).to(torch.complex64))
    with pytest.raises(RuntimeError, match="square matrices"):
        _on_tpu(_randn(3, 4))
    with pytest.raises(RuntimeError, match="floating point or complex"):
        _on_tpu(torch.ones(3, 3, dtype=torch.int64))


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="the StableHLO runtime needs jax")
def test_stablehlo_runtime_matches_cpu() -> None:
    code = """
import torch, torch_tpu
torch_tpu.set_fallback(None)
g = torch.Generator().manual_seed(0)
for dtype in (torch.float32, torch.float64):
    a = torch.randn(3, 5, 5, generator=g, dtype=dtype) * torch.tensor([0.1, 3.0, 50.0], dtype=dtype).view(3, 1, 1)
    got, want = torch.linalg.matrix_exp(a.to("tpu")).cpu(), torch.linalg.matrix_exp(a)
    err = ((got - want).abs().amax((-2, -1)) / want.abs().amax((-2, -1))).max().item()
    assert err < (1e-4 if dtype == torch.float32 else 1e-11), err
print("ok")
"""
    env = dict(os.environ, TORCH_TPU_RUNTIME="jax")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
