"""torch_tpu: makes a TPU-class accelerator the PyTorch device "tpu".

``import torch_tpu`` registers the backend: the "tpu" device (PrivateUse1 renamed),
``torch.tpu`` (shaped like ``torch.cuda``), tensor/module/storage methods, and the lowering
table every op goes through. See docs/architecture.md.
"""

from __future__ import annotations

import atexit
import os
import sys

import torch

from . import _C
from ._backend import register as _register


def _started_as_cli() -> bool:
    """Whether this process is ``python -m torch_tpu ...`` (the package is imported first)."""
    argv = getattr(sys, "orig_argv", [])
    return any(a == "-m" and argv[i + 1:i + 2] == ["torch_tpu"] for i, a in enumerate(argv))


_startup_error: Exception | None = None
try:
    _register()
except Exception as _e:  # noqa: BLE001
    if not _started_as_cli():
        raise
    # `python -m torch_tpu doctor` diagnoses exactly this (a missing PJRT plugin, a bad
    # variable): the tools report it instead of the import failing before they run.
    _startup_error = _e

from . import compile  # noqa: E402  (registers torch.compile(backend="tpu"); Dynamo stays unimported)
from . import distributed  # noqa: E402  (registers the "tpu" torch.distributed backend)
from . import integrations as _integrations  # noqa: E402  (Accelerate's device discovery; docs/frameworks.md)
from .config import env_vars  # noqa: E402

_integrations.install()
from .modes import get_mode, mode, set_mode  # noqa: E402
from .compile.recompiles import set_recompile_log, set_recompile_warn  # noqa: E402
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


def _autograd_device_threads_started() -> bool:
    """Whether PyTorch's autograd engine started its per-device threads (named pt_autograd_*)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return True  # cannot tell: assume they run
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().startswith("pt_autograd"):
                    return True
        except OSError:
            continue
    return False


def _drain_autograd_device_threads() -> None:
    """Lets the tpu autograd thread finish what it does after a backward returned, before the
    interpreter finalizes.

    torch.autograd's backward stashes a Python object (the caller's contextvars context) in the
    thread-local state its graph task copies; the device thread drops the graph task after
    waking the caller, and the last reference to that object with it, which takes the GIL. If
    that happens once the interpreter is finalizing, CPython ends the thread with a forced
    unwind through a noexcept destructor: "terminate called without an active exception" at
    exit. The device thread runs one graph task at a time, so once a trivial backward of ours
    (run on the engine directly: no stashed object) has completed, the earlier graph tasks are
    gone; the GIL is released while the caller waits for it.

    Every device is drained: whether a backward ran there cannot be told from its memory, since
    one through empty tensors allocates nothing (and peak statistics can be reset). Ours is
    through an empty leaf, so it allocates nothing, launches no program and starts no thread: the
    engine routes it to the device's thread by the device of its gradient, and that thread only
    accumulates the gradient into the leaf.
    """
    if not _autograd_device_threads_started():
        return
    from . import device

    for i in range(device.device_count()):
        x = torch.empty((0,), device=f"tpu:{i}", requires_grad=True)
        torch.autograd.Variable._execution_engine.run_backward(
            (x,), (torch.empty((0,), device=f"tpu:{i}"),), False, False, (), allow_unreachable=True,
            accumulate_grad=True)


def _at_exit() -> None:
    if _C._in_bad_fork():
        return  # a forked child: the pending work and the streams are the parent's
    if _startup_error is not None:
        return  # python -m torch_tpu in a broken setup: no device was started
    try:
        _drain_autograd_device_threads()
    except Exception:  # noqa: BLE001  exiting: a device in an error state must not stop the exit
        pass
    _C._fused_flush(-1, "exit")  # pending fused work runs before the interpreter goes away
    _C._synchronize(-1)


atexit.register(_at_exit)

__version__ = "0.1.0"


__all__ = ["get_mode", "set_mode", "mode", "metrics", "reset_metrics", "set_fallback", "fallback_enabled",
           "sync", "env_vars", "set_debug_fusion", "cache_stats", "compile",
           "wait_native_kernels", "set_recompile_log", "set_recompile_warn"]
