"""Execution modes: debug (synchronous), strict (asynchronous, the default), fused (DeferAndFuse).

The mode is process-wide. Switching hands pending fused work to the device queues first, so
it runs before anything the new mode issues; it does not wait for the device, except when
entering debug mode, which runs each op on the calling thread and so drains the queues.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import _C

MODES = ("debug", "strict", "fused")


def get_mode() -> str:
    """The current execution mode name."""
    return _C._get_mode()


def set_mode(name: str) -> None:
    """Select 'debug', 'strict' or 'fused' (TORCH_TPU_MODE sets the initial mode).

    Switching flushes pending fused work (without a host wait, except into debug mode).
    """
    _C._set_mode(name)


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """Run a block in another execution mode: ``with torch_tpu.mode("debug"): ...``."""
    previous = get_mode()
    set_mode(name)
    try:
        yield
    finally:
        set_mode(previous)
