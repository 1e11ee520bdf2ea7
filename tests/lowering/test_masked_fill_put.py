"""`x[mask] = v` on tpu: a boolean mask over x's leading dims filled with one value is a select
(no host read of the mask, so no flush in fused mode); masked puts of one value per True
element still read the mask's positions. Values compared with CPU."""

from __future__ import annotations

import pytest
import torch

import torch_tpu


@pytest.fixture
def no_host_reads():
    torch.tpu.set_sync_debug_mode("error")  # any host read raises
    yield
    torch.tpu.set_sync_debug_mode("default")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_one_value_fills_without_a_host_read(mode: str, no_host_reads) -> None:
    torch.manual_seed(0)
    x, mask = torch.randn(4, 5, 3), torch.randn(4, 5) > 0
    with torch_tpu.mode(mode):
        xt, mt = x.to("tpu"), mask.to("tpu")
        xt[mt] = 0.5
        xt.index_put_((mt,), torch.tensor(2.0, device="tpu"), accumulate=True)
        xt[mt] = torch.tensor([7.0], device="tpu")  # one value, shaped [1]
        xt[mt[:, 0]] = float("-inf")  # a 1-d mask over the first dim
        x[mask] = 0.5
        x.index_put_((mask,), torch.tensor(2.0), accumulate=True)
        x[mask] = torch.tensor([7.0])
        x[mask[:, 0]] = float("-inf")
        torch.tpu.set_sync_debug_mode("default")
        assert torch.equal(xt.cpu(), x)


def test_one_value_per_true_element_still_works() -> None:
    torch.manual_seed(0)
    x, mask = torch.randn(3, 4), torch.randn(3, 4) > 0
    xt = x.to("tpu")
    values = torch.arange(float(mask.sum()))
    xt[mask.to("tpu")] = values.to("tpu")
    x[mask] = values
    assert torch.equal(xt.cpu(), x)
