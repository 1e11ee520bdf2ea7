"""torch.nn.functional.pdist (torch_tpu/lowering/pdist.py) and the multi-class margin losses'
backwards (torch_tpu/lowering/nn_loss.py) on "tpu" against CPU, beyond OpInfo's first samples:
every p pdist's kernel distinguishes (0, < 1, 1, < 2, 2, general, inf) with zero distances,
equal coordinates and tied maxima, where CPU defines the gradient by convention; margin losses
with weights, p = 1 and 2, negative margins, every reduction, one-sample inputs, and
multilabel targets that end early (-1) or repeat a class.
"""

from __future__ import annotations

import math

import pytest
import torch

import torch_tpu

DEV = "tpu"
F = torch.nn.functional
MODES = ["strict", "fused"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _forward_backward(fn, x: torch.Tensor, *args, mode: str, seed: int = 0, **kwargs) -> None:
    """fn(x, *args, **kwargs) and its gradient for x on tpu (in mode) and on CPU, compared."""
    xc = x.clone().requires_grad_()
    xt = x.to(DEV).requires_grad_()
    to_dev = lambda v: v.to(DEV) if isinstance(v, torch.Tensor) else v  # noqa: E731
    with torch_tpu.mode(mode):
        out = fn(xt, *map(to_dev, args), **{k: to_dev(v) for k, v in kwargs.items()})
        expected = fn(xc, *args, **kwargs)
        assert out.shape == expected.shape
        torch.testing.assert_close(out.cpu(), expected, equal_nan=True)
        go = torch.randn(expected.shape, generator=_gen(seed + 1), dtype=expected.dtype)
        (grad,) = torch.autograd.grad(out, xt, go.to(DEV))
        (grad_expected,) = torch.autograd.grad(expected, xc, go)
        torch.testing.assert_close(grad.cpu(), grad_expected, equal_nan=True)


# -- pdist ---------------------------------------------------------------------------------------

def _rows_with_ties(n: int, m: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random rows, with row 1 a copy of row 0 (a zero distance) and row 2 sharing row 0's first
    coordinate (a zero difference inside a nonzero distance)."""
    x = torch.randn(n, m, generator=_gen(seed), dtype=dtype)
    if n >= 3 and m >= 1:
        x[1] = x[0]
        x[2, 0] = x[0, 0]
    return x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 10.0, math.inf])
def test_pdist_matches_cpu_including_zero_distances(mode: str, dtype: torch.dtype, p: float) -> None:
    _forward_backward(F.pdist, _rows_with_ties(7, 4, dtype), p, mode=mode)


@pytest.mark.parametrize("shape", [(1, 3), (2, 1), (30, 17)])
def test_pdist_single_row_column_and_larger_shapes(shape: tuple[int, int]) -> None:
    for p in (0.0, 1.0, 2.0, 2.5, math.inf):
        _forward_backward(F.pdist, _rows_with_ties(*shape, torch.float32), p, mode="strict")


@pytest.mark.parametrize("shape", [(4, 0), (0, 3)])
def test_pdist_empty_inputs(shape: tuple[int, int]) -> None:
    """No rows: no distances; empty rows: every distance 0 (CPU fills 0); the gradient is 0. The
    backward is called directly and checked against zeros (CPU's own _pdist_backward crashes on a
    0-row input)."""
    x = torch.randn(*shape)
    for p in (0.0, 1.0, 2.0, 2.5, math.inf):
        dist = torch.ops.aten._pdist_forward(x, p)
        torch.testing.assert_close(torch.ops.aten._pdist_forward(x.to(DEV), p).cpu(), dist)
        grad = torch.ones_like(dist)
        got = torch.ops.aten._pdist_backward(grad.to(DEV), x.to(DEV), p, dist.to(DEV)).cpu()
        torch.testing.assert_close(got, torch.zeros(shape))


def test_pdist_inf_norm_sends_the_gradient_to_every_tied_coordinate() -> None:
    x = torch.tensor([[0.0, 0.0, 0.0], [2.0, -2.0, 1.0], [1.0, 5.0, -5.0]], dtype=torch.float64)
    _forward_backward(F.pdist, x, math.inf, mode="strict")


def test_pdist_backward_op_directly() -> None:
    x = _rows_with_ties(5, 3, torch.float64)
    for p in (0.5, 2.0, 3.0):
        dist = torch.ops.aten._pdist_forward(x, p)
        grad = torch.randn(dist.shape, generator=_gen(3), dtype=x.dtype)
        got = torch.ops.aten._pdist_backward(grad.to(DEV), x.to(DEV), p, dist.to(DEV)).cpu()
        torch.testing.assert_close(got, torch.ops.aten._pdist_backward(grad, x, p, dist))


def test_pdist_gradcheck_on_tpu() -> None:
    x = torch.randn(5, 3, generator=_gen(4), dtype=torch.float64).to(DEV).requires_grad_()
    for p in (1.5, 2.0, 3.0):
        assert torch.autograd.gradcheck(lambda t: F.pdist(t, p), (x,))


def test_pdist_rejects_what_cpu_rejects() -> None:
    with pytest.raises(NotImplementedError, match="not implemented for 'Half'"):
        F.pdist(torch.randn(3, 4).half().to(DEV))
    with pytest.raises(RuntimeError, match="2D"):
        torch.ops.aten._pdist_forward(torch.randn(3, 4, 2).to(DEV), 2.0)


# -- multi_margin_loss ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss_gradient_matches_cpu(mode: str, reduction: str, p: int) -> None:
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(9, 5, generator=_gen(0), dtype=dtype)
        target = torch.randint(0, 5, (9,), generator=_gen(1))
        weight = torch.randn(5, generator=_gen(2), dtype=dtype)
        for margin in (1.0, 0.25, -3.14):
            for w in (None, weight):
                _forward_backward(F.multi_margin_loss, x, target, p=p, margin=margin, weight=w, reduction=reduction,
                                  mode=mode)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multi_margin_loss_single_samples(reduction: str) -> None:
    """A [C] input with a 0-d or [1] target, and a 0-d input: CPU's output shapes and gradients."""
    x = torch.randn(6, generator=_gen(5))
    for target in (torch.tensor(2), torch.tensor([4])):
        for p in (1, 2):
            _forward_backward(F.multi_margin_loss, x, target, p=p, reduction=reduction, mode="strict",
                              weight=torch.rand(6, generator=_gen(6)))
    _forward_backward(F.multi_margin_loss, torch.randn(()), torch.tensor(0), reduction=reduction, mode="strict")


def test_multi_margin_loss_backward_rejects_other_p() -> None:
    x = torch.randn(3, 4).to(DEV)
    with pytest.raises(RuntimeError, match="only p == 1 and p == 2 supported"):
        torch.ops.aten.multi_margin_loss_backward(torch.tensor(1.0).to(DEV), x, torch.tensor([0, 1, 2]).to(DEV), 3,
                                                  1.0, None, 1)


# -- multilabel_margin_loss ---------------------------------------------------------------------

# Row by row: -1 in the middle (later slots ignored), -1 first (no target), a repeated class, no
# -1 at all, and a repeated class before a -1.
_TARGETS = torch.tensor([[2, 0, -1, 4, 3], [-1, 3, 2, 2, 3], [1, 1, 2, -1, 2], [4, 0, 2, 3, 1], [3, 3, -1, -1, 0]])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_ignores_targets_after_the_first_minus_one(mode: str, reduction: str) -> None:
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(5, 5, generator=_gen(7), dtype=dtype)
        _forward_backward(F.multilabel_margin_loss, x, _TARGETS, reduction=reduction, mode=mode)
        _forward_backward(F.multilabel_margin_loss, x * 0.1, _TARGETS, reduction=reduction, mode=mode)


def test_multilabel_margin_loss_forward_returns_cpus_is_target() -> None:
    x = torch.randn(5, 5, generator=_gen(8))
    loss, is_target = torch.ops.aten.multilabel_margin_loss_forward(x.to(DEV), _TARGETS.to(DEV), 0)
    loss_ref, is_target_ref = torch.ops.aten.multilabel_margin_loss_forward(x, _TARGETS, 0)
    torch.testing.assert_close(loss.cpu(), loss_ref)
    torch.testing.assert_close(is_target.cpu(), is_target_ref)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_single_samples(reduction: str) -> None:
    x = torch.randn(5, generator=_gen(9))
    for target in (torch.tensor([1, 1, 0, -1, 4]), torch.tensor([3, 0, 1, 2, 4]), torch.tensor([-1, 0, 0, 0, 0])):
        _forward_backward(F.multilabel_margin_loss, x, target, reduction=reduction, mode="strict")
    for target in (torch.tensor(0), torch.tensor(-1)):
        _forward_backward(F.multilabel_margin_loss, torch.randn(()), target, reduction=reduction, mode="strict")


def test_margin_loss_backwards_reject_half_like_cpu() -> None:
    x = torch.randn(3, 4).half().to(DEV)
    with pytest.raises(NotImplementedError, match="not implemented for 'Half'"):
        torch.ops.aten.multilabel_margin_loss_backward(torch.tensor(1.0).half().to(DEV), x,
                                                       torch.zeros(3, 4, dtype=torch.long).to(DEV), 1,
                                                       torch.zeros(3, 4).half().to(DEV))
    with pytest.raises(NotImplementedError, match="not implemented for 'Half'"):
        torch.ops.aten.multi_margin_loss_backward(torch.tensor(1.0).half().to(DEV), x,
                                                  torch.tensor([0, 1, 2]).to(DEV), 1, 1.0, None, 1)
