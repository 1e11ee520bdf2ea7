"""Registers the "tpu" Dynamo backend and device interface without importing torch._dynamo.

Importing Dynamo takes seconds, so ``import torch_tpu`` must not do it. For each Dynamo
module we extend (the backend registry, the device-interface table), the registration runs
at once when the module is already loaded; otherwise a one-shot import hook runs it right
after the module executes (``torch.compile`` imports both). An installed package also
declares the ``torch_dynamo_backends`` entry point (pyproject.toml); when Dynamo found that
entry point, it loads the backend itself and the registry is left alone.
``torch.compile`` without a backend is routed here by ``default_route.py`` (no Dynamo needed).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable

from . import default_route

_REGISTRY = "torch._dynamo.backends.registry"
_DEVICE_INTERFACE = "torch._dynamo.device_interface"
NAME = "tpu"


def _register_backend(registry) -> None:
    if NAME in registry._BACKENDS or NAME in registry._COMPILER_FNS:
        return  # the entry point (or an earlier registration) provides it

    def tpu(gm, example_inputs, **kwargs):  # imported lazily: Dynamo is loaded by now
        from .backend import tpu_backend

        return tpu_backend(gm, example_inputs, **kwargs)

    registry.register_backend(compiler_fn=tpu, name=NAME)


def _register_device_interface(module) -> None:
    from .device_interface import is_ours, make_interface

    if is_ours(module.device_interfaces.get(NAME)):
        return
    # Dynamo fills its table lazily, and torch >= 2.13 puts a placeholder "tpu" interface for
    # Inductor's Pallas path there (current device always 0, no streams): fill it first, then
    # replace that entry with ours, which answers for the real device.
    if not getattr(module, "_device_initialized", True):
        module.init_device_reg()
    module.register_interface_for_device(NAME, make_interface())


_ACTIONS: dict[str, Callable] = {_REGISTRY: _register_backend, _DEVICE_INTERFACE: _register_device_interface}


class _Hook(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps a watched module's loader to register after it runs."""

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

        def exec_and_register(module) -> None:
            exec_module(module)
            action(module)

        spec.loader.exec_module = exec_and_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Makes ``torch.compile(backend="tpu")`` and ``torch.compile(model)`` on tpu available."""
    default_route.install()
    for name, action in _ACTIONS.items():
        if name in sys.modules:
            action(sys.modules[name])
    if any(name not in sys.modules for name in _ACTIONS) and not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
