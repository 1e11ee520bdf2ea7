"""Hugging Face Accelerate finds "tpu" (docs/frameworks.md).

Accelerate 1.x picks its device from a fixed list of backends (mps, npu, cuda, xpu, ...; never
``torch.accelerator``), so on a machine with only "tpu" ``Accelerator().device`` is cpu and
``device_map="auto"`` (``get_max_memory``, which Transformers calls too) sees no device memory
and places the whole model on cpu. Two small patches, applied when accelerate's modules load,
make both fall back to the current ``torch.accelerator`` where they would answer cpu:

- ``PartialState.default_device``: ``torch.device("tpu")`` instead of cpu (single process;
  ``Accelerator(cpu=True)`` and ``ACCELERATE_TORCH_DEVICE`` still win, as before).
- ``accelerate.utils.modeling.get_max_memory``: the free memory of each tpu device (as
  ``torch.tpu.mem_get_info`` reports it), ahead of cpu and disk, when no GPU-like device was
  found and no ``max_memory`` was given. Integer keys then mean tpu devices: ``torch.device(0)``
  is ``tpu:0`` when tpu is the current accelerator.

A change upstream (Accelerate asking ``torch.accelerator`` before falling back to cpu) would
make this module unnecessary; it only acts where accelerate's own answer is cpu.
"""

from __future__ import annotations

import functools
from typing import Any

import torch


def _tpu_is_the_accelerator() -> bool:
    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return acc is not None and acc.type == "tpu" and torch.tpu.device_count() > 0


def _patch_state(module: Any) -> None:
    cls = module.PartialState
    original = cls.__dict__.get("default_device")
    if original is None or getattr(original.fget, "_torch_tpu", False):
        return

    @functools.wraps(original.fget)
    def default_device(self: Any) -> torch.device:
        device = original.fget(self)
        if device.type == "cpu" and _tpu_is_the_accelerator():
            return torch.device("tpu")
        return device

    default_device._torch_tpu = True  # type: ignore[attr-defined]
    cls.default_device = property(default_device, doc=original.__doc__)


def _patch_modeling(module: Any) -> None:
    original = module.get_max_memory
    if getattr(original, "_torch_tpu", False):
        return

    @functools.wraps(original)
    def get_max_memory(max_memory: dict | None = None) -> dict:
        found = original(max_memory)
        if max_memory is not None or any(isinstance(k, int) for k in found) or not _tpu_is_the_accelerator():
            return found
        tpus = {i: torch.tpu.mem_get_info(i)[0] for i in range(torch.tpu.device_count())}
        return {**tpus, **found}

    get_max_memory._torch_tpu = True  # type: ignore[attr-defined]
    module.get_max_memory = get_max_memory


ACTIONS = {"accelerate.state": _patch_state, "accelerate.utils.modeling": _patch_modeling}
