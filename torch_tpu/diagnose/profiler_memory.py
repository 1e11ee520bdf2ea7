"""``torch.tpu.memory``'s history and snapshot: the dict PyTorch's memory viz reads.

``_record_memory_history()`` turns on the allocator's history (csrc/device/memory_history.h:
every allocation and free, with the Python stack of each allocation); ``_snapshot()`` returns
``{"segments": [...], "device_traces": [[...], ...]}`` in the format of
``torch.cuda.memory._snapshot()``, which ``torch/cuda/_memory_viz.py`` (``segsum``, ``trace``,
``memory``, ``segments``, the HTML viewer) and https://pytorch.org/memory_viz read. The tpu
caching allocator holds each block in its own host allocation, so each block is one segment.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

from .. import _C

__all__ = ["_record_memory_history", "_snapshot", "_dump_snapshot"]


def _record_memory_history(enabled: str | bool | None = "all", context: str | None = "all",
                           stacks: str = "python", max_entries: int = sys.maxsize, device: Any = None) -> None:
    """Starts (``enabled`` "all"/"state"/True) or stops (None/False) recording the allocator's
    history, like ``torch.cuda.memory._record_memory_history``. ``context=None`` records no
    stacks; ``stacks`` "python"/"all" both record the Python stack (there is no C++ stack to add).
    ``max_entries`` bounds the trace (oldest first out). ``device`` is accepted for
    compatibility: the history covers every device."""
    if enabled not in (None, False, True, "all", "state"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    on = enabled not in (None, False)
    _C._memory_record_history(on, int(min(max_entries, 2**62)) if on else 0, on and context is not None)


def _snapshot(device: Any = None) -> dict[str, Any]:
    """The allocator's state (segments with their blocks and allocation stacks) and trace."""
    import torch

    count = torch.tpu.device_count()
    devices = range(count) if device is None else [torch.device("tpu", device).index or 0] \
        if not isinstance(device, torch.device) else [device.index or 0]
    segments: list[dict[str, Any]] = []
    for d in devices:
        for addr, size, requested, active, frames in _C._memory_blocks(d):
            block = {"address": addr, "size": size, "requested_size": requested if active else 0,
                     "state": "active_allocated" if active else "inactive", "frames": frames}
            segments.append({"device": d, "address": addr, "total_size": size,
                             "allocated_size": size if active else 0, "active_size": size if active else 0,
                             "requested_size": requested if active else 0, "stream": 0,
                             "segment_type": "large" if size >= 1 << 20 else "small", "segment_pool_id": (0, 0),
                             "is_expandable": False, "frames": [], "blocks": [block]})
    traces: list[list[dict[str, Any]]] = [[] for _ in range(max(count, 1))]
    for action, addr, size, dev, time_us, frames in _C._memory_trace():
        if not 0 <= dev < len(traces):
            continue
        # The tpu allocator frees at once (queued work holds storages, not blocks): a free is
        # requested and completed together, and the viewer wants both.
        for act in ("free_requested", "free_completed") if action == "free_completed" else (action,):
            traces[dev].append({"action": act, "addr": addr, "size": size, "stream": 0, "time_us": time_us,
                                "frames": frames})
    return {"segments": segments, "device_traces": traces, "allocator_settings": {}}


def __getattr__(name: str) -> Any:
    """torch.tpu.memory.memory_allocated & co. are torch.tpu's (torch_tpu/device.py)."""
    from .. import device

    if not name.startswith("__") and hasattr(device, name):
        return getattr(device, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles :func:`_snapshot` to ``filename`` (what torch/cuda/_memory_viz.py reads)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
