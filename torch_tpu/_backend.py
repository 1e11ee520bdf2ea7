"""Registration of the PrivateUse1 backend under the name "tpu"."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch

from . import _C


def register() -> None:
    _C._check_config()  # out-of-range TORCH_TPU_NUM_DEVICES, sizes: a ValueError naming the variable
    _C._pjrt_set_search_path(sys.path)  # where PJRT plugins are discovered (only stat() calls)
    if _C._runtime_name() == "jax":  # validates TORCH_TPU_RUNTIME now, with a clear error, not at the first op
        from . import jax_runtime  # imports jax: only for this runtime

        jax_runtime.install()
    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
    from . import device as device_module

    if not hasattr(torch, "tpu"):
        torch._register_device_module("tpu", device_module)
    if not hasattr(torch.Tensor, "is_tpu"):
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    from .lowering.bridge import lower_from_dispatch

    _C._set_lowering_callback(lower_from_dispatch)
    _C._configure_disk_cache(lowering_fingerprint())


def lowering_fingerprint() -> str:
    """A short hash of what decides the programs the disk cache stores: the
    sources of the lowerings and the IR builder, and the extension's size and modification time.
    It names the disk tier's versioned directory, so editing a lowering (or rebuilding _C) never
    reuses programs compiled by the old code. Costs about a millisecond at import."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for folder in ("lowering", "ir"):
        for path in sorted((root / folder).glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    ext = Path(_C.__file__).stat()
    h.update(f"{ext.st_size}:{ext.st_mtime_ns}".encode())
    return h.hexdigest()[:16]
