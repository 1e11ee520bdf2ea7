"""The TORCH_TPU_* environment variables (one registry, kept in csrc/common/config.cpp)."""

from __future__ import annotations

import os

from . import _C


def env_vars() -> list[tuple[str, str, str]]:
    """(name, default, description) of every environment variable torch_tpu reads."""
    return [tuple(v) for v in _C._env_registry()]


def get(name: str) -> str:
    """The value of a registered TORCH_TPU_* variable (its registered default when unset)."""
    for var, default, _ in _C._env_registry():
        if var == name:
            return os.environ.get(name, default)
    raise KeyError(f"torch_tpu: unregistered environment variable {name}")


def get_bool(name: str) -> bool:
    """A registered boolean variable, read with the C++ registry's rule (csrc/common/config.cpp
    get_bool): true for 1, true, TRUE, True or yes; anything else is false."""
    return get(name) in ("1", "true", "TRUE", "True", "yes")
