"""Dynamo's device interface for "tpu" (``torch._dynamo.device_interface``).

Dynamo asks a device's interface when it traces device APIs inside a compiled function
(``torch.tpu.current_stream()``, ``torch.tpu.synchronize()``, streams and events, the current
device for ``torch.device("tpu")``), and ``torch._dynamo.device_interface.get_interface_for_device
("tpu")`` must answer instead of raising. Registered when Dynamo's module loads
(``registration.py``); built lazily because subclassing ``DeviceInterface`` imports Dynamo.
"""

from __future__ import annotations

from typing import Any

import torch


def is_ours(interface: type | None) -> bool:
    return getattr(interface, "_torch_tpu", False)


def make_interface() -> type:
    """The ``DeviceInterface`` subclass backed by ``torch.tpu`` (torch_tpu/device.py)."""
    from torch._dynamo.device_interface import DeviceInterface

    from .. import device as tpu

    class TpuInterface(DeviceInterface):
        _torch_tpu = True
        device = tpu.device  # type: ignore[assignment]
        Event = tpu.Event  # type: ignore[assignment]
        Stream = tpu.Stream  # type: ignore[assignment]

        class Worker:
            """Compile workers ask for device facts without touching the runtime's state."""

            @staticmethod
            def set_device(device: int) -> None:
                tpu.set_device(device)

            @staticmethod
            def current_device() -> int:
                return tpu.current_device()

            @staticmethod
            def get_device_properties(device: torch.types.Device = None) -> Any:
                return tpu.get_device_properties(device)

        current_device = staticmethod(tpu.current_device)
        set_device = staticmethod(tpu.set_device)
        device_count = staticmethod(tpu.device_count)
        is_available = staticmethod(tpu.is_available)
        stream = staticmethod(tpu.stream)  # type: ignore[assignment]
        current_stream = staticmethod(tpu.current_stream)
        set_stream = staticmethod(tpu.set_stream)  # type: ignore[assignment]
        synchronize = staticmethod(tpu.synchronize)
        get_device_properties = staticmethod(tpu.get_device_properties)  # type: ignore[assignment]
        memory_allocated = staticmethod(tpu.memory_allocated)
        is_bf16_supported = staticmethod(tpu.is_bf16_supported)  # type: ignore[assignment]

        @staticmethod
        def exchange_device(device: int) -> int:
            prev = tpu.current_device()
            if device >= 0 and device != prev:
                tpu.set_device(device)
            return prev

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            return TpuInterface.exchange_device(device)

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            tpu.set_stream(tpu._wrap((stream_id, device_index)))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return tpu.current_stream(device_idx).stream_id

        @staticmethod
        def get_compute_capability(device: torch.types.Device = None) -> Any:
            return tpu.get_device_capability(device)

        @staticmethod
        def is_triton_capable(device: torch.types.Device = None) -> bool:
            return False  # no Inductor/Triton codegen for tpu: torch.compile routes to our backend

    return TpuInterface
