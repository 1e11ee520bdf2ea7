"""Counters of the torch.compile backend, reported by ``torch_tpu.compile.stats()`` and in
``torch_tpu.metrics()["compile"]``."""

from __future__ import annotations

import sys
import warnings
from dataclasses import asdict, dataclass, field


@dataclass
class CompileStats:
    """What the tpu Dynamo backend did in this process."""

    graphs_seen: int = 0        # FX graphs Dynamo handed to the backend
    graphs_compiled: int = 0    # forward/backward/inference graphs lowered and compiled as one program
    graphs_reused: int = 0      # graphs whose program was found in the backend's memory cache
    graphs_loaded: int = 0      # graphs whose program came from the disk tier (no lowering)
    specializations: int = 0    # programs compiled for graphs with symbolic shapes, per concrete signature
    graph_templates: int = 0    # dynamic-shape graphs whose lowering was learned across sizes (graph_templates.py)
    graph_instances: int = 0    # specializations written from a learned graph instead of lowered
    graph_buckets: int = 0      # padded programs built for a bucket of sizes (padded_buckets.py)
    bucket_rejections: int = 0  # buckets a graph could not run padded at (it keeps exact sizes)
    shape_limit_hits: int = 0   # calls of a dynamic graph beyond TORCH_TPU_COMPILE_MAX_SHAPES (run eagerly)
    recompiles: int = 0         # Dynamo re-captures of an already compiled frame (a guard failed)
    recompile_reasons: dict[str, int] = field(default_factory=dict)  # first failed guard -> count
    fallbacks: int = 0          # graphs run with eager ops because a node could not be lowered
    fallback_ops: dict[str, int] = field(default_factory=dict)  # op -> graphs that fell back because of it


_STATS = CompileStats()
_WARNED: set[str] = set()
_REASON_CHARS = 300  # a guard failure can quote a whole tensor repr


def counters() -> CompileStats:
    """The live counters (mutated by the backend)."""
    return _STATS


def record_fallback(op: str, reason: str) -> None:
    """Counts a graph that runs eagerly; warns once per op."""
    _STATS.fallbacks += 1
    _STATS.fallback_ops[op] = _STATS.fallback_ops.get(op, 0) + 1
    if op not in _WARNED:
        _WARNED.add(op)
        warnings.warn(f"torch_tpu.compile: graph runs with eager ops: cannot lower {reason}", stacklevel=2)


def record_recompile(where: str, reason: str, source: str | None = None) -> None:
    """Counts a recompile and warns (Python's warning filter shows each message once); also
    recorded by the recompile explainer (recompiles.py) with the user's source line."""
    from . import recompiles

    reason = reason[:_REASON_CHARS]
    recompiles.record(where, reason, source)
    _STATS.recompiles += 1
    _STATS.recompile_reasons[reason] = _STATS.recompile_reasons.get(reason, 0) + 1
    warnings.warn(f"torch_tpu.compile: recompiling {where}: {reason} (recompiles so far: {_STATS.recompiles}; "
                  "see torch_tpu.metrics()['compile'])", stacklevel=2)


def stats() -> dict:
    """The backend's counters plus Dynamo's graph-break count (0 when Dynamo never ran)."""
    d = asdict(_STATS)
    d["graph_breaks"] = 0
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters as dynamo_counters

        d["graph_breaks"] = sum(dynamo_counters["graph_break"].values())
    return d


def reset_stats() -> None:
    """Zeroes the counters (Dynamo's own counters are left alone)."""
    for k, v in asdict(CompileStats()).items():
        setattr(_STATS, k, v)
