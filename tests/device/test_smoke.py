"""First-contact checks: the device exists, data round-trips, an op runs through the IR."""

import torch

import torch_tpu


def test_device_registered() -> None:
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1
    t = torch.zeros(2, device="tpu")
    assert t.device.type == "tpu" and t.is_tpu


def test_roundtrip_and_add() -> None:
    x = torch.randn(3, 4)
    y = torch.randn(4)
    out = (x.to("tpu") + y.to("tpu")).cpu()
    torch.testing.assert_close(out, x + y)


def test_item_and_metrics() -> None:
    torch_tpu.reset_metrics()
    x = torch.arange(6.0).reshape(2, 3)
    t = x.to("tpu")
    s = (t * 2).sum()
    assert s.item() == 30.0
    m = torch_tpu.metrics()
    assert m["ops_dispatched"] >= 2 and m["host_syncs"] >= 1
