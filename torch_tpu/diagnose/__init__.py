"""Diagnosis APIs behind ``python -m torch_tpu check|profile`` (docs/diagnostics.md).

* :func:`parity` (:mod:`torch_tpu.diagnose.parity`): run a model on CPU and on "tpu" module by
  module and name the first module, and the op inside it, whose outputs diverge.
* :func:`report` (:mod:`torch_tpu.diagnose.report`): a ranked report of what made the code run
  since it started slow (host syncs by source line, recompiles, CPU fallbacks, graph breaks);
  :func:`start`, :func:`stop` and :func:`profiling` bracket the code to profile.

Submodules load on first use, so ``import torch_tpu`` pays nothing for them.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"parity": "parity", "report": "report", "start": "report", "stop": "report", "profiling": "report"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        # Importing the submodule bound its name (the same as the function's) to the module on
        # this package; bind the function instead, so `from torch_tpu.diagnose import parity`
        # gets the function every time.
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
