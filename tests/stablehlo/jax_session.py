"""Running code in a child process that uses TORCH_TPU_RUNTIME=jax (the runtime is chosen once
per process, and this test session itself runs on the host runtime)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def jax_env(**extra: str) -> dict[str, str]:
    """The environment of a child on the JAX runtime: this checkout first on the path."""
    env = {**os.environ, "TORCH_TPU_RUNTIME": "jax", **extra}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


def run_python(args: list[str], timeout: float, **extra: str) -> subprocess.CompletedProcess:
    """`python ARGS` on the JAX runtime; output captured as text."""
    return subprocess.run([sys.executable, *args], env=jax_env(**extra), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)
