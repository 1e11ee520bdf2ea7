"""Where XLA's CPU PJRT plugin is installed (the lammps-jax-pjrt-cpu package, a dev dependency):
a real PJRT C API plugin that runs on any machine, so the PJRT runtime is tested without an
accelerator."""

from __future__ import annotations

import importlib.util
import pathlib


def cpu_plugin_path() -> pathlib.Path | None:
    """The installed XLA CPU PJRT plugin, or None."""
    spec = importlib.util.find_spec("lammps_jax_pjrt_cpu")
    if spec is None or spec.origin is None:
        return None
    path = pathlib.Path(spec.origin).parent / "pjrt_c_api_cpu_plugin.so"
    return path if path.is_file() else None
