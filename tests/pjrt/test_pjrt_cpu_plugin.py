"""The PJRT runtime end to end on a real PJRT plugin without an accelerator: XLA's CPU plugin
(`pjrt_c_api_cpu_plugin.so` from the lammps-jax-pjrt-cpu package, a dev dependency).

The runtime is chosen once per process at import, so the runtime tests
(test_pjrt_runtime.py) run in a child pytest with TORCH_TPU_RUNTIME=pjrt and the plugin path;
this test fails with the child's output when any of them fails or is skipped."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from pjrt_cpu_plugin import cpu_plugin_path

HERE = pathlib.Path(__file__).resolve().parent


def run_on_cpu_plugin(*pytest_args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Runs pytest in a child process whose torch_tpu uses the PJRT runtime on the CPU plugin."""
    plugin = cpu_plugin_path()
    if plugin is None:
        pytest.skip("XLA's CPU PJRT plugin is not installed: pip install lammps-jax-pjrt-cpu (requirements-dev.txt)")
    env = dict(os.environ, TORCH_TPU_RUNTIME="pjrt", TORCH_TPU_PJRT_PLUGIN=str(plugin))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *pytest_args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=HERE.parent.parent)


def test_runtime_tests_pass_on_the_xla_cpu_plugin() -> None:
    proc = run_on_cpu_plugin(str(HERE / "test_pjrt_runtime.py"))
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " skipped" not in proc.stdout.splitlines()[-1], tail  # every runtime test must run
