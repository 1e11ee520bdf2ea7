"""Registers the "tpu" Dynamo backend without importing torch._dynamo at ``import torch_tpu``.

Importing Dynamo takes seconds, so ``import torch_tpu`` must not do it. When Dynamo is
already loaded the backend is registered at once; otherwise a one-shot import hook registers
it right after ``torch._dynamo.backends.registry`` executes (``torch.compile`` imports it).
An installed package also declares the ``torch_dynamo_backends`` entry point (pyproject.toml);
when Dynamo found that entry point, it loads the backend itself and nothing is registered here.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_REGISTRY = "torch._dynamo.backends.registry"
NAME = "tpu"


def _register(registry) -> None:
    if NAME in registry._BACKENDS or NAME in registry._COMPILER_FNS:
        return  # the entry point (or an earlier registration) provides it

    def tpu(gm, example_inputs, **kwargs):  # imported lazily: Dynamo is loaded by now
        from .backend import tpu_backend

        return tpu_backend(gm, example_inputs, **kwargs)

    registry.register_backend(compiler_fn=tpu, name=NAME)


class _Hook(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the registry module's loader to register after it runs."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module) -> None:
            exec_module(module)
            _register(module)

        spec.loader.exec_module = exec_and_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Makes ``torch.compile(backend="tpu")`` available."""
    if _REGISTRY in sys.modules:
        _register(sys.modules[_REGISTRY])
    elif not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
