"""The recompile explainer: every recompilation, counted with its reason and source line.

Two sources feed ``torch_tpu.metrics()["recompiles"]`` (:func:`summary`):
  - eager modes: a per-op program compiled again because an op already compiled meets new
    input sizes, dtypes or strides (explained in C++ on the cache's miss path only,
    csrc/exec/recompiles.h; a hit costs nothing);
  - compiled mode: Dynamo re-capturing a frame (its failed guard) and a dynamic-shape graph
    specialized for a new input signature (the shapes), recorded here by ``stats.py``.
``TORCH_TPU_LOG=recompiles`` prints each as it happens (stderr); past
``TORCH_TPU_RECOMPILE_WARN`` recompilations of one kind a warning says so once.
"""

from __future__ import annotations

import sys
import warnings
from collections import deque
from typing import Any

from .. import _C

_RECENT = 64
_recent: deque[dict[str, Any]] = deque(maxlen=_RECENT)
_count = 0
_warned = False


def log_enabled() -> bool:
    """Whether TORCH_TPU_LOG includes ``recompiles`` (or set_recompile_log(True) was called)."""
    return bool(_C._recompile_log())


def set_recompile_log(enabled: bool = True) -> None:
    """Print every recompilation to stderr as it happens (same as TORCH_TPU_LOG=recompiles)."""
    _C._set_recompile_log(bool(enabled))


def set_recompile_warn(count: int) -> None:
    """Warn once past this many recompilations of one kind (TORCH_TPU_RECOMPILE_WARN); 0: never."""
    global _warned
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"recompile warn count must be a non-negative int, got {count!r}")
    _C._set_recompile_warn(count)
    _warned = False


def record(what: str, reason: str, source: str | None) -> None:
    """Records one compiled-mode recompilation (called by stats.record_recompile)."""
    global _count, _warned
    _count += 1
    _recent.append({"kind": "compiled", "what": what, "reason": reason, "source": source})
    if log_enabled():
        at = f" at {source}" if source else ""
        print(f"[torch_tpu recompile] compiled {what}: {reason}{at}", file=sys.stderr, flush=True)
    limit = int(_C._recompile_warn())
    if limit > 0 and _count > limit and not _warned:
        _warned = True
        warnings.warn(f"torch_tpu: {_count} torch.compile recompilations (TORCH_TPU_RECOMPILE_WARN={limit}); "
                      f"the latest: {what}: {reason}. torch_tpu.metrics()['recompiles'] lists them.", stacklevel=3)


def summary() -> dict[str, Any]:
    """``{"count", "eager", "compiled", "by_op", "recent"}``: the total, per kind, eager
    recompiles per op, and the latest events (kind, what, reason, source line), oldest first."""
    eager = _C._eager_recompiles()
    recent = list(eager["recent"]) + list(_recent)
    return {"count": eager["count"] + _count, "eager": eager["count"], "compiled": _count,
            "by_op": dict(eager["by_op"]), "recent": recent[-_RECENT:]}


def reset() -> None:
    """Zeroes both kinds' counts and events."""
    global _count, _warned
    _C._reset_eager_recompiles()
    _recent.clear()
    _count = 0
    _warned = False
