"""torch.compile(backend="tpu"): Dynamo FX graphs lowered whole through the lowering table.

``backend.py`` (the Dynamo backend, AOTAutograd, eager fallback), ``lower_graph.py`` (FX
graph -> one IR graph), ``stats.py`` (counters), ``registration.py`` (the backend name).
Importing this package does not import Dynamo.
"""

from __future__ import annotations

from .registration import install as _install
from .stats import reset_stats, stats

_install()

__all__ = ["stats", "reset_stats"]
