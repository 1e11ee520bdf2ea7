"""Pinned host memory, DataLoader(pin_memory=True) and non_blocking copies
(OpenReg: test_memory.py pin_memory, test_dataloader)."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def test_pin_memory_and_is_pinned() -> None:
    x = torch.arange(10.0)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu"
    assert p.data_ptr() != x.data_ptr()
    torch.testing.assert_close(p, x)
    assert p.pin_memory() is p or p.pin_memory().data_ptr() == p.data_ptr()
    e = torch.empty(4, pin_memory=True)
    assert e.is_pinned()
    assert not torch.empty(4).is_pinned()
    assert not torch.empty(4, device="tpu").is_pinned()


def test_pinned_views_and_storage() -> None:
    p = torch.arange(12.0).pin_memory()
    assert p[3:7].is_pinned()
    assert p.view(3, 4).t().is_pinned()
    assert p.untyped_storage().is_pinned()


def test_non_blocking_roundtrip() -> None:
    src = torch.randn(1000).pin_memory()
    t = src.to("tpu", non_blocking=True)
    y = t * 2
    back = torch.empty(1000).pin_memory()
    back.copy_(y, non_blocking=True)
    torch.tpu.synchronize()
    torch.testing.assert_close(back, src * 2)
    z = y.to("cpu", non_blocking=True)
    torch.tpu.current_stream().synchronize()
    torch.testing.assert_close(z, src * 2)


def test_non_blocking_upload_then_source_reuse() -> None:
    # Overwriting the pinned source right after the call must not change what the device got
    # (the host runtime snapshots the data at the call).
    src = torch.ones(256).pin_memory()
    t = src.to("tpu", non_blocking=True)
    src.fill_(5.0)
    torch.testing.assert_close(t.cpu(), torch.ones(256))


def test_dataloader_pin_memory_yields_pinned_batches() -> None:
    ds = TensorDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
    loader = DataLoader(ds, batch_size=4, pin_memory=True)
    seen = []
    for xb, yb in loader:
        assert xb.is_pinned() and yb.is_pinned()
        xt = xb.to("tpu", non_blocking=True)
        yt = yb.to("tpu", non_blocking=True)
        seen.append(((xt * 2).cpu(), yt.cpu()))
    assert len(seen) == 3
    torch.testing.assert_close(torch.cat([s[0] for s in seen]), torch.arange(20.0).reshape(10, 2) * 2)
    assert torch.equal(torch.cat([s[1] for s in seen]), torch.arange(10))


def test_dataloader_pin_memory_dict_batches() -> None:
    data = [{"x": torch.full((3,), float(i)), "i": i} for i in range(6)]
    loader = DataLoader(data, batch_size=3, pin_memory=True)
    batches = list(loader)
    assert len(batches) == 2
    for b in batches:
        assert b["x"].is_pinned() and b["i"].is_pinned()
    assert batches[1]["x"].to("tpu", non_blocking=True).sum().item() == (3 + 4 + 5) * 3


def test_the_host_allocator_is_registered_for_the_device() -> None:
    # torch.accelerator.empty_host_cache() asks the device type's host allocator; with none
    # registered it dereferenced null (vLLM calls it at shutdown). Run in a child: a crash must
    # fail the test, not the test run.
    code = (
        "import torch, torch_tpu\n"
        "x = torch.ones(3, device='tpu') + 1\n"
        "p = torch.arange(1000.0).pin_memory()\n"
        "assert p.is_pinned()\n"
        "torch.accelerator.empty_host_cache()\n"
        "assert torch.equal(p, torch.arange(1000.0)) and torch.equal(x.cpu(), torch.full((3,), 2.0))\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
