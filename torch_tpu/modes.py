"""Execution modes: debug (synchronous), strict (asynchronous, the default), fused (DeferAndFuse).

The mode is process-wide. Switching hands pending fused work to the device queues first, so
it runs before anything the new mode issues; it does not wait for the device, except when
entering debug mode, which runs each op on the calling thread and so drains the queues.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

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


def _flush_after_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """Fused mode: an optimizer step ends the pending graph (flush cause ``optimizer_step``,
    no host wait), so the next training step's graphs start at its first op. A loop that reads
    no value between steps then cuts its graphs at the same points every step and hits the
    cache; without it the size cap's cuts drift by the step's op count modulo the cap, and a
    Llama training step compiled ~12 new graphs per step for its first dozen steps."""
    if not torch.compiler.is_compiling():
        _C._fused_flush(-1, "optimizer_step")


register_optimizer_step_post_hook(_flush_after_optimizer_step)
