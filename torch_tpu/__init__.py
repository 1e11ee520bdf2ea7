"""torch_tpu: makes a TPU-class accelerator the PyTorch device "tpu".

``import torch_tpu`` registers the backend: the "tpu" device (PrivateUse1 renamed),
``torch.tpu`` (shaped like ``torch.cuda``), tensor/module/storage methods, and the lowering
table every op goes through. See docs/architecture.md.
"""

from __future__ import annotations

import atexit

import torch

from . import _C
from ._backend import register as _register

_register()

from . import compile  # noqa: E402  (registers torch.compile(backend="tpu"); Dynamo stays unimported)
from . import distributed  # noqa: E402  (registers the "tpu" torch.distributed backend)
from .config import env_vars  # noqa: E402
from .modes import get_mode, mode, set_mode  # noqa: E402
from .runtime_info import (  # noqa: E402
    cache_stats,
    fallback_enabled,
    metrics,
    reset_metrics,
    set_debug_fusion,
    set_fallback,
    sync,
    wait_native_kernels,
)


def _at_exit() -> None:
    if _C._in_bad_fork():
        return  # a forked child: the pending work and the streams are the parent's
    _C._fused_flush(-1, "exit")  # pending fused work runs before the interpreter goes away
    _C._synchronize(-1)


atexit.register(_at_exit)

__version__ = "0.1.0"


__all__ = ["get_mode", "set_mode", "mode", "metrics", "reset_metrics", "set_fallback", "fallback_enabled",
           "sync", "env_vars", "set_debug_fusion", "cache_stats", "compile",
           "wait_native_kernels"]
