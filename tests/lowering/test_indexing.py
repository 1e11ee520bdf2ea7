"""Gathers, scatters, advanced indexing, sorting and searching: lowering vs PyTorch CPU."""

from __future__ import annotations

import pytest
import torch

from opinfo_utils import check, close, opinfo_sweep
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten
I = torch.tensor  # noqa: E741
torch.manual_seed(0)
_X = torch.randn(3, 4, 5)
INPUTS = {"f32": _X, "f64": _X.double(), "bf16": _X.bfloat16(), "i64": torch.randint(-9, 9, (3, 4, 5)),
          "i32": torch.randint(-9, 9, (3, 4, 5), dtype=torch.int32), "bool": _X > 0}


@pytest.mark.parametrize("name", list(INPUTS))
def test_gather_scatter(name):
    t = INPUTS[name]
    src = torch.randn(3, 6, 5).to(t.dtype)
    check(aten.index_select.default, t, 1, I([3, 0, 0]))
    check(aten.index_select.default, t, -1, I([4], dtype=torch.int32))
    check(aten.gather.default, t, 2, torch.randint(0, 5, (2, 3, 7)))
    check(aten.take.default, t, I([[-1, 5], [59, 0]]))
    check(aten.take_along_dim.default, t, torch.randint(0, 4, (1, 2, 5)), 1)
    check(aten.take_along_dim.default, t, I([7, -0]))
    check(aten.scatter.src, t, 1, I([[[0, 1, 2, 3, 0]]]), src)
    check(aten.scatter.value, t, 0, I([[[2], [1]]]), 1)
    check(aten.index_copy.default, t, 1, I([3, 1]), src[:, :2])
    check(aten.index_fill.int_Scalar, t, 2, I([-1, 0]), 1)
    check(aten.index_fill.int_Tensor, t, 0, I([1]), I(0).to(t.dtype))
    if t.dtype == torch.bool:
        return
    idx = torch.randint(0, 4, (3, 6, 5))
    check(aten.scatter_add.default, t, 1, idx, src)
    check(aten.scatter.reduce, t, 1, idx, src, reduce="multiply")
    for red in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            check(aten.scatter_reduce.two, t, 1, idx, src, red, include_self=inc)
    # bf16 with repeated indices differs from CPU's per-slice rounding order: unique indices there
    check(aten.index_add.default, t, 1, I([0, 1, 2] if t.dtype == torch.bfloat16 else [0, 2, 2]), src[:, :3],
          alpha=2)


INDEXES = [[I([0, 2, -1])], [None, I([[1], [3]]), I([0, 4, 2])], [I([0, 2]), None, I([1, -1])],
           [None, None, I([[4]])], [I(1), I([0, 1], dtype=torch.int32)], [I([[0]]), I([1, 2]), I([[3], [4]])],
           [None, I([], dtype=torch.int64)]]


@pytest.mark.parametrize("name", list(INPUTS))
def test_advanced_indexing(name):
    t = INPUTS[name]
    for inds in INDEXES:
        check(aten.index.Tensor, t, inds)
        shape = t[tuple(slice(None) if i is None else i for i in inds)].shape
        vals = torch.randn(shape[-1:]).to(t.dtype)
        check(aten.index_put.default, t, inds, vals, False)
        check(aten._index_put_impl.default, t, inds, vals, False, False)
        if t.dtype != torch.bool:
            check(aten.index_put.default, t, inds, vals, True)
            check(aten._index_put_impl.default, t, inds, vals, True, True)
    # duplicates accumulate
    check(aten.index_put.default, INPUTS["f64"], [I([1, 1, 1])], torch.ones(1, 1, 1, dtype=torch.float64), True)
    with pytest.raises((IndexError, RuntimeError)):
        run_reference(aten.index.Tensor, t, [I([3])])
    with pytest.raises((IndexError, RuntimeError)):
        run_reference(aten.index.Tensor, t, [None, I([-5])])
    with pytest.raises(NotImplementedError):
        run_reference(aten.index.Tensor, t, [I([True, False, True])])


@pytest.mark.parametrize("name", list(INPUTS))
def test_masked_nonzero(name):
    t = INPUTS[name]
    m = torch.rand(3, 4, 5) > 0.5
    check(aten.masked_scatter.default, t, m, torch.arange(70).to(t.dtype))
    check(aten.masked_scatter.default, t, m[0, :, :1], torch.arange(70).to(t.dtype))  # broadcast mask
    check(aten.nonzero_static.default, t, size=7)
    check(aten.nonzero_static.default, t, size=100, fill_value=-5)
    check(aten.nonzero_static.default, torch.zeros(0, 2, dtype=t.dtype), size=3)
    with pytest.raises((IndexError, RuntimeError)):
        run_reference(aten.masked_scatter.default, t, torch.ones(3, 4, 5, dtype=torch.bool), torch.zeros(3).to(t.dtype))


def _check_sorted(got, exp, x, dim):
    """Values equal; indices may differ only among ties, so they must gather the values."""
    close(got[0], exp[0])
    close(torch.gather(x, dim, got[1]), exp[0])


@pytest.mark.parametrize("name", list(INPUTS))
def test_sorting(name):
    t = INPUTS[name]
    check(aten.sort.stable, t, stable=True, dim=0)
    check(aten.sort.stable, t, stable=True, dim=1, descending=True)
    check(aten.argsort.stable, t, stable=True, dim=2, descending=True)
    check(aten.msort.default, t)
    for op, args in [(aten.sort.default, (1, True)), (aten.topk.default, (3, 2)), (aten.topk.default, (2, 0, False)),
                     (aten.kthvalue.default, (2, 1, True))]:
        if t.dtype == torch.bool and op != aten.sort.default:
            continue
        got, exp = run_reference(op, t, *args), op(t, *args)
        dim = args[1] if op == aten.topk.default else args[0] if op == aten.sort.default else args[1]
        if op == aten.kthvalue.default:
            close(got[0], exp[0])
            close(torch.gather(t, dim, got[1]), got[0])
        else:
            _check_sorted(got, exp, t, dim)


def test_sort_nan_and_stability():
    nan = float("nan")
    x = torch.tensor([3.0, nan, 1.0, 3.0, nan, -1.0])
    for desc in (False, True):
        check(aten.sort.stable, x, stable=True, dim=0, descending=desc)
    check(aten.topk.default, torch.tensor([1.0, nan, 5.0, 2.0]), 2)


def test_searchsorted():
    ss = torch.sort(torch.randn(10)).values
    v = torch.randn(3, 4)
    check(aten.searchsorted.Tensor, ss, v)
    check(aten.searchsorted.Tensor, ss, v, right=True, out_int32=True)
    check(aten.searchsorted.Tensor, ss, ss)
    check(aten.searchsorted.Tensor, ss, ss, side="right")
    check(aten.searchsorted.Tensor, torch.sort(torch.randn(3, 10), -1).values, v)
    perm = torch.randperm(10)
    check(aten.searchsorted.Tensor, ss[perm], v, sorter=torch.argsort(ss[perm]))
    check(aten.searchsorted.Scalar, ss, 0.3)
    check(aten.bucketize.Tensor, v, ss)
    check(aten.bucketize.Tensor, torch.randint(0, 10, (5,)), torch.arange(0, 10, 2), right=True)
    check(aten.bucketize.Tensor, torch.tensor([1.0, float("nan")]), ss)


def _cmp_ties(got, exp, s):
    close(got[0], exp[0], atol=0, rtol=0)  # selected values are input elements: exact
    dim = s.args[1] if len(s.args) > 1 else s.kwargs.get("dim", -1)
    if s.input.dim():
        close(torch.gather(s.input, dim, got[1]), got[0])


OPINFO = ["index_select", "gather", "scatter", "scatter_add", ("scatter_reduce", "sum"), ("scatter_reduce", "prod"),
          ("scatter_reduce", "mean"), ("scatter_reduce", "amin"), ("scatter_reduce", "amax"), "index_put", "index_add",
          "index_copy", "index_fill", "take", "take_along_dim", "masked_scatter", "nonzero_static", "msort",
          "searchsorted", "bucketize", "__getitem__"]


@pytest.mark.parametrize("entry", OPINFO, ids=lambda e: e if isinstance(e, str) else ".".join(e))
def test_opinfo(entry):
    name, variant = (entry, "") if isinstance(entry, str) else entry
    # the two largest sample sets: one float and one integer dtype keep the file fast
    heavy = name in ("searchsorted", "nonzero_static")
    opinfo_sweep(name, variant, **({"dtypes": (torch.float32, torch.int64)} if heavy else {}))


@pytest.mark.parametrize("name", ["sort", "topk", "kthvalue", "argsort"])
def test_opinfo_tie_ops(name):
    """CPU's order among equal keys is implementation-defined for these: values must match exactly and
    the indices must point at those values."""
    if name == "argsort":
        def cmp(got, exp, s):
            x, dim = s.input, s.kwargs.get("dim", s.args[0] if s.args else -1)
            if x.dim():
                close(torch.gather(x, dim, got), torch.gather(x, dim, exp))
        opinfo_sweep(name, compare=cmp)
        return
    if name == "kthvalue":
        def cmp(got, exp, s):
            close(got[0], exp[0])
            dim = s.args[1] if len(s.args) > 1 else s.kwargs.get("dim", -1)
            if s.input.dim():
                close(torch.gather(s.input, dim, got[1].unsqueeze(dim) if got[1].dim() < s.input.dim() else got[1]),
                      got[0].unsqueeze(dim) if got[0].dim() < s.input.dim() else got[0])
        opinfo_sweep(name, compare=cmp)
        return
    if name == "sort":
        def cmp(got, exp, s):
            close(got[0], exp[0])
            dim = s.kwargs.get("dim", s.args[0] if s.args else -1)
            if s.input.dim():
                close(torch.gather(s.input, dim, got[1]), got[0])
        opinfo_sweep(name, compare=cmp)
        return
    opinfo_sweep(name, compare=_cmp_ties)


def test_unique_and_repeat_interleave_sync_once_and_match_cpu():
    # Data-dependent sizes: one host read each (a data_dependent flush in fused mode), then
    # static shapes. NaNs stay distinct and -0.0 groups with 0.0, as on CPU.
    import torch_tpu

    x = torch.tensor([3.0, 1.0, float("nan"), 2.0, 1.0, float("nan"), 3.0, -0.0, 0.0])
    with torch_tpu.mode("fused"):
        torch_tpu.reset_metrics()
        got = torch.unique(x.to("tpu"), return_inverse=True, return_counts=True)
        reps = torch.repeat_interleave(torch.tensor([2, 0, 3], device="tpu"))
        causes = torch_tpu.metrics()["fused"]["flushes_by_cause"]
        assert causes.get("data_dependent") == 2, causes
    exp = torch.unique(x, return_inverse=True, return_counts=True)
    for g, e in zip(got, exp):
        torch.testing.assert_close(g.cpu(), e, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(reps.cpu(), torch.tensor([0, 0, 2, 2, 2]))
    # output_size skips the host read, as on CUDA
    out = torch.repeat_interleave(torch.tensor([1, 2], device="tpu"), output_size=3)
    assert torch.equal(out.cpu(), torch.tensor([0, 1, 1]))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_bincount_reads_its_length_once_and_matches_cpu(mode):
    import torch_tpu

    x = torch.tensor([0, 3, 3, 1, 7])
    w = torch.tensor([0.5, 1.0, 2.0, 3.0, 4.0])
    cases = [(x, None, 0), (x, w, 0), (x, None, 10), (x.to(torch.uint8), w.double(), 0),
             (x, w.half(), 2), (torch.tensor([], dtype=torch.long), None, 3)]
    with torch_tpu.mode(mode):
        for inp, weights, minlength in cases:
            want = torch.bincount(inp, weights, minlength)
            got = torch.bincount(inp.to("tpu"), None if weights is None else weights.to("tpu"), minlength)
            assert got.dtype == want.dtype  # int64 counts; float32 weights stay float32, others float64
            assert torch.equal(got.cpu(), want)
        with pytest.raises(RuntimeError, match="non-negative integral inputs"):
            torch.bincount(torch.tensor([1, -2], device="tpu"))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_and_unique_consecutive_along_a_dim(dim):
    # Slices in lexicographic order (unique rows of an edge list, say), inverse and counts as on CPU.
    torch.manual_seed(0)
    x = torch.randint(0, 3, (6, 3, 2))
    x[3] = x[0]
    for fn in (torch.unique, torch.unique_consecutive):
        exp = fn(x, dim=dim, return_inverse=True, return_counts=True)
        got = fn(x.to("tpu"), dim=dim, return_inverse=True, return_counts=True)
        for g, e in zip(got, exp):
            assert torch.equal(g.cpu(), e), (fn, dim, g, e)
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        torch.unique(torch.empty(2, 0, device="tpu"), dim=0)


def test_unique_consecutive_and_repeat_interleave_errors():
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device="tpu"))
    got = torch.unique_consecutive(torch.tensor([[1, 1], [2, 1]], device="tpu"), return_counts=True)
    assert torch.equal(got[0].cpu(), torch.tensor([1, 2, 1])) and torch.equal(got[1].cpu(), torch.tensor([2, 1, 1]))
