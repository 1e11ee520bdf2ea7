"""Turns a profiling session's records into ranked findings with concrete suggestions.

Each finding is a dict: ``kind`` (host-sync, recompile, cpu-fallback, graph-break, dispatch,
compile-time, memory), ``where`` ("file:line" or ""), ``title``, ``suggestion``, ``count`` and
``cost_s``: the estimated seconds it cost, which ranks the findings (measured where the records
measure it: host waits, compile times, device idle time; estimated otherwise, as noted).
"""

from __future__ import annotations

import ast
import functools
import linecache
import re
from typing import Any

from .profiler_session import SessionData

# Estimates where no time is measured (seconds): a CPU fallback round trip, a graph break (one
# extra graph launch and a Python resume frame).
_FALLBACK_COST_S = 5e-4
_GRAPH_BREAK_COST_S = 2e-4
_HOST_SYNC_OVERHEAD_S = 2e-5  # per sync beyond the wait itself: the queue drains, fusion stops


def _split(where: str) -> tuple[str, int]:
    file, _, line = where.rpartition(":")
    try:
        return file, int(line)
    except ValueError:
        return where, 0


def source_text(where: str) -> str:
    """The stripped source line at "file:line", or ""."""
    file, line = _split(where)
    return linecache.getline(file, line).strip() if line else ""


@functools.lru_cache(maxsize=64)
def _loop_lines(file: str) -> frozenset[int]:
    """Lines of `file` that sit inside a for/while loop body."""
    try:
        with open(file, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            for stmt in node.body + node.orelse:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return frozenset(lines)


def in_loop(where: str) -> bool:
    file, line = _split(where)
    return line in _loop_lines(file)


def _sync_suggestion(where: str, op: str, text: str, count: int) -> str:
    loop = in_loop(where) or count > 1
    place = f"at {where}"
    if ".item()" in text or "_local_scalar_dense" in op and re.search(r"\b(float|int|bool)\(", text):
        call = ".item()" if ".item()" in text else "the Python number conversion"
        if loop:
            return (f"move `{call}` out of the loop {place}: accumulate on the device "
                    "(e.g. `total += loss.detach()`) and read the value once after the loop, or every N steps")
        return f"`{call}` {place} waits for the device: read it less often, or only when needed"
    data_dependent = r"\b(nonzero|masked_select|unique|bincount|repeat_interleave|where)\("
    if re.search(data_dependent, text) and "_local_scalar" in op:
        return (f"the op {place} has a data-dependent output size, which needs the values on the host: use a "
                "fixed-size form (a mask with torch.where, or pass size=/output_size=)")
    if re.search(r"\bif\b|\bwhile\b|\bassert\b", text):
        return (f"the condition {place} reads a device value on the host: compute it on the device "
                "(torch.where) or check it every N steps")
    what = ".cpu()" if ".cpu()" in text else ".tolist()" if ".tolist()" in text else "print" if "print(" in text \
        else "the host read"
    if loop:
        return (f"move `{what}` out of the loop {place}: keep the values on the device and copy them "
                "once after the loop (or every N steps)")
    return f"`{what}` {place} waits for the device queue: copy less often"


def _recompile_suggestion(reason: str, where: str) -> str:
    m = re.search(r"tensor '([^']+)' size mismatch at index (\d+)", reason)
    if m:
        name, dim = m.group(1), m.group(2)
        short = re.sub(r"^L\['(.+?)'\]$", r"\1", name)
        return (f"mark dim {dim} dynamic: `torch._dynamo.mark_dynamic({short}, {dim})` before the call at "
                f"{where}, or `torch.compile(..., dynamic=True)`; or pad that dim to a few fixed sizes")
    m = re.search(r"(?:stride|dtype|device|requires_grad) mismatch", reason)
    if m:
        return f"keep the input's {m.group(0).split()[0]} the same on every call at {where}"
    if "==" in reason or "!=" in reason or "___check_obj_id" in reason:
        return (f"a Python value the compiled function reads changed at {where}: pass it as a tensor, or keep it "
                "constant across calls")
    return f"keep the inputs at {where} the same across calls (see the guard above)"


def _graph_break_suggestion(reason: str, where: str) -> str:
    low = reason.lower()
    if "print" in low or "logging" in low:
        return f"remove the print/log at {where} from the compiled function (or log outside it)"
    if "item" in low or "data-dependent" in low or "tensor.item" in low or "scalar" in low:
        return (f"the value read at {where} leaves the graph: keep it a tensor, or set "
                "`torch._dynamo.config.capture_scalar_outputs = True`")
    return f"move the unsupported call at {where} out of the compiled function (or make it traceable)"


def build_findings(d: SessionData) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Returns (findings ranked by cost, summary)."""
    findings: list[dict[str, Any]] = []
    wall_s = max(1e-9, (d.end_ns - d.start_ns) / 1e9)

    fallback_lines = {f[0] for f in d.fallbacks}
    for line, op, count, wait_ns in d.host_syncs:
        text = source_text(line)
        suggestion = _sync_suggestion(line, op, text, int(count))
        if line in fallback_lines and "copy_" in op:
            suggestion = f"the CPU fallback at {line} copies its inputs to the host: removing the fallback removes this"
        findings.append({
            "kind": "host-sync", "where": line, "op": op, "count": int(count), "source": text,
            "wait_s": wait_ns / 1e9, "cost_s": wait_ns / 1e9 + count * _HOST_SYNC_OVERHEAD_S,
            "title": f"{count} host sync(s) forced by {op}" + (f": `{text}`" if text else ""),
            "suggestion": suggestion,
        })
    for r in d.recompiles:
        findings.append({
            "kind": "recompile", "where": r.line, "count": 1, "reason": r.reason, "compile_id": r.compile_id,
            "source": source_text(r.line), "cost_s": r.seconds,
            "title": f"recompile ({r.seconds:.2f} s): {r.reason}",
            "suggestion": _recompile_suggestion(r.reason, r.line),
        })
    for line, op, count, _ in d.fallbacks:
        findings.append({
            "kind": "cpu-fallback", "where": line, "op": op, "count": int(count), "source": source_text(line),
            "cost_s": count * _FALLBACK_COST_S,  # estimate: not timed
            "title": f"{op} ran on the CPU {count} time(s) (no tpu lowering; inputs copied to the host and back)",
            "suggestion": (f"replace `{op}` at {line} with ops that have tpu lowerings, or report the missing "
                           "lowering; without TORCH_TPU_FALLBACK=cpu it raises NotImplementedError"),
        })
    for b in d.graph_breaks:
        findings.append({
            "kind": "graph-break", "where": b.line, "count": b.count, "reason": b.reason,
            "source": source_text(b.line), "cost_s": b.count * _GRAPH_BREAK_COST_S,  # estimate
            "title": f"graph break: {b.reason}",
            "suggestion": _graph_break_suggestion(b.reason, b.line),
        })

    # Device time: the union of program intervals (programs of one stream do not overlap).
    busy_ns = 0
    last_end = 0
    run_programs = 0
    for ev in sorted(d.device_events, key=lambda e: e[3]):
        start, end = ev[3], ev[4]
        run_programs += 1
        if end <= last_end:
            continue
        busy_ns += end - max(start, last_end)
        last_end = end
    busy_s = busy_ns / 1e9
    idle_s = max(0.0, wall_s - busy_s)
    before, after = d.metrics_before, d.metrics_after
    compile_s = ((after.get("compile_seconds", 0) - before.get("compile_seconds", 0))
                 + (after["fused"]["graph_compile_seconds"] - before["fused"]["graph_compile_seconds"])
                 + d.dynamo_compile_seconds) if after else d.dynamo_compile_seconds
    summary = {
        "wall_s": wall_s, "device_busy_s": busy_s, "device_idle_s": idle_s, "device_idle_fraction": idle_s / wall_s,
        "programs_run": run_programs, "compile_s": compile_s,
        "host_syncs": sum(int(s[2]) for s in d.host_syncs),
        "host_sync_wait_s": sum(s[3] for s in d.host_syncs) / 1e9,
        "recompiles": len(d.recompiles), "graph_breaks": sum(b.count for b in d.graph_breaks),
        "cpu_fallbacks": sum(int(f[2]) for f in d.fallbacks), "peak_memory_allocated": d.peak_memory_allocated,
        "mode": _mode(),
    }
    dispatch_s = idle_s - summary["host_sync_wait_s"] - compile_s
    if summary["mode"] == "strict" and run_programs > 100 and dispatch_s / wall_s > 0.25:
        share = 100 * dispatch_s / wall_s
        findings.append({
            "kind": "dispatch", "where": "", "count": run_programs, "cost_s": dispatch_s * 0.5,  # half: a guess
            "title": f"the device was idle {share:.0f}% of the time waiting for the host to dispatch "
                     f"{run_programs} per-op programs",
            "suggestion": f"use fused mode: {share:.0f}% of the time is dispatch (TORCH_TPU_MODE=fused or "
                          "torch_tpu.set_mode('fused')), or torch.compile(model, backend='tpu')",
        })
    if compile_s > 0.2 * wall_s and compile_s > 0.5:
        findings.append({
            "kind": "compile-time", "where": "", "count": 1, "cost_s": compile_s,
            "title": f"compiling took {compile_s:.2f} s of {wall_s:.2f} s (device run time {busy_s:.2f} s)",
            "suggestion": "keep shapes stable so programs are reused; the disk cache (TORCH_TPU_CACHE_DIR) "
                          "keeps them across runs; for short runs this is a one-time cost",
        })
    findings.extend(_memory_findings(d))
    findings.sort(key=lambda f: -f["cost_s"])
    return findings, summary


def _mode() -> str:
    try:
        import torch_tpu

        return str(torch_tpu.get_mode())
    except Exception:  # an older package without get_mode
        return "unknown"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


_WHERE_ALLOCATED = {"": "allocated in library code",
                    "-": "allocated without a Python stack (backward, on the autograd thread)"}


def _at_peak(trace: list[tuple], device: int = 0) -> tuple[int, dict[str, list[int]]]:
    """Replays the allocator trace: (peak bytes, live bytes and tensors by allocation site at the
    peak). Blocks allocated before the session are not in the trace, so the peak is the session's
    growth above what was live when it started."""
    live: dict[int, tuple[int, str]] = {}
    total = peak = peak_index = 0
    for i, (action, addr, size, dev, site) in enumerate(trace):
        if dev != device:
            continue
        if action == "alloc":
            live[addr] = (size, site)
            total += size
            if total > peak:
                peak, peak_index = total, i + 1
        elif addr in live:
            total -= live.pop(addr)[0]
    live.clear()
    for action, addr, size, dev, site in trace[:peak_index]:
        if dev != device:
            continue
        if action == "alloc":
            live[addr] = (size, site)
        else:
            live.pop(addr, None)
    by_site: dict[str, list[int]] = {}
    for size, site in live.values():
        acc = by_site.setdefault(site, [0, 0])
        acc[0] += size
        acc[1] += 1
    return peak, by_site


def _memory_findings(d: SessionData, top: int = 3) -> list[dict[str, Any]]:
    peak, by_site = _at_peak(d.memory_trace)
    out = []
    for site, (nbytes, n) in sorted(by_site.items(), key=lambda kv: -kv[1][0])[:top]:
        out.append({
            "kind": "memory", "where": site if ":" in site else "", "count": n, "bytes": nbytes, "cost_s": 0.0,
            "source": source_text(site),
            "title": f"{_fmt_bytes(nbytes)} in {n} tensor(s) " + _WHERE_ALLOCATED.get(site, f"allocated at {site}")
                     + ", live at the peak",
            "suggestion": f"one of the largest memory users at the session's peak ({_fmt_bytes(peak)} allocated "
                          f"during the session; device peak {_fmt_bytes(d.peak_memory_allocated)}); "
                          "torch.tpu.memory._snapshot() has every block and stack",
        })
    return out
