"""histc: lowering vs PyTorch CPU (bin edges, the closed last bin, out-of-range and NaN elements,
the data range when min == max) and integer inputs, which CPU rejects, vs CPU on their float copy."""

from __future__ import annotations

import pytest
import torch

from opinfo_utils import check
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten
torch.manual_seed(0)

CASES = [
    (torch.randn(1000), 10, 0, 0),
    (torch.randn(1000), 7, -1, 1),
    (torch.tensor([0.0, 1, 3, 3, 2, 5, -1, float("nan")]), 3, 0, 3),
    (torch.tensor([1.0, 1]), 4, 0, 0),
    (torch.rand(37, 5) * 3, 13, 0.0, 3.0),
    (torch.arange(0, 1, 0.1), 10, 0, 1),  # values on the bin edges
    (torch.randn(100, dtype=torch.float64), 5, 0, 0),
    (torch.randn(64).bfloat16(), 6, -2, 2),
    (torch.empty(0), 4, 0, 1),
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_histc(i):
    x, bins, lo, hi = CASES[i]
    check(aten.histc.default, x, bins, lo, hi)


def test_histc_integer_input():
    # Mixture-of-experts routers call histc on int32 expert ids on accelerators.
    ids = torch.tensor([0, 1, 3, 3, 2, 7, -1], dtype=torch.int32)
    got = run_reference(aten.histc.default, ids, 4, 0, 3)
    assert got.dtype == torch.int32
    torch.testing.assert_close(got, torch.histc(ids.float(), 4, 0, 3).int())


def test_histc_bad_bins():
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        run_reference(aten.histc.default, torch.randn(3), 0, 0, 1)
