"""Reductions and scans: lowering (reference interpreter) vs PyTorch CPU, and bool all/any on the device."""

from __future__ import annotations

import math

import pytest
import torch

import torch_tpu
from opinfo_utils import check, opinfo_sweep
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten
torch.manual_seed(0)
_X = torch.randn(3, 4, 5)
INPUTS = {
    "f32": _X, "f64": _X.double(), "bf16": _X.bfloat16(),
    "i64": torch.randint(-5, 6, (3, 4, 5)), "i32": torch.randint(-5, 6, (3, 4, 5), dtype=torch.int32),
    "bool": _X > 0,
}
FLOATS = ("f32", "f64", "bf16")


@pytest.mark.parametrize("name", list(INPUTS))
def test_sum_prod_extremes(name):
    x = INPUTS[name]
    check(aten.sum.dim_IntList, x, [1, -1], True)
    check(aten.sum.dim_IntList, x, None)
    check(aten.sum.default, x)
    check(aten.sum.default, x, dtype=torch.float64)
    check(aten.prod.dim_int, x, 1)
    check(aten.prod.default, x)
    check(aten.amax.default, x, [0, 2])
    check(aten.amin.default, x, [], True)
    check(aten.max.dim, x, 1, True)
    check(aten.min.dim, x, -1)
    check(aten.max.default, x)
    check(aten.aminmax.default, x, dim=1)
    check(aten.aminmax.default, x)
    check(aten.cumsum.default, x, 1)
    check(aten.cumprod.default, x, 2, dtype=torch.float64)
    check(aten.cummax.default, x, 1)
    check(aten.cummin.default, x, 2)
    check(aten.any.dims, x, [0])
    check(aten.any.dims, x, [])
    check(aten.all.dim, x, 1, True)
    check(aten.all.default, x)
    check(aten.count_nonzero.default, x, 1)
    check(aten.count_nonzero.dim_IntList, x, [0, 2])
    if x.dtype != torch.bool:
        check(aten.argmax.default, x)
        check(aten.argmin.default, x, 1, True)
        check(aten.median.default, x)
        check(aten.nanmedian.default, x)
    # integer/bool sums accumulate in int64 like CPU
    assert run_reference(aten.sum.default, x).dtype == x.sum().dtype


@pytest.mark.parametrize("name", FLOATS)
def test_float_reductions(name):
    x = INPUTS[name]
    check(aten.mean.dim, x, [1])
    check(aten.mean.default, x)
    check(aten.var.correction, x, [1], correction=2, keepdim=True)
    check(aten.var.dim, x, [0, 2], False)
    check(aten.std.default, x)
    check(aten.var_mean.correction, x, [0, 2])
    check(aten.std_mean.correction, x, None, correction=0)
    check(aten.logsumexp.default, x, [1])
    check(aten.logcumsumexp.default, x, 1)
    for p in (2, 1, 0, math.inf, -math.inf, 3.5, 0.5):
        check(aten.linalg_vector_norm.default, x, p, [1], True)
        check(aten.norm.ScalarOpt_dim, x, p, [0, 2])
    check(aten.norm.Scalar, x)
    check(aten.linalg_vector_norm.default, x, 2, None, False, dtype=torch.float64)


def test_nan_propagation_and_ties():
    nan = math.nan
    x = torch.tensor([[1.0, nan, 3.0, nan, 0.5], [2.0, 2.0, 1.0, 1.0, 2.0]])
    for op, args in [(aten.max.dim, (1,)), (aten.min.dim, (1,)), (aten.argmax.default, (1,)),
                     (aten.argmin.default, (1,)), (aten.amax.default, ([1],)), (aten.max.default, ()),
                     (aten.cummax.default, (1,)), (aten.cummin.default, (1,)), (aten.median.dim, (1,)),
                     (aten.nanmedian.dim, (1,)), (aten.logsumexp.default, ([1],)), (aten.sum.default, ()),
                     (aten.aminmax.default, ())]:
        check(op, x, *args)
    # cummax/cummin take the LAST index among equal extremes (CPU updates on >=)
    vals, idx = run_reference(aten.cummax.default, torch.tensor([1, 3, 3, 2, 3]), 0)
    assert idx.tolist() == [0, 1, 2, 2, 4]
    # max.dim/argmax take the FIRST index
    assert run_reference(aten.max.dim, torch.tensor([1.0, 3.0, 3.0]), 0)[1].item() == 1
    inf = torch.tensor([-math.inf, -math.inf, math.inf, 1.0])
    check(aten.logsumexp.default, inf[:2], [0])
    check(aten.logsumexp.default, inf, [0])
    check(aten.logcumsumexp.default, torch.tensor([-100.0, 0.0, 50.0]), 0)


def test_empty_and_scalar():
    e = torch.empty(0, 3)
    check(aten.sum.dim_IntList, e, [0])
    check(aten.prod.dim_int, e, 0)
    check(aten.mean.dim, e, [0])
    check(aten.amax.default, e, [1])
    check(aten.any.dims, e, [0])
    check(aten.cumsum.default, e, 0)
    with pytest.raises(IndexError):
        run_reference(aten.amax.default, e, [0])
    with pytest.raises(RuntimeError):
        run_reference(aten.max.default, e)
    with pytest.raises(RuntimeError):
        run_reference(aten.mean.default, torch.tensor([1, 2]))
    s = torch.tensor(2.5)
    for op, args in [(aten.sum.dim_IntList, ([0], True)), (aten.max.dim, (0,)), (aten.argmax.default, (0,)),
                     (aten.cumsum.default, (0,)), (aten.cummax.default, (-1,)), (aten.var.correction, (None,))]:
        check(op, s, *args)
    check(aten.count_nonzero.default, torch.tensor([[1, 0], [0, 0]], dtype=torch.uint8))
    assert run_reference(aten.any.default, torch.tensor([0, 3], dtype=torch.uint8)).dtype == torch.uint8


OPINFO = ["sum", "mean", "prod", "amax", "amin", ("max", "reduction_with_dim"), ("max", "reduction_no_dim"),
          ("min", "reduction_with_dim"), ("min", "reduction_no_dim"), "argmax", "argmin", "var", "std",
          "var_mean", "std_mean", ("var", "unbiased"), "norm", ("norm", "fro"), ("norm", "inf"),
          "linalg.vector_norm", "logsumexp", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "any", "all",
          "count_nonzero", "aminmax", "median", "nanmedian"]


@pytest.mark.parametrize("entry", OPINFO, ids=lambda e: e if isinstance(e, str) else ".".join(e))
def test_opinfo(entry):
    name, variant = (entry, "") if isinstance(entry, str) else entry
    opinfo_sweep(name, variant)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_bool_all_any_on_device(mode: str) -> None:
    # The host runtime reduces bools as the min/max of their bytes (runtime/host/kernels_reduce.cpp).
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 4, 32, 33, generator=g)
    x[1, 2, 3] = float("-inf")  # one fully masked row, as in SDPA's _safe_softmax
    with torch_tpu.mode(mode):
        xt = x.to("tpu")
        for dims, keepdim in (([-1], True), ([0, 2], False), ([1], False)):
            for src, dev in ((x, xt), (x.transpose(1, 3), xt.transpose(1, 3))):  # strided too
                want_all = (src == float("-inf")).all(dim=dims, keepdim=keepdim)
                want_any = (src > 2.5).any(dim=dims, keepdim=keepdim)
                got_all = (dev == float("-inf")).all(dim=dims, keepdim=keepdim).cpu()
                got_any = (dev > 2.5).any(dim=dims, keepdim=keepdim).cpu()
                assert got_all.dtype == torch.bool and torch.equal(got_all, want_all)
                assert got_any.dtype == torch.bool and torch.equal(got_any, want_any)
        assert bool((xt == float("-inf")).all(dim=-1)[1, 2, 3].cpu())
