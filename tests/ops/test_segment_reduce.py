"""torch.segment_reduce and its backward on "tpu" (torch_tpu/lowering/segment_reduce.py) against
CPU, beyond OpInfo's first samples: every reduction with and without `initial`, lengths and
offsets (int64 and int32, offsets not starting at 0), empty segments, NaN, zeros and ties in the
data (CPU's gradient conventions for max/min ties and for products with zeros), batched segments
along a later axis with trailing dims, unsafe lengths that leave data out, half types (CPU rounds
its running value after every element: compared bit for bit), and the errors CPU raises for
arguments a program can check.
"""

from __future__ import annotations

import pytest
import torch

import torch_tpu

DEV = "tpu"
NAN = float("nan")
REDUCTIONS = ["sum", "mean", "max", "min", "prod"]


def _compare(data: torch.Tensor, reduce: str, *, mode: str = "strict", exact: bool = False, seed: int = 0,
             **kwargs) -> None:
    """segment_reduce(data, reduce, **kwargs) and its gradient for data, on tpu vs CPU."""
    tol = {"rtol": 0, "atol": 0} if exact else {}
    dc = data.clone().requires_grad_()
    dt = data.to(DEV).requires_grad_()
    with torch_tpu.mode(mode):
        out = torch.segment_reduce(dt, reduce, **{k: v.to(DEV) if isinstance(v, torch.Tensor) else v
                                                  for k, v in kwargs.items()})
        expected = torch.segment_reduce(dc, reduce, **kwargs)
        assert out.shape == expected.shape and out.dtype == expected.dtype
        torch.testing.assert_close(out.cpu(), expected, equal_nan=True, **tol)
        go = torch.randn(expected.shape, generator=torch.Generator().manual_seed(seed)).to(data.dtype)
        (grad,) = torch.autograd.grad(out, dt, go.to(DEV))
        (grad_expected,) = torch.autograd.grad(expected, dc, go)
        torch.testing.assert_close(grad.cpu(), grad_expected, equal_nan=True, **tol)


# Segments: [1, 3] | empty | [-2, 0, 5] | [nan, 4] | [0, 0, 2] | [3, 3, 1, 3] (a zero, NaN,
# two zeros, a tie of three).
_DATA = torch.tensor([1.0, 3.0, -2.0, 0.0, 5.0, NAN, 4.0, 0.0, 0.0, 2.0, 3.0, 3.0, 1.0, 3.0])
_LENGTHS = torch.tensor([2, 0, 3, 2, 3, 4])


def _offsets(lengths: torch.Tensor, start: int = 0) -> torch.Tensor:
    return torch.cat([torch.full(lengths.shape[:-1] + (1,), start), start + lengths.cumsum(-1)], -1)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("initial", [None, 2.0, -1.5])
def test_one_dimensional_segments(mode: str, reduce: str, initial: float | None) -> None:
    for dtype in (torch.float32, torch.float64):
        data = _DATA.to(dtype)
        _compare(data, reduce, mode=mode, lengths=_LENGTHS, initial=initial)
        _compare(data, reduce, mode=mode, offsets=_offsets(_LENGTHS).int(), initial=initial)
        _compare(data, reduce, mode=mode, lengths=_LENGTHS.int(), initial=initial, unsafe=True)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_gradient_signs_through_ties_and_zeros(reduce: str) -> None:
    """CPU divides a max/min gradient among tied elements only where it is positive, and gives a
    product's zero elements the product of the others: both signs of the incoming gradient."""
    for seed in range(4):
        _compare(_DATA.double(), reduce, lengths=_LENGTHS, seed=seed)


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("initial", [None, 0.5])
def test_batched_segments_along_a_later_axis(reduce: str, initial: float | None) -> None:
    """data [3, 7, 2] reduced along axis 1, with one row of lengths (and of offsets) per batch
    position; offsets need not start at 0."""
    data = torch.randn(3, 7, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    data[0, 1, 0] = 0.0
    data[1, 3] = data[1, 4]  # a tie
    lengths = torch.tensor([[2, 0, 5], [3, 3, 1], [0, 0, 7]])
    _compare(data, reduce, lengths=lengths, axis=1, initial=initial)
    _compare(data, reduce, offsets=torch.tensor([[0, 2, 2, 7], [1, 3, 5, 6], [0, 0, 0, 0]]), axis=1,
             initial=initial)
    _compare(data, reduce, lengths=lengths, axis=-2, initial=initial)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_trailing_dims_and_unsafe_lengths_that_leave_data_out(reduce: str) -> None:
    data = torch.randn(9, 3, 2, generator=torch.Generator().manual_seed(2))
    _compare(data, reduce, lengths=torch.tensor([1, 0, 2, 3]), unsafe=True, initial=1.0)  # 6 of 9 rows
    _compare(data, reduce, offsets=torch.tensor([2, 4, 4, 8]), unsafe=True)  # rows 2..7


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_half_types_round_like_cpu(dtype: torch.dtype, reduce: str) -> None:
    """Long segments make CPU's per-element rounding visible: the results must still be CPU's
    bit for bit, gradients included."""
    data = (torch.rand(40, 3, generator=torch.Generator().manual_seed(3)) + 0.5).to(dtype)
    data[7, 1] = 0.0
    for initial in (None, 1.5):
        _compare(data, reduce, lengths=torch.tensor([5, 0, 20, 15]), initial=initial, exact=True)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_empty_segments_and_empty_data(reduce: str) -> None:
    """Empty segments take `initial` or CPU's defaults (sum 0, prod 1, max -inf, min inf, mean NaN),
    also when there is no data at all."""
    for initial in (None, 3.0):
        for dtype in (torch.float32, torch.bfloat16):
            got = torch.segment_reduce(torch.zeros(0, dtype=dtype).to(DEV), reduce,
                                       lengths=torch.tensor([0, 0]).to(DEV), initial=initial).cpu()
            expected = torch.segment_reduce(torch.zeros(0, dtype=dtype), reduce, lengths=torch.tensor([0, 0]),
                                            initial=initial)
            torch.testing.assert_close(got, expected, equal_nan=True)
    _compare(torch.randn(4, 2), reduce, lengths=torch.tensor([0, 4, 0]))


def test_backward_op_directly_with_offsets_and_initial() -> None:
    data = _DATA.double()
    offsets = _offsets(_LENGTHS, 0)
    for reduce in REDUCTIONS:
        out = torch.segment_reduce(data, reduce, offsets=offsets, initial=2.0)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=data.dtype)
        got = torch.ops.aten._segment_reduce_backward(grad.to(DEV), out.to(DEV), data.to(DEV), reduce,
                                                      offsets=offsets.to(DEV), initial=2.0).cpu()
        expected = torch.ops.aten._segment_reduce_backward(grad, out, data, reduce, offsets=offsets, initial=2.0)
        torch.testing.assert_close(got, expected, equal_nan=True)


def test_errors_for_arguments_a_program_can_check() -> None:
    data = torch.randn(10).to(DEV)
    lengths = torch.tensor([10]).to(DEV)
    with pytest.raises(RuntimeError, match="reduce argument must be"):
        torch.segment_reduce(data, "median", lengths=lengths)
    with pytest.raises(RuntimeError, match="Either lengths or offsets must be defined"):
        torch.segment_reduce(data, "sum")
    with pytest.raises(RuntimeError, match="indices based reduction is not supported"):
        torch.segment_reduce(data, "sum", lengths=lengths, indices=torch.tensor([0]).to(DEV))
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        torch.segment_reduce(data, "sum", lengths=torch.tensor([10.0]).to(DEV))
    with pytest.raises(NotImplementedError, match="not implemented for 'Int'"):
        torch.segment_reduce(data.int(), "sum", lengths=lengths)
    with pytest.raises(RuntimeError, match="Expected axis to be the last dimension of lengths"):
        torch.segment_reduce(torch.ones(4, 3).to(DEV), "sum", lengths=torch.tensor([1, 3]).to(DEV), axis=1)
    with pytest.raises(RuntimeError, match="Expected lengths of shape"):
        torch.segment_reduce(torch.ones(4, 3).to(DEV), "sum", lengths=torch.tensor([[1, 2]] * 3).to(DEV), axis=1)
