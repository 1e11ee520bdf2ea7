"""Lowering tests need only the pure-Python lowering package, not the device layer.

torch_tpu/__init__.py (device registration) may not import yet (it needs the C++ extension), so
when it fails the package is replaced by a bare shell whose submodules (ir, lowering) import
normally.
"""

import os
import sys
import types

# An installed torch_tpu registers a torch.backends entry point that torch imports on startup;
# while the device extension cannot load, that would break `import torch` itself.
# Only around this import: the variable must not leak into the rest of the session, whose
# subprocesses (torchrun workers written with no tpu-specific import) rely on the autoload.
_autoload = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
try:
    import torch_tpu  # noqa: F401
except Exception:
    for _name in [m for m in sys.modules if m == "torch_tpu" or m.startswith("torch_tpu.")]:
        del sys.modules[_name]
    _pkg = types.ModuleType("torch_tpu")
    _pkg.__path__ = [os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "torch_tpu"))]
    sys.modules.setdefault("torch_tpu", _pkg)
finally:
    if _autoload is None:
        del os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"]
    else:
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = _autoload
