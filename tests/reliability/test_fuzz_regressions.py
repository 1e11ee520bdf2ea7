"""Regressions for bugs the differential op fuzzer (tools/fuzz_ops.py) found, each against CPU.

Every case runs on CPU and on tpu (in each eager mode, or under torch.compile) and asserts the
same exception class with CPU's message fragment, or the same values. The fuzz seed that found
each bug is named in the test; `python tools/fuzz_ops.py --repro SEED --mode MODE` reruns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_tpu

MODES = ("strict", "fused", "debug")


def _to(v: Any, dev: str) -> Any:
    return v.to(dev) if isinstance(v, torch.Tensor) else v


def _run(fn: Callable[..., Any], args: tuple[Any, ...], dev: str) -> Any:
    out = fn(*[_to(a, dev) for a in args])
    return out.cpu() if isinstance(out, torch.Tensor) else tuple(o.cpu() for o in out)


def _same(fn: Callable[..., Any], *args: Any, mode: str, msg: str | None = None) -> Any:
    """fn on CPU and on tpu in `mode`: the same exception class and message (or `msg`, a fragment
    of both, where the wording differs), or the same values."""
    try:
        expected = _run(fn, args, "cpu")
    except Exception as e:  # noqa: BLE001 - any CPU error is the reference
        with torch_tpu.mode(mode), pytest.raises(type(e)) as got:
            _run(fn, args, "tpu")
        assert (msg or str(e)) in str(e), str(e)
        assert (msg or str(e)) in str(got.value), (str(e), str(got.value))
        return None
    with torch_tpu.mode(mode):
        out = _run(fn, args, "tpu")
    torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)
    return out


# -- 1. index_put with a source of another dtype (seeds 93, 104, 1365, 1536, 1757) ------------

def _put_(x, i, v, acc=False):
    return x.clone().index_put_((i,), v, accumulate=acc)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("acc", [False, True])
def test_index_put_rejects_another_source_dtype(mode: str, acc: bool) -> None:
    x = torch.arange(8.0).reshape(4, 2)
    i = torch.tensor([3, 1])
    _same(_put_, x, i, torch.ones(2, dtype=torch.float64), acc, mode=mode)           # [2] -> [2, 2]
    _same(_put_, x, i, torch.tensor(2.0, dtype=torch.float64), acc, mode=mode)       # a 0-d source too
    _same(_put_, x.to(torch.int64), i, torch.tensor(2.5), acc, mode=mode)
    _same(lambda a, j, v: torch.index_put(a, (j,), v, acc), x.to(torch.bfloat16), i, torch.ones(2), mode=mode)
    # The dtype is checked before the indices (CPU reads them in the kernel): index 7 is out of range.
    _same(_put_, x, torch.tensor([7]), torch.ones(2, dtype=torch.float64), acc, mode=mode)
    # Shape errors come first, as on CPU.
    _same(_put_, x, i, torch.ones(3, dtype=torch.float64), acc, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_setitem_value_dtypes(mode: str) -> None:
    def setitem(x, i, v):
        x = x.clone()
        x[i] = v
        return x

    x = torch.arange(6.0)
    assert _same(setitem, x, torch.tensor([1, 4]), 2.5, mode=mode)[4].item() == 2.5  # a Python number
    _same(setitem, x, torch.tensor([1, 4]), torch.tensor([7.0, 8.0], dtype=torch.float64), mode=mode)
    # One bool mask and a one-element source: CPU's masked_fill path converts the value.
    mask = torch.tensor([True, False, True, False, False, True])
    for acc in (False, True):
        _same(_put_, x, mask, torch.tensor(3.0, dtype=torch.float64), acc, mode=mode)
        _same(_put_, x.to(torch.int32), mask, torch.tensor([4]), acc, mode=mode)
    out = _same(_put_, x, mask, torch.tensor(3.0, dtype=torch.float64), mode=mode)
    assert out.tolist() == [3.0, 1.0, 3.0, 3.0, 4.0, 3.0]
    y = torch.zeros(3, 4)
    _same(setitem, y, (slice(None), torch.tensor([True, False, True, True])),
          torch.tensor([[7.0]], dtype=torch.float64), mode=mode)


# -- 2. a bool mask of the wrong shape (seed 318) ----------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_mask_shape_mismatch_raises(mode: str) -> None:
    x = torch.arange(7)
    _same(lambda a, m: a[m], x, torch.tensor([True]), mode=mode)
    _same(lambda a, m: a[:, m], torch.zeros(3, 4), torch.tensor([True, False]), mode=mode)
    _same(_put_, x, torch.tensor([True]), torch.tensor(5), mode=mode)
    _same(_put_, x, torch.tensor([True, False]), torch.tensor([5, 6]), mode=mode)
    # Matching masks still work.
    m = torch.tensor([True, False, False, True, False, False, True])
    assert _same(lambda a, k: a[k], x, m, mode=mode).tolist() == [0, 3, 6]


# -- 3. out-of-range indices into a tensor with a size-0 dim (seeds 536, 1334, 196, 1243) ------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("acc", [False, True])
def test_index_put_into_empty_dim_checks_indices(mode: str, acc: bool) -> None:
    idx = torch.tensor([0, 2])
    oob = "with size 0"  # CPU names no index, tpu does
    _same(lambda a, i, v: torch.index_put(a, (i,), v, accumulate=acc), torch.zeros(0, 5, 5, dtype=torch.bool),
          idx, torch.tensor([True]), mode=mode, msg=oob)
    _same(lambda a, i, v: torch.index_put(a, (i,), v, accumulate=acc), torch.zeros(0, dtype=torch.int64),
          idx, torch.tensor(3), mode=mode, msg=oob)
    # No element is written when the indexed rows are empty: no check on CPU either.
    out = _same(lambda a, i, v: torch.index_put(a, (i,), v, accumulate=acc), torch.zeros(3, 0), torch.tensor([7]),
                torch.tensor(1.0), mode=mode)
    assert out.shape == (3, 0)


@pytest.mark.parametrize("mode", MODES)
def test_index_add_into_empty_tensor(mode: str) -> None:
    # rank > 1 with no elements: CPU returns before reading the index.
    out = _same(lambda a, i, s: torch.index_add(a, 0, i, s, alpha=2), torch.zeros(0, 2, 5, dtype=torch.bool),
                torch.tensor([3]), torch.ones(1, 2, 5, dtype=torch.bool), mode=mode)
    assert out.shape == (0, 2, 5)
    out = _same(lambda a, i, s: torch.index_add(a, 0, i, s, alpha=2), torch.zeros(0, 5, dtype=torch.int32),
                torch.tensor([1, 4]), torch.ones(2, 5, dtype=torch.int32), mode=mode)
    assert out.shape == (0, 5)
    _same(lambda a, i, s: torch.index_add(a, 1, i, s), torch.zeros(3, 0), torch.tensor([9]), torch.ones(3, 1),
          mode=mode)
    # rank 1: CPU checks every index.
    _same(lambda a, i, s: torch.index_add(a, 0, i, s), torch.zeros(0), torch.tensor([0]), torch.ones(1), mode=mode,
          msg="out of ")


# -- 4. float16 reductions near the float16 range (seed 853) ------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_reductions_accumulate_in_float32(mode: str, dtype: torch.dtype) -> None:
    x = torch.tensor([1e4, 0.0, 0.0, 0.0], dtype=dtype)
    std = _same(torch.std, x, mode=mode)
    # var = 2.5e7 overflows float16; CPU rounds the float32 std once (bfloat16: 4992)
    assert std.item() == (5000.0 if dtype == torch.float16 else 4992.0)
    _same(lambda a: torch.std(a, dim=0, keepdim=True), x.reshape(4, 1), mode=mode)
    _same(lambda a: torch.std_mean(a, correction=0), x, mode=mode)
    _same(torch.var, x, mode=mode)  # 2.5e7: inf in float16 on CPU too, finite in bfloat16
    y = torch.full((16,), 6e3, dtype=dtype)
    assert _same(torch.mean, y, mode=mode).item() == y[0].item()  # the float16 sum (96000) would be inf
    _same(torch.sum, torch.tensor([6e4, 6e4, -6e4], dtype=dtype), mode=mode)


# -- 5. fill values that do not fit an integer tensor (seeds 972, 1146) ------------------------

_BAD_FILLS = [float("nan"), float("inf"), 1e20]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value", _BAD_FILLS)
def test_integer_fill_value_overflow(mode: str, value: float) -> None:
    x = torch.arange(10).reshape(5, 2)
    mask = torch.tensor([True, False])
    _same(lambda a, m: torch.masked_fill(a, m, value), x, mask, mode=mode)
    _same(lambda a, m: a.clone().masked_fill_(m, value), x, mask, mode=mode)
    _same(lambda a: a.clone().fill_(value), x, mode=mode)
    _same(lambda a, i: a.index_fill(0, i, value), x, torch.tensor([1]), mode=mode)
    _same(lambda a: torch.full_like(a, value), x, mode=mode)
    _same(lambda a: torch.full((2,), value, dtype=torch.int64, device=a.device), x, mode=mode)
    _same(lambda a: a.clone().fill_(3e9), x.to(torch.int32), mode=mode)
    _same(lambda a: a.clone().fill_(7e4), torch.zeros(3, dtype=torch.float16), mode=mode)
    # Values that fit still fill (a float truncates towards zero).
    assert _same(lambda a, m: torch.masked_fill(a, m, -2.5), x, mask, mode=mode)[:, 0].tolist() == [-2] * 5


# -- 6. checks torch.compile(backend="tpu") skipped (seeds 254, 649, 1006, 1520, 1682, 1936, 861) --

def _compiled_raises(fn: Callable[..., Any], *args: torch.Tensor) -> None:
    """CPU eager and CPU aot_eager both raise: compiled tpu raises with CPU's message."""
    with pytest.raises(Exception) as cpu:  # noqa: PT011 - the class is compared below
        fn(*args)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=None) as aot:  # noqa: PT011
        torch.compile(fn, backend="aot_eager")(*args)
    assert str(cpu.value) in str(aot.value)
    torch._dynamo.reset()
    with pytest.raises(Exception) as got:  # noqa: PT011
        _run(torch.compile(fn, backend="tpu"), args, "tpu")
    # Dynamo re-wraps errors raised while it traces (TorchRuntimeError), so only the message counts.
    assert str(cpu.value) in str(got.value), str(got.value)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape,dim", [((4, 5), -1), ((0, 3), 1), ((4, 2, 0), -2), ((3,), None)])
def test_compiled_argmax_of_bool_raises(op: str, shape: tuple[int, ...], dim: int | None) -> None:
    fn = getattr(torch, op)
    _compiled_raises(lambda a: fn(a, dim=dim), torch.ones(shape, dtype=torch.bool))
    for mode in ("strict", "fused"):
        _same(lambda a: fn(a, dim=dim), torch.ones(shape, dtype=torch.bool), mode=mode)


@pytest.mark.parametrize("op", [
    lambda a: torch.sort(a, dim=1, descending=True, stable=True),
    lambda a: torch.sort(a, dim=-2),
    lambda a: torch.argsort(a, dim=1),
    lambda a: torch.topk(a, 1, dim=1),
    lambda a: torch.kthvalue(a, 1, dim=1),
    lambda a: torch.mode(a, dim=1),
], ids=["sort", "sort_neg", "argsort", "topk", "kthvalue", "mode"])
def test_compiled_sort_of_0d_checks_dim(op: Callable[..., Any]) -> None:
    x = torch.tensor(1.5)
    _compiled_raises(op, x)
    for mode in ("strict", "fused"):
        _same(op, x, mode=mode)
    assert _same(lambda a: torch.sort(a, dim=-1), x, mode="strict")[0].item() == 1.5


# -- index_select from a size-0 dim (10,000-case run: seeds 2224, 3946, 4012, 7091, 7425) -------

@pytest.mark.parametrize("mode", MODES)
def test_index_select_from_an_empty_dim(mode: str) -> None:
    _same(lambda a, i: torch.index_select(a, 0, i), torch.zeros(0, 3), torch.tensor([0]), mode=mode)
    # A 1-d self: IndexError (seeds 6407, 7649, 9548)
    _same(lambda a, i: torch.index_select(a, 0, i), torch.zeros(0, dtype=torch.int64), torch.tensor([0]), mode=mode)
    _same(lambda a, i: torch.index_select(a, -1, i), torch.zeros(0), torch.tensor([0, 0]), mode=mode)
    _same(lambda a, i: torch.index_select(a, 1, i), torch.zeros(0, 3, 0, dtype=torch.int32),
          torch.tensor([0, 0, 0]), mode=mode)  # self has no elements at all: CPU still refuses
    out = _same(lambda a, i: torch.index_select(a, 0, i), torch.zeros(0, 3), torch.zeros(0, dtype=torch.long),
                mode=mode)
    assert out.shape == (0, 3)
    out = _same(lambda a, i: torch.index_select(a, 0, i), torch.zeros(3, 0), torch.tensor([2, 0]), mode=mode)
    assert out.shape == (2, 0)


# -- error checks CPU makes (10,000-case run: seeds 6391, 2975, 6317, 3565, 2098, 8998) ---------

@pytest.mark.parametrize("mode", MODES)
def test_empty_contraction_with_a_float_beta(mode: str) -> None:
    """Seed 6391: with K == 0 CPU's addmm family multiplies self by beta as a scalar op, whose
    result type must cast to self's; with K > 0 the integer product is computed as usual."""
    i = torch.ones(3, 4, dtype=torch.int32)
    msg = "result type Float can't be cast to the desired output type Int"
    _same(lambda a, m, n: torch.addmm(a, m, n, beta=0.5, alpha=2), i, torch.ones(3, 0, dtype=torch.int32),
          torch.ones(0, 4, dtype=torch.int32), mode=mode, msg=msg)
    _same(lambda a, m, n: torch.baddbmm(a, m, n, beta=-1.0), i[None], torch.ones(1, 3, 0, dtype=torch.int32),
          torch.ones(1, 0, 4, dtype=torch.int32), mode=mode, msg=msg)
    _same(lambda a, m, n: torch.addbmm(a, m, n, beta=1.0), i, torch.ones(1, 3, 0, dtype=torch.int32),
          torch.ones(1, 0, 4, dtype=torch.int32), mode=mode, msg=msg)
    out = _same(lambda a, m, n: torch.addmm(a, m, n, beta=2), i, torch.ones(3, 0, dtype=torch.int32),
                torch.ones(0, 4, dtype=torch.int32), mode=mode)
    assert out.unique().tolist() == [2]
    out = _same(lambda a, m, n: torch.addmm(a, m, n, beta=0.5, alpha=2), i, torch.ones(3, 2, dtype=torch.int32),
                torch.ones(2, 4, dtype=torch.int32), mode=mode)
    assert out.unique().tolist() == [4]


@pytest.mark.parametrize("mode", MODES)
def test_index_put_into_an_empty_indexed_dim_with_no_elements_to_write(mode: str) -> None:
    """Seeds 2975 and 8998: CPU checks an index into a size-0 dim from the shapes, even when the
    other dims leave nothing to write (a movedim'd empty tensor, a slice past the end)."""
    msg = "index is out of bounds for dimension with size 0"
    for acc in (False, True):
        _same(lambda a, i, v: torch.index_put(a, (i,), v, accumulate=acc), torch.zeros(0, 1, 0, dtype=torch.int32),
              torch.tensor([0, 0]), torch.tensor(3, dtype=torch.int32), mode=mode, msg=msg)
    out = _same(lambda a, i, v: torch.index_put(a, (i,), v), torch.zeros(0, 1, 0), torch.zeros(0, dtype=torch.long),
                torch.tensor(1.0), mode=mode)
    assert out.shape == (0, 1, 0)


def test_compiled_index_put_into_an_empty_slice() -> None:
    """Seed 8998 under torch.compile: the put into an empty slice of a clone raises, as on CPU."""
    def fn(x, i, v):
        base = x.clone()
        base[1:].index_put_((i,), v, accumulate=True)
        return base

    _compiled_raises(fn, torch.ones(1, 5, 3), torch.tensor([0, 0]), torch.tensor(2.0))


@pytest.mark.parametrize("mode", MODES)
def test_masked_scatter_with_too_few_source_elements_is_a_runtime_error(mode: str) -> None:
    """Seed 6317: CPU raises RuntimeError; the gather that reads past the source says so too."""
    mask = torch.tensor([[True, False], [True, True]])
    with pytest.raises(RuntimeError, match="Number of elements of source"):
        torch.zeros(2, 2).masked_scatter(mask, torch.ones(1))
    with torch_tpu.mode(mode), pytest.raises(RuntimeError, match="out of bounds"):  # the wording differs
        torch.zeros(2, 2, device="tpu").masked_scatter(mask.to("tpu"), torch.ones(1, device="tpu")).cpu()
    out = _same(lambda x, m, s: x.masked_scatter(m, s), torch.zeros(2, 2), mask, torch.arange(1.0, 4.0), mode=mode)
    assert out.tolist() == [[1.0, 0.0], [2.0, 3.0]]


@pytest.mark.parametrize("mode", MODES)
def test_roll_of_an_empty_tensor(mode: str) -> None:
    """Seed 3565: CPU returns an empty tensor before checking dims (shifts and dims must still align)."""
    x = torch.zeros(5, 0, 5, dtype=torch.bool)
    assert _same(lambda a: a.roll(-1, 3), x, mode=mode).shape == (5, 0, 5)
    assert _same(lambda a: a.roll((1, 2), (0, 9)), x, mode=mode).shape == (5, 0, 5)
    _same(lambda a: a.roll((1, 2), (0,)), x, mode=mode)
    _same(lambda a: a.roll((1, 2)), x, mode=mode)


def test_compiled_integer_pow_to_a_negative_exponent() -> None:
    """Seed 2098: ATen's meta function rejects it in eager mode; a compiled graph's lowering does too."""
    _compiled_raises(lambda a: torch.pow(a, -1), torch.ones(1, 2, 5, dtype=torch.int32))
    for mode in ("strict", "fused"):
        _same(lambda a: torch.pow(a, -1), torch.ones(2, dtype=torch.int32), mode=mode)
    x = torch.arange(1, 5, dtype=torch.int32)
    torch._dynamo.reset()
    got = torch.compile(lambda a: torch.pow(a, 2), backend="tpu")(x.to("tpu")).cpu()
    assert got.tolist() == [1, 4, 9, 16]
