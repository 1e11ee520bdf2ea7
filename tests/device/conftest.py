"""Shared helpers for the device conformance suite (modelled on PyTorch's OpenReg tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu


def run_py(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with extra environment variables (device count, memory
    capacity and launch mode are fixed per process). Raises with the child's output on failure."""
    full_env = dict(os.environ)
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"child failed (rc={proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


@pytest.fixture
def subprocess_py():
    return run_py


@pytest.fixture(autouse=True)
def _clean_state():
    """Each test starts and ends in strict mode, without CPU fallback, on device 0, with all
    queued work finished (so an asynchronous error cannot leak into the next test)."""
    torch_tpu.set_mode("strict")
    torch_tpu.set_fallback(None)
    torch.tpu.set_device(0)
    yield
    try:
        torch.tpu.synchronize()
    finally:
        torch_tpu.set_mode("strict")
        torch_tpu.set_fallback(None)
        torch.tpu.set_device(0)
