"""Integration points: libraries that discover devices from a fixed list of names
(accelerate.py, flex_attention.py) and PyTorch custom ops whose only implementation needs a
dtype tpu lacks (varlen.py).

Each library module we extend is patched right after it executes (a one-shot import hook, as
``torch_tpu.compile.registration`` does for Dynamo), or at once when it is already imported, so
``import torch_tpu`` imports none of them. See docs/frameworks.md.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable

from . import accelerate as _accelerate
from . import flex_attention as _flex_attention
from . import varlen as _varlen

_ACTIONS: dict[str, Callable] = {**_accelerate.ACTIONS, **_flex_attention.ACTIONS, **_varlen.ACTIONS}


class _Hook(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps a watched module's loader to patch it after it runs."""

    def __init__(self) -> None:
        self.pending = {name for name in _ACTIONS if name not in sys.modules}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.pending:
            return None
        self.pending.discard(fullname)
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        action = _ACTIONS[fullname]

        def exec_and_patch(module) -> None:
            exec_module(module)
            action(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Patches the watched modules now if loaded, else when they are first imported."""
    for name, action in _ACTIONS.items():
        if name in sys.modules:
            action(sys.modules[name])
    if any(name not in sys.modules for name in _ACTIONS) and not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
