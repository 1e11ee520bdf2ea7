"""Registration of the PrivateUse1 backend under the name "tpu"."""

from __future__ import annotations

import torch

from . import _C


def register() -> None:
    _C._runtime_name()  # validates TORCH_TPU_RUNTIME now, with a clear error, not at the first op
    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
    from . import device as device_module

    if not hasattr(torch, "tpu"):
        torch._register_device_module("tpu", device_module)
    if not hasattr(torch.Tensor, "is_tpu"):
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    from .lowering.bridge import lower_from_dispatch

    _C._set_lowering_callback(lower_from_dispatch)
