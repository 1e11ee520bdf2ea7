"""Helpers of the vLLM plugin tests and bench: run vLLM in child processes on this checkout.

(A module of its own, not conftest.py: tests/conftest.py would shadow an import of it.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NEEDS_VLLM = "needs vLLM: run with `make test-vllm` (.venv-vllm)"

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a vLLM child process: this checkout's torch_tpu and plugin first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("VLLM_TARGET_DEVICE", None)
    env.update(extra)
    return env


def offline_run(model: Path, platform: str, *args: str, timeout: int = 900,
                env: dict[str, str] | None = None) -> dict:
    """Run offline_run.py in a child process (`env`: extra environment variables); its JSON
    result."""
    cmd = [sys.executable, str(HERE / "offline_run.py"), str(model), "--platform", platform, *args]
    proc = subprocess.run(cmd, env=child_env(**(env or {})), capture_output=True, text=True,
                          timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"{platform} run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])
