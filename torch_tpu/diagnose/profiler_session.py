"""A profiling session: what ``python -m torch_tpu profile`` and ``torch_tpu.diagnose`` record.

While a session runs, the C++ profiler (csrc/exec/profiler.h) records device events (every
program run, with wall-clock times), host syncs and CPU fallbacks by the user's source line;
the allocator keeps its history (csrc/device/memory_history.h); and two Dynamo hooks record
graph breaks (the ``graph_breaks`` log artifact, which names the user's file:line and the
reason) and recompiles (compile start/end callbacks: the failed guard and the user's line that
called the recompiled frame). Nothing of this costs anything when no session runs.
"""

from __future__ import annotations

import logging
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from .. import _C

_GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
_LIBRARY_PARTS = ("/torch/", "/torch_tpu/", "/logging/", "<frozen", "/contextlib.py", "/runpy.py")


def user_line(skip_library: bool = True) -> str:
    """'file:line' of the innermost frame outside torch, torch_tpu and the standard plumbing."""
    for frame in reversed(traceback.extract_stack()):
        if not skip_library or not any(p in frame.filename for p in _LIBRARY_PARTS):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


@dataclass
class GraphBreak:
    line: str
    reason: str
    count: int = 1


@dataclass
class Recompile:
    line: str           # the user's line that called the recompiled frame
    reason: str         # the first failed guard, as Dynamo reports it
    compile_id: str
    seconds: float = 0.0


@dataclass
class SessionData:
    """Everything one session recorded (the report's input)."""

    start_ns: int = 0
    end_ns: int = 0
    device_events: list[tuple] = field(default_factory=list)   # see _C._profiler_take_device_events
    host_syncs: list[tuple] = field(default_factory=list)      # (line, op, count, wait_ns)
    fallbacks: list[tuple] = field(default_factory=list)       # (line, op, count, wait_ns)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    dynamo_compile_seconds: float = 0.0
    metrics_before: dict[str, Any] = field(default_factory=dict)
    metrics_after: dict[str, Any] = field(default_factory=dict)
    memory_blocks: list[tuple] = field(default_factory=list)   # (addr, size, requested, active, frames)
    memory_trace: list[tuple] = field(default_factory=list)    # (action, addr, size, device, user site)
    peak_memory_allocated: int = 0


class _GraphBreakHandler(logging.Handler):
    _AT = re.compile(r"in user code at (.+?):(\d+)\n")
    _REASON = re.compile(r"Graph Break Reason: (.*?)(?:\n\s*\n|\n  Explanation|$)", re.S)
    _EXPLANATION = re.compile(r"Explanation: (.*)")

    def __init__(self, out: dict[tuple[str, str], GraphBreak]) -> None:
        super().__init__(logging.DEBUG)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record must not break the user's run
            return
        at = self._AT.search(msg + "\n")
        if at is None:
            return
        line = f"{at.group(1)}:{at.group(2)}"
        expl = self._EXPLANATION.search(msg)
        reason_m = self._REASON.search(msg)
        reason = (expl.group(1) if expl else reason_m.group(1) if reason_m else "unknown").strip()
        key = (line, reason)
        if key in self.out:
            self.out[key].count += 1
        else:
            self.out[key] = GraphBreak(line, reason[:300])


class Session:
    """Starts and stops the records; one session at a time per process."""

    active: "Session | None" = None

    def __init__(self, memory_history: bool = True, max_memory_entries: int = 100_000) -> None:
        self.memory_history = memory_history
        self.max_memory_entries = max_memory_entries
        self.data = SessionData()
        self._breaks: dict[tuple[str, str], GraphBreak] = {}
        self._handler: _GraphBreakHandler | None = None
        self._logger_state: tuple[int, bool] | None = None
        self._callbacks: tuple[Any, Any] | None = None
        self._compile_starts: dict[str, tuple[float, str, str | None]] = {}

    # -- lifetime -----------------------------------------------------------------------------
    def start(self) -> "Session":
        """Resets the C++ records and turns them on; installs the Dynamo hooks."""
        import torch_tpu

        if Session.active is not None:
            raise RuntimeError("torch_tpu.diagnose: a profiling session is already running")
        Session.active = self
        _C._synchronize(-1)
        self.data.metrics_before = torch_tpu.metrics()
        _C._profiler_reset()
        _C._reset_peak_memory_stats(0)
        if self.memory_history:
            _C._memory_history_clear()
            _C._memory_record_history(True, self.max_memory_entries, True)
        self._install_dynamo_hooks()
        self.data.start_ns = _C._profiler_now_ns()
        _C._profiler_set_enabled(True)
        return self

    def stop(self) -> SessionData:
        """Drains the devices, turns the records off and returns what was recorded."""
        import torch_tpu

        if Session.active is not self:
            raise RuntimeError("torch_tpu.diagnose: this profiling session is not running")
        try:
            _C._synchronize(-1)
        finally:
            self.data.end_ns = _C._profiler_now_ns()
            _C._profiler_set_enabled(False)
            Session.active = None
            self._remove_dynamo_hooks()
        d = self.data
        d.device_events = list(_C._profiler_take_device_events())
        d.host_syncs = list(_C._profiler_host_syncs())
        d.fallbacks = list(_C._profiler_fallbacks())
        d.graph_breaks = sorted(self._breaks.values(), key=lambda b: -b.count)
        d.metrics_after = torch_tpu.metrics()
        d.peak_memory_allocated = int(_C._memory_stats(0).get("allocated_bytes.all.peak", 0))
        d.memory_blocks = list(_C._memory_blocks(0))
        if self.memory_history:
            _C._memory_record_history(False, 0, False)
            d.memory_trace = list(_C._memory_trace_sites())
            _C._memory_history_clear()
        return d

    # -- Dynamo hooks ---------------------------------------------------------------------------
    def _install_dynamo_hooks(self) -> None:
        try:
            import torch._dynamo  # noqa: F401  (the script may import it later: hook it now)
            from torch._dynamo.callback import callback_handler
        except ImportError:  # a torch without Dynamo: graph breaks and recompiles go unreported
            return
        logger = logging.getLogger(_GRAPH_BREAK_LOGGER)
        self._logger_state = (logger.level, logger.propagate)
        self._handler = _GraphBreakHandler(self._breaks)
        logger.addHandler(self._handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # recorded, not printed: the report prints them
        start = callback_handler.register_start_callback(self._on_compile_start)
        end = callback_handler.register_end_callback(self._on_compile_end)
        self._callbacks = (start, end)

    def _remove_dynamo_hooks(self) -> None:
        if self._handler is not None:
            logger = logging.getLogger(_GRAPH_BREAK_LOGGER)
            logger.removeHandler(self._handler)
            assert self._logger_state is not None
            logger.setLevel(self._logger_state[0])
            logger.propagate = self._logger_state[1]
            self._handler = None
        if self._callbacks is not None:
            from torch._dynamo.callback import callback_handler

            for lst, cb in ((callback_handler.start_callbacks, self._callbacks[0]),
                            (callback_handler.end_callbacks, self._callbacks[1])):
                if cb in lst:
                    lst.remove(cb)
            self._callbacks = None

    def _on_compile_start(self, args: Any) -> None:
        reason = None
        try:
            from torch._dynamo.utils import get_metrics_context

            reason = get_metrics_context()._metrics.get("recompile_reason")
        except Exception:  # private API of another torch version: the count still holds
            pass
        self._compile_starts[str(args.compile_id)] = (time.perf_counter(), user_line(), reason)

    def _on_compile_end(self, args: Any) -> None:
        cid = str(args.compile_id)
        started = self._compile_starts.pop(cid, None)
        if started is None:
            return
        seconds = time.perf_counter() - started[0]
        self.data.dynamo_compile_seconds += seconds
        m = re.search(r"(\d+)/(\d+)", cid)
        if m and int(m.group(2)) > 0:  # a frame compiled before, compiled again: a recompile
            self.data.recompiles.append(Recompile(started[1], started[2] or "guard failure (reason not reported)",
                                                  cid, seconds))


def current() -> Session | None:
    """The running session, if any."""
    return Session.active
