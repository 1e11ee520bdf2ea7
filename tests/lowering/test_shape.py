"""View ops with value semantics and data-movement copies: lowering vs PyTorch CPU."""

from __future__ import annotations

import pytest
import torch

from opinfo_utils import check, opinfo_sweep
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten
torch.manual_seed(0)
_X = torch.randn(3, 4, 5)
INPUTS = {"f32": _X, "f64": _X.double(), "bf16": _X.bfloat16(), "i64": torch.randint(-9, 9, (3, 4, 5)),
          "i32": torch.randint(-9, 9, (3, 4, 5), dtype=torch.int32), "bool": _X > 0}


@pytest.mark.parametrize("name", list(INPUTS))
def test_views(name):
    t = INPUTS[name]
    check(aten.view.default, t, [-1, 5])
    check(aten._unsafe_view.default, t, [12, 5])
    check(aten.reshape.default, t, [5, -1])
    check(aten.view_copy.default, t, [60])
    check(aten.expand.default, t[:, :1], [2, -1, 3, -1])
    check(aten.expand_copy.default, torch.tensor(1.0).to(t.dtype), [2, 3])
    check(aten.permute.default, t, [2, 0, -2])
    check(aten.permute_copy.default, t, [1, 2, 0])
    check(aten.transpose.int, t, 0, -1)
    check(aten.t.default, t[0])
    check(aten.squeeze.default, t[:1, :, :1])
    check(aten.squeeze.dims, t[:1, :, :1], [0, 1, 2])
    check(aten.squeeze.dim, t[:1], -3)
    check(aten.unsqueeze.default, t, -1)
    for args in [(1, None, None, 2), (2, -3, 100, 2), (0, 5, 1, 1), (-1, -100, -2, 3), (1, 2, 2, 1)]:
        check(aten.slice.Tensor, t, *args)
    check(aten.select.int, t, 1, -1)
    check(aten.narrow.default, t, 2, -3, 2)
    check(aten.narrow.Tensor, t, 1, torch.tensor(1), 3)
    for off in (-4, -1, 0, 2, 7):
        check(aten.diagonal.default, t, off, 2, 0)
    check(aten.alias.default, t)
    check(aten.unfold.default, t, 1, 2, 1)
    check(aten.unfold.default, t, 2, 3, 2)
    check(aten.split.Tensor, t, 2, 2)
    check(aten.split_with_sizes.default, t, [1, 0, 3], 1)
    check(aten.unbind.int, t, 1)
    check(aten.chunk.default, t, 3, 2)
    check(aten.as_strided.default, t, [2, 3], [1, 4], 2)
    check(aten.as_strided.default, t, [2, 2], [0, 7])


@pytest.mark.parametrize("name", list(INPUTS))
def test_copies(name):
    t = INPUTS[name]
    check(aten.cat.default, [t, t[:1]], 0)
    check(aten.cat.default, [t[:, :2], t], -2)
    check(aten.stack.default, [t, t], -1)
    check(aten.flip.default, t, [0, 2])
    check(aten.roll.default, t, [1, -7], [0, 2])
    check(aten.roll.default, t, [7])
    check(aten.repeat.default, t, [2, 1, 1, 3])
    check(aten.tile.default, t, [2])
    check(aten.tril.default, t, 1)
    check(aten.triu.default, t, -1)
    check(aten.constant_pad_nd.default, t, [1, 2, -1, 0], 1)
    check(aten.slice_scatter.default, t, t[:, 1:4:2].flip(0), 1, 1, 4, 2)
    check(aten.slice_scatter.default, t, t[:, 1:3].flip(0), 1, 1, 3)
    check(aten.select_scatter.default, t, t[:, 0].flip(0), 1, -2)
    check(aten.diagonal_scatter.default, t, torch.diagonal(t, 1, 0, 2).flip(0), 1, 0, 2)
    check(aten.as_strided_scatter.default, t, t[0, :2, :3], [2, 3], [1, 4], 2)


def test_cat_promotion_and_empty():
    mixed = [torch.ones(2, 3, dtype=torch.int32), torch.empty(0, dtype=torch.float64), torch.zeros(1, 3)]
    check(aten.cat.default, mixed)
    assert run_reference(aten.cat.default, mixed).dtype == torch.float64
    check(aten.cat.default, [torch.empty(0, dtype=torch.int32), torch.empty(0)])
    check(aten.cat.default, [torch.empty(2, 0), torch.ones(2, 3, dtype=torch.bool)], 1)
    with pytest.raises(RuntimeError):
        run_reference(aten.cat.default, [torch.ones(2, 3), torch.ones(3, 2)], 0)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("kind", ["reflection", "replication"])
def test_padding(k, kind):
    x = torch.randn(2, 3, 4, 5, 6)[(0,) * (3 - k)]
    pad = [2, 1, 1, 3, 0, 2][:2 * k]
    fwd = getattr(aten, f"{kind}_pad{k}d").default
    check(fwd, x, pad)
    check(fwd, x[0], pad)  # unbatched
    g = torch.randn(fwd(x, pad).shape)
    check(getattr(aten, f"{kind}_pad{k}d_backward").default, g, x, pad)


def test_errors():
    x = torch.randn(3, 4)
    with pytest.raises(IndexError):
        run_reference(aten.select.int, x, 0, 3)
    with pytest.raises(RuntimeError):
        run_reference(aten.view.default, x, [5, -1])
    with pytest.raises(RuntimeError):
        run_reference(aten.as_strided.default, x, [4, 4], [4, 1])  # past the storage
    with pytest.raises(RuntimeError):
        run_reference(aten.reflection_pad1d.default, x, [4, 0])


OPINFO = ["cat", "stack", "hstack", "vstack", "flip", "fliplr", "roll", "repeat", "tile", "tril", "triu",
          ("nn.functional.pad", "constant"), ("nn.functional.pad", "reflect"), ("nn.functional.pad", "replicate"),
          ("nn.functional.pad", "replicate_negative"), "slice_scatter", "select_scatter", "diagonal_scatter",
          "as_strided_scatter", "diagonal_copy", "unfold_copy", "narrow_copy", "rot90", "diag_embed"]


@pytest.mark.parametrize("entry", OPINFO, ids=lambda e: e if isinstance(e, str) else ".".join(e))
def test_opinfo(entry):
    name, variant = (entry, "") if isinstance(entry, str) else entry
    opinfo_sweep(name, variant)
