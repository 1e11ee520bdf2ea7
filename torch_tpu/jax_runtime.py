"""The engine of TORCH_TPU_RUNTIME=jax: StableHLO modules compiled and run on JAX's CPU backend.

A development and test runtime (csrc/runtime/jax/jax_runtime.h has the design): the C++ runtime
emits every program as StableHLO text and calls this module to compile it and to run it, so
strict, fused and compiled modes all exercise the StableHLO path without an accelerator.
``import torch_tpu`` imports this module (and jax) only when the jax runtime is selected; jax
stays an optional dependency (``pip install "jax[cpu]"``).

The recipe is the one a PJRT runtime follows: parse the text in an MLIR context with the
StableHLO/CHLO dialects (``jax._src.interpreters.mlir.make_ir_context``), compile it for one CPU
device (``backend.compile_and_load``), and execute it on device buffers. Importing this module
enables JAX's 64-bit mode, since the IR has i64/f64 values.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

try:
    import jax
    import ml_dtypes
    import numpy as np
    from jax._src import compiler, xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
except ImportError as e:  # pragma: no cover - exercised only without jax
    raise ImportError(f"TORCH_TPU_RUNTIME=jax needs jax with its CPU backend (pip install \"jax[cpu]\"): {e}") from e

import torch

from . import _C

jax.config.update("jax_enable_x64", True)

# Distinct module texts compiled at most once per process: different program-cache keys (ops,
# argument kinds) often lower to the same module.
_CACHE_SIZE = 4096


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


class Engine:
    """Compiles StableHLO text and runs the result on JAX's first CPU device (the interface
    csrc/runtime/jax/jax_runtime.h calls, always with the GIL held)."""

    def __init__(self) -> None:
        self._backend = xla_bridge.get_backend("cpu")
        self._device = self._backend.devices()[0]
        self._devices = xc.DeviceList((self._device,))
        self._options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"compiles": 0, "compile_cache_hits": 0, "compile_seconds": 0.0, "executions": 0}

    def compile(self, text: str) -> Any:
        """The loaded executable of a StableHLO module (MLIR text)."""
        with self._lock:
            exe = self._cache.get(text)
            if exe is not None:
                self._cache.move_to_end(text)
                self.stats["compile_cache_hits"] += 1
                return exe
        t0 = time.perf_counter()
        with mlir.make_ir_context():
            module = ir.Module.parse(text)
            exe = self._backend.compile_and_load(module, executable_devices=self._devices,
                                                 compile_options=self._options)
        with self._lock:
            self.stats["compiles"] += 1
            self.stats["compile_seconds"] += time.perf_counter() - t0
            self._cache[text] = exe
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return exe

    def execute(self, exe: Any, args: list[torch.Tensor]) -> list[torch.Tensor]:
        """Runs `exe` on dense CPU tensors (one per module argument); returns its results as
        CPU tensors that own their memory."""
        buffers = [jax.device_put(_to_numpy(t), self._device) for t in args]
        outs = exe.execute(buffers)
        self.stats["executions"] += 1
        return [_from_numpy(np.array(o)) for o in outs]  # a writable copy: torch.from_numpy warns on read-only views


_ENGINE: Engine | None = None


def install() -> Engine:
    """Creates the engine (once) and hands it to the C++ runtime."""
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = Engine()
        _C._set_jax_engine(_ENGINE)
    return _ENGINE


def stats() -> dict[str, Any]:
    """Modules compiled (and compile seconds), compile-cache hits and executions so far."""
    return dict(_ENGINE.stats) if _ENGINE is not None else {}
