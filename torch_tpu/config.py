"""The TORCH_TPU_* environment variables (one registry, kept in csrc/common/config.cpp)."""

from __future__ import annotations

from . import _C


def env_vars() -> list[tuple[str, str, str]]:
    """(name, default, description) of every environment variable torch_tpu reads."""
    return [tuple(v) for v in _C._env_registry()]
