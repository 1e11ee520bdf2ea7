"""torch.distributed for "tpu" tensors: the ``"tpu"`` c10d process-group backend.

``import torch_tpu`` registers it, so the usual entry points select it::

    dist.init_process_group(device_id=torch.device("tpu", local_rank))   # cpu:gloo, tpu:tpu
    dist.init_process_group("tpu")                                     # tpu (and cpu) tensors
    dist.init_process_group("cpu:gloo,tpu:tpu")

The backend (csrc/distributed/backend.h) runs collectives on PyTorch's bundled Gloo transport,
over zero-copy CPU aliases of the tpu tensors' memory (host RAM on the host runtime), ordered
after the tpu stream's work. See docs/distributed.md.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from .. import _C

BACKEND_NAME = "tpu"

__all__ = ["BACKEND_NAME", "is_registered"]


def _create_backend(store: dist.Store, rank: int, size: int, timeout: datetime.timedelta) -> dist.Backend:
    """c10d creator: a Gloo transport on the group's store, wrapped by the tpu backend."""
    transport = dist.ProcessGroupGloo(store, rank, size, timeout)
    return _C._dist_tpu_backend(transport, rank, size)


def is_registered() -> bool:
    """True if the ``"tpu"`` backend is registered with torch.distributed."""
    return dist.is_available() and BACKEND_NAME.upper() in dist.Backend._plugins


def _register() -> None:
    if not dist.is_available() or not dist.is_gloo_available() or is_registered():
        return
    # devices=["cpu", "tpu"]: init_process_group("tpu") then also takes CPU tensors (passed to
    # the transport as they are), which object collectives and checkpointing need; the
    # "cpu:gloo,tpu:tpu" form and device_id=tpu keep a separate Gloo group for CPU tensors.
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu", "tpu"])


_register()
