"""Diagnostics and switches: metrics, CPU fallback, synchronization."""

from __future__ import annotations

from typing import Any

from . import _C


def metrics() -> dict[str, Any]:
    """Counters since start (or reset_metrics): ops dispatched, programs compiled and executed,
    program-cache hits/misses, compile time, bytes moved host<->device, host syncs, and CPU
    fallbacks by op. Fused mode adds ``fused``: flushes (total and by cause, with the source
    lines whose host reads flushed most), ops recorded and fused, graphs compiled and cache
    hits, kernels launched, stores skipped and bytes never materialized, graph compile time;
    ``peak_memory_allocated`` is the allocator's peak for device 0; ``compile`` is
    ``torch_tpu.compile.stats()`` (graphs compiled, reused and loaded from disk, recompiles by
    reason, shape specializations, graph breaks, fallbacks); ``host_scratch`` is the host
    runtime's cache of program intermediates (bytes live and cached, requests served from the
    cache and from new memory; TORCH_TPU_HOST_SCRATCH_CACHE); ``host_threads`` counts kernels
    the host runtime split across threads and the work items (program steps, kernel parts) that
    threads blocked in a wait ran for a stream's worker (TORCH_TPU_HOST_HELP_SPIN_US);
    ``native_kernels`` is the host runtime's native tier for fused clusters (kernels requested,
    loaded and failed, background compiler seconds, the last failure;
    TORCH_TPU_NATIVE_KERNELS); ``recompiles`` is the recompile explainer
    (torch_tpu/compile/recompiles.py): every recompilation of an eager per-op program or a
    compiled graph, with its reason (which size, dtype or stride changed; the failed guard) and
    the user's source line (TORCH_TPU_LOG=recompiles prints each); ``shape_templates`` counts
    per-op misses served without re-running the lowering (torch_tpu/lowering/shape_templates.py)."""
    from .compile import recompiles
    from .compile import stats as compile_stats
    from .lowering import shape_templates

    out = _C._metrics()
    out["fused"] = _C._fused_metrics()
    out["peak_memory_allocated"] = _C._memory_stats(0).get("allocated_bytes.all.peak", 0)
    out["compile"] = compile_stats()
    out["host_scratch"] = _C._host_scratch_stats()
    out["host_threads"] = _C._host_thread_stats()
    out["native_kernels"] = _C._native_kernel_stats()
    out["recompiles"] = recompiles.summary()
    out["shape_templates"] = shape_templates.stats()
    return out


def wait_native_kernels(timeout: float = 120.0) -> bool:
    """Wait until every native kernel fused clusters have asked for so far is compiled and
    loaded, or has failed (TORCH_TPU_NATIVE_KERNELS: hot clusters are compiled to C++ on a
    background thread). True if none is still compiling. For benchmarks and tests that want the
    steady state: runs never wait for a kernel themselves."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        s = _C._native_kernel_stats()
        if s["loaded"] + s["failed"] >= s["requested"]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def reset_metrics() -> None:
    from .compile import recompiles
    from .compile import reset_stats as reset_compile_stats
    from .lowering import shape_templates

    _C._reset_metrics()
    _C._reset_fused_metrics()
    reset_compile_stats()
    recompiles.reset()
    shape_templates.reset_stats()


def set_debug_fusion(enabled: bool = True) -> None:
    """Print every fused graph when it is compiled (its ops, with source lines, and the runtime's
    fused clusters) and one line per flush, to stderr. Same as TORCH_TPU_DEBUG_FUSION=1."""
    _C._set_debug_fusion(bool(enabled))


def set_fallback(mode: str | None) -> None:
    """'cpu' runs ops without a lowering on the CPU (warns once per op, counts each call);
    None or 'none' raises NotImplementedError for them (the default)."""
    if mode not in (None, "none", "cpu"):
        raise ValueError(f"fallback must be 'cpu' or None, got {mode!r}")
    _C._set_fallback(mode == "cpu")


def fallback_enabled() -> bool:
    return _C._get_fallback()


def sync(device: int | None = None) -> None:
    """Wait for all queued work (of one device, or of all devices)."""
    _C._synchronize(-1 if device is None else device)


def cache_stats() -> dict[str, Any]:
    """Statistics of the program cache's disk tier (docs/notes/program-cache.md).

    Keys: ``enabled`` (False when TORCH_TPU_CACHE_DIR is ``off`` or the directory was refused),
    ``directory`` (the versioned entry directory), ``hits``, ``misses``, ``writes``, ``corrupt``
    (entries found damaged, deleted and recompiled), ``evictions`` (entries deleted to stay under
    TORCH_TPU_CACHE_MAX_BYTES), ``bytes`` (entries on disk, estimated between scans) and
    ``max_bytes``. The in-memory tier's counters are in :func:`metrics`.
    """
    return _C._disk_cache_stats()
