"""torch.compile(backend="tpu"): Dynamo FX graphs lowered whole through the lowering table.

``backend.py`` (the Dynamo backend, AOTAutograd, eager fallback), ``lower_graph.py`` (FX
graph -> one IR graph), ``stats.py`` (counters, also in ``torch_tpu.metrics()["compile"]``), ``registration.py`` (the
backend name and Dynamo's device interface), ``default_route.py`` (``torch.compile(model)``
without a backend), ``graph_templates.py`` (dynamic-shape graphs learned across sizes) and
``padded_buckets.py`` (one padded program per bucket of sizes).
Importing this package does not import Dynamo.
"""

from __future__ import annotations

from .backend import max_shapes, set_max_shapes
from .padded_buckets import buckets, set_buckets
from .registration import install as _install
from .stats import reset_stats, stats

_install()

__all__ = ["stats", "reset_stats", "max_shapes", "set_max_shapes", "buckets", "set_buckets"]
