"""Diagnostics and switches: metrics, CPU fallback, synchronization."""

from __future__ import annotations

from typing import Any

from . import _C


def metrics() -> dict[str, Any]:
    """Counters since start (or reset_metrics): ops dispatched, programs compiled and executed,
    program-cache hits/misses, compile time, bytes moved host<->device, host syncs, and CPU
    fallbacks by op."""
    return _C._metrics()


def reset_metrics() -> None:
    _C._reset_metrics()


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
    """Statistics of the program cache's disk tier (docs/architecture.md, "Program cache").

    Keys: ``enabled`` (False when TORCH_TPU_CACHE_DIR is ``off`` or the directory was refused),
    ``directory`` (the versioned entry directory), ``hits``, ``misses``, ``writes``, ``corrupt``
    (entries found damaged, deleted and recompiled), ``evictions`` (entries deleted to stay under
    TORCH_TPU_CACHE_MAX_BYTES), ``bytes`` (entries on disk, estimated between scans) and
    ``max_bytes``. The in-memory tier's counters are in :func:`metrics`.
    """
    return _C._disk_cache_stats()
