"""DLPack where PyTorch supports it for PrivateUse1: capsule export/import (kDLExtDev)."""

import torch
import torch.utils.dlpack

import torch_tpu  # noqa: F401


def test_dlpack_capsule_roundtrip_shares_memory() -> None:
    t = torch.arange(6.0, device="tpu")
    u = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))
    assert u.device == t.device and u.data_ptr() == t.data_ptr()
    u.add_(1)  # same memory: the original sees the write
    torch.testing.assert_close(t.cpu(), torch.arange(6.0) + 1)


def test_dlpack_keeps_strides() -> None:
    t = torch.arange(12.0, device="tpu").reshape(3, 4).t()
    u = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))
    assert u.stride() == t.stride()
    torch.testing.assert_close(u.cpu(), torch.arange(12.0).reshape(3, 4).t())
