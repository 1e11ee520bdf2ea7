"""TORCH_TPU_RUNTIME=jax: every program runs as StableHLO on JAX's CPU backend.

The runtime is chosen once per process, so each test starts a child on the JAX runtime
(jax_session.py). The smoke child (jax_smoke_child.py) runs programs of every mode (strict,
debug, fused, torch.compile) and compares them with CPU; random numbers must equal the host
runtime's draw for the same seed (the emitted Philox is the host runtime's, bit for bit).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("jax", reason="the JAX runtime runs modules on JAX's CPU backend (pip install 'jax[cpu]')")

from jax_session import ROOT, jax_env  # noqa: E402

CHILD = str(ROOT / "tests" / "stablehlo" / "jax_smoke_child.py")


def _start(runtime: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, CHILD], env=jax_env(TORCH_TPU_RUNTIME=runtime), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, f"child failed ({p.returncode}):\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


def test_stablehlo_jax_runtime_runs_every_mode_like_cpu_and_host() -> None:
    jax_child, host_child = _start("jax"), _start("host")  # in parallel
    got, host = _result(jax_child), _result(host_child)
    assert got["runtime"] == "jax" and host["runtime"] == "host"
    assert got["jax"]["compiles"] > 0 and got["jax"]["executions"] > 0, got["jax"]
    # Uniform and dropout values are bit-exact; normal goes through log/cos, which XLA's math
    # library may round differently from glibc's in the last bit (docs/stablehlo.md).
    torch.testing.assert_close(torch.tensor(got["random"], dtype=torch.float64),
                               torch.tensor(host["random"], dtype=torch.float64), rtol=1e-13, atol=0)


def test_stablehlo_import_torch_tpu_does_not_import_jax() -> None:
    code = "import sys, torch_tpu; print(torch_tpu._C._runtime_name(), 'jax' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], env=jax_env(TORCH_TPU_RUNTIME="host"), cwd=ROOT,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["host", "False"]


def test_stablehlo_unknown_runtime_lists_jax() -> None:
    r = subprocess.run([sys.executable, "-c", "import torch_tpu"], env=jax_env(TORCH_TPU_RUNTIME="nope"), cwd=ROOT,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode != 0
    assert "unknown TORCH_TPU_RUNTIME 'nope'" in r.stderr and "'jax'" in r.stderr, r.stderr[-2000:]
