"""The PJRT runtime end to end on a real PJRT plugin without an accelerator: XLA's CPU plugin
(`pjrt_c_api_cpu_plugin.so` from the lammps-jax-pjrt-cpu package, a dev dependency).

The runtime is chosen once per process at import, so the runtime tests (test_pjrt_runtime.py,
test_pjrt_resident.py, test_pjrt_async.py, test_pjrt_memory.py, test_pjrt_index_checks.py; with TORCH_TPU_TEST_FULL=1 also the float32 OpInfo sweep) run in a child
pytest with TORCH_TPU_RUNTIME=pjrt and the plugin path; each test fails with the child's output
when any of them fails or is skipped."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch
from pjrt_cpu_plugin import cpu_plugin_path

HERE = pathlib.Path(__file__).resolve().parent


def run_on_cpu_plugin(*pytest_args: str, timeout: float = 600, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """Runs pytest in a child process whose torch_tpu uses the PJRT runtime on the CPU plugin."""
    plugin = cpu_plugin_path()
    if plugin is None:
        pytest.skip("XLA's CPU PJRT plugin is not installed: pip install lammps-jax-pjrt-cpu (requirements-dev.txt)")
    env = dict(os.environ, TORCH_TPU_RUNTIME="pjrt", TORCH_TPU_PJRT_PLUGIN=str(plugin), **env_vars)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *pytest_args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=HERE.parent.parent)


def test_runtime_tests_pass_on_the_xla_cpu_plugin() -> None:
    proc = run_on_cpu_plugin(str(HERE / "test_pjrt_runtime.py"), str(HERE / "test_pjrt_resident.py"),
                             str(HERE / "test_pjrt_async.py"), str(HERE / "test_pjrt_memory.py"),
                             str(HERE / "test_pjrt_index_checks.py"))
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " skipped" not in proc.stdout.splitlines()[-1], tail  # every runtime test must run


def test_waiting_per_program_passes_on_the_xla_cpu_plugin() -> None:
    # TORCH_TPU_PJRT_ASYNC=0 waits for every program at its launch: the same values.
    proc = run_on_cpu_plugin(str(HERE / "test_pjrt_runtime.py"), "-k", "training or compiled",
                             TORCH_TPU_PJRT_ASYNC="0")
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail


def test_staged_transfers_pass_on_the_xla_cpu_plugin() -> None:
    # TORCH_TPU_PJRT_RESIDENT=0 stages every program through host memory: the same values.
    proc = run_on_cpu_plugin(str(HERE / "test_pjrt_resident.py"), str(HERE / "test_pjrt_index_checks.py"),
                             TORCH_TPU_PJRT_RESIDENT="0")
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " skipped" not in proc.stdout.splitlines()[-1], tail


# XLA's CPU plugin computes atan of arrays of 64 or more elements wrongly (chlo.atan and
# stablehlo.atan2 alike; JAX's own CPU backend gets them right): the one known plugin failure.
_PLUGIN_BUGS = {"atan"}


@pytest.mark.skipif(os.environ.get("TORCH_TPU_TEST_FULL") != "1",
                    reason="a 5-minute sweep on XLA's CPU plugin: make test-full runs it")
def test_opinfo_float32_forward_on_the_xla_cpu_plugin() -> None:
    # Every float32 OpInfo forward check that passes on the host runtime must pass through
    # StableHLO, PJRT and resident buffers too (strict and fused).
    proc = run_on_cpu_plugin(str(HERE.parent / "ops" / "test_opinfo.py"), "-k",
                             "test_forward and float32 and (strict or fused)", "-o", "addopts=", "-rfs",
                             timeout=1800, TORCH_TPU_TEST_FULL="0")
    failed = {op for op in re.findall(r"^FAILED \S+\[\w+-float32-(\S+?)\]", proc.stdout, re.M)}
    summary = proc.stdout.splitlines()[-1]
    assert failed <= _PLUGIN_BUGS, proc.stdout[-6000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 1000, summary


_PROGRAM = """
import json, torch, torch_tpu
from torch_tpu import _C
x = torch.arange(12.0).reshape(3, 4).to("tpu")
y = ((x * 0.5).exp() - x).sum(1).cpu()
info = _C._pjrt_info()
print(json.dumps({"y": y.tolist(), "compiles": info["compiles"], "cache": info["executable_cache"]}))
"""


def _run_program(cache_dir: pathlib.Path) -> tuple[dict, str]:
    plugin = cpu_plugin_path()
    if plugin is None:
        pytest.skip("XLA's CPU PJRT plugin is not installed: pip install lammps-jax-pjrt-cpu (requirements-dev.txt)")
    env = dict(os.environ, TORCH_TPU_RUNTIME="pjrt", TORCH_TPU_PJRT_PLUGIN=str(plugin),
               TORCH_TPU_CACHE_DIR=str(cache_dir))
    proc = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_compiled_executables_are_reused_by_the_next_process(tmp_path: pathlib.Path) -> None:
    expected = ((torch.arange(12.0).reshape(3, 4) * 0.5).exp() - torch.arange(12.0).reshape(3, 4)).sum(1)
    cold, _ = _run_program(tmp_path)
    assert cold["compiles"] > 0 and cold["cache"]["writes"] == cold["compiles"], cold
    warm, _ = _run_program(tmp_path)
    assert warm["compiles"] == 0 and warm["cache"]["hits"] >= cold["compiles"], warm  # XLA never ran
    for run in (cold, warm):
        torch.testing.assert_close(torch.tensor(run["y"]), expected)
    # A damaged entry is detected, discarded with a warning and recompiled.
    entries = sorted(pathlib.Path(warm["cache"]["directory"]).glob("*.tpp"))
    assert entries, warm
    data = bytearray(entries[0].read_bytes())
    data[-1] ^= 0xFF
    entries[0].write_bytes(bytes(data))
    again, stderr = _run_program(tmp_path)
    assert again["compiles"] == 1 and "corrupt" in stderr, (again, stderr[-2000:])
    torch.testing.assert_close(torch.tensor(again["y"]), expected)
