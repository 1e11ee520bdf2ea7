"""``torch_tpu.diagnose.report()``: a ranked report of what made the code slow.

Usage::

    torch_tpu.diagnose.start()          # or: with torch_tpu.diagnose.profiling(): ...
    train()
    result = torch_tpu.diagnose.report()   # stops the session, prints, returns the dict

or from the command line: ``python -m torch_tpu profile [--json FILE] -- python train.py ...``.
Findings: host syncs by source line (with the op that forced them), recompiles with the failed
guard, CPU fallbacks, graph breaks and their reasons, compile time against device run time,
device idle time, the largest memory users; each with a suggestion (docs/diagnostics.md).
"""

from __future__ import annotations

import contextlib
import json
import sys
import types
from collections.abc import Iterator
from typing import IO, Any

from .profiler_session import Session, SessionData
from .report_findings import build_findings

__all__ = ["start", "stop", "profiling", "report", "format_report"]

_last: SessionData | None = None


def start(memory_history: bool = True) -> None:
    """Starts a profiling session (records host syncs, recompiles, fallbacks, graph breaks,
    device events and, with ``memory_history``, the allocator's history with Python stacks).
    Drains the devices first and resets device 0's peak memory statistics."""
    Session(memory_history=memory_history).start()


def stop() -> SessionData:
    """Stops the running session and keeps its records for :func:`report`."""
    global _last
    session = Session.active
    if session is None:
        raise RuntimeError("torch_tpu.diagnose.stop(): no profiling session is running (call start() first)")
    _last = session.stop()
    return _last


@contextlib.contextmanager
def profiling(memory_history: bool = True) -> Iterator[None]:
    """Profiles the body: ``with torch_tpu.diagnose.profiling(): train()``, then :func:`report`."""
    start(memory_history)
    try:
        yield
    finally:
        stop()


def report(data: SessionData | None = None, file: IO[str] | None = sys.stdout, json_path: str | None = None,
           top: int = 20) -> dict[str, Any]:
    """Builds the ranked report of a session (the running one is stopped first; else the last one),
    prints it to ``file`` (None: print nothing), writes it as JSON to ``json_path`` if given, and
    returns it as a dict with keys ``summary``, ``findings`` (ranked, most costly first) and
    ``device_events`` (count)."""
    if data is None:
        if Session.active is not None:
            stop()
        data = _last
    if data is None:
        raise RuntimeError("torch_tpu.diagnose.report(): nothing was profiled: call torch_tpu.diagnose.start() "
                           "before the code, or run it under `python -m torch_tpu profile -- python script.py`")
    findings, summary = build_findings(data)
    result = {"summary": summary, "findings": findings, "device_events": len(data.device_events)}
    if file is not None:
        file.write(format_report(result, top))
        file.flush()
    if json_path is not None:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, default=str)
    return result


def _fmt_s(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def format_report(result: dict[str, Any], top: int = 20) -> str:
    """The text form of :func:`report`'s dict."""
    s = result["summary"]
    lines = [
        "torch_tpu profile",
        f"  wall time          {_fmt_s(s['wall_s'])} (mode {s['mode']})",
        f"  device busy        {_fmt_s(s['device_busy_s'])} in {s['programs_run']} program runs; "
        f"idle {_fmt_s(s['device_idle_s'])} ({100 * s['device_idle_fraction']:.0f}%)",
        f"  compile time       {_fmt_s(s['compile_s'])}",
        f"  host syncs         {s['host_syncs']} (waited {_fmt_s(s['host_sync_wait_s'])})",
        f"  recompiles         {s['recompiles']}   graph breaks {s['graph_breaks']}   "
        f"CPU fallbacks {s['cpu_fallbacks']}",
        f"  peak memory        {s['peak_memory_allocated'] / 2**20:.2f} MiB",
        "",
    ]
    findings = result["findings"]
    if not findings:
        lines.append("no findings: nothing synced, recompiled, fell back or broke the graph")
    else:
        lines.append(f"findings, most costly first ({len(findings)}):")
    for i, f in enumerate(findings[:top], 1):
        where = f" {f['where']}" if f.get("where") else ""
        cost = f" ~{_fmt_s(f['cost_s'])}" if f["cost_s"] > 0 else ""
        lines.append(f"{i:3d}. [{f['kind']}]{where}{cost}: {f['title']}")
        if f.get("source"):
            lines.append(f"       | {f['source']}")
        lines.append(f"       -> {f['suggestion']}")
    if len(findings) > top:
        lines.append(f"  ... {len(findings) - top} more (--json FILE has them all)")
    return "\n".join(lines) + "\n"


class _CallableModule(types.ModuleType):
    """``torch_tpu.diagnose.report`` is this module once imported (the import system binds a
    package's submodule over the lazy attribute of the same name), so the module calls
    :func:`report`: ``torch_tpu.diagnose.report()`` works before and after."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return report(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
