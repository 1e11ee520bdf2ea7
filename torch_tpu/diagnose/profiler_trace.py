"""torch.profiler integration: tpu programs as device events in the Chrome trace.

Route: PyTorch 2.13 lets an out-of-tree backend feed kineto device activities only through a C++
``libkineto::IActivityProfiler`` registered with ``PrivateUse1ProfilerRegistry``, whose ABI is
kineto's and which torch 2.11 lacks; so the host's ATen events come from torch.profiler as usual
and the device events are merged into the exported trace afterwards. Both use the same clock:
kineto writes ``ts`` as microseconds since ``baseTimeNanoseconds`` on the Unix epoch, and the C++
profiler (csrc/exec/profiler.h) stamps programs with the system clock in Unix-epoch nanoseconds,
so a program's event sits under the ATen op (strict) or the host read (fused) that ran it.

Usage::

    with torch_tpu.diagnose.profiler_trace.profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    prof.export_chrome_trace("trace.json")   # host ATen events + "tpu:0" device events
"""

from __future__ import annotations

import json
from typing import Any

import torch.profiler

from .. import _C

__all__ = ["profile", "device_trace_events", "merge_device_events"]


def device_trace_events(events: list[tuple], base_ns: int, pid_base: int = 1 << 20) -> list[dict[str, Any]]:
    """Chrome-trace events for the C++ profiler's device events (one process per tpu device,
    one thread per stream), timestamps relative to ``base_ns``."""
    out: list[dict[str, Any]] = []
    devices: set[tuple[int, int]] = set()
    for name, ops, cause, start_ns, end_ns, nbytes, device, stream, kernels, clusters in events:
        pid = pid_base + int(device)
        devices.add((int(device), int(stream)))
        args: dict[str, Any] = {"program": name, "ops": ops, "bytes moved": int(nbytes), "device": int(device),
                                "stream": int(stream)}
        if cause:
            args.update({"flush cause": cause, "kernels": int(kernels), "fused clusters": int(clusters)})
        out.append({"ph": "X", "cat": "tpu_program", "name": name, "pid": pid, "tid": int(stream),
                    "ts": (start_ns - base_ns) / 1e3, "dur": max(0.0, (end_ns - start_ns) / 1e3), "args": args})
    for device, stream in sorted(devices):
        out.append({"ph": "M", "name": "process_name", "pid": pid_base + device, "tid": 0,
                    "args": {"name": f"tpu:{device}"}})
        out.append({"ph": "M", "name": "thread_name", "pid": pid_base + device, "tid": stream,
                    "args": {"name": f"stream {stream}"}})
    return out


def merge_device_events(path: str, events: list[tuple]) -> int:
    """Adds device events to the Chrome trace at ``path`` (written by torch.profiler); returns
    how many program events were added."""
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    base = int(trace.get("baseTimeNanoseconds", 0))
    trace.setdefault("traceEvents", []).extend(device_trace_events(events, base))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace, f)
    return len(events)


class profile(torch.profiler.profile):
    """``torch.profiler.profile`` that also records the tpu programs it saw run; same arguments.
    ``export_chrome_trace`` writes them as device events next to the host's ATen events."""

    tpu_events: list[tuple]

    def start(self) -> None:
        self._owns_recording = not _C._profiler_enabled()
        if self._owns_recording:
            _C._profiler_take_device_events()  # drop stale events
            _C._profiler_set_enabled(True)
        self.tpu_events = []
        super().start()

    def stop(self) -> None:
        _C._synchronize(-1)  # the programs queued inside the profiled region have run
        super().stop()
        if self._owns_recording:
            _C._profiler_set_enabled(False)
            self.tpu_events = list(_C._profiler_take_device_events())

    def export_chrome_trace(self, path: str, events: list[tuple] | None = None) -> None:  # type: ignore[override]
        """Writes the trace, then merges the device events (``events`` overrides the recorded
        ones: a profiling session that ran at the same time took them)."""
        super().export_chrome_trace(path)
        merge_device_events(path, self.tpu_events if events is None else events)
