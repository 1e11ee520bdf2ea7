"""The GPT-style training step through the StableHLO path: tests/models/test_training.py's TinyGPT
test (20 AdamW steps; losses and final parameters compared with CPU) in strict and fused modes,
run by pytest in one child process on TORCH_TPU_RUNTIME=jax, so every forward, backward and
optimizer program (and, in fused mode, every fused graph of a step) is emitted as StableHLO and
run on JAX's CPU backend. Both modes share one child: the CPU reference training, the imports and
the JAX engine are paid once (JAX compiles about 130 modules in strict mode and about a dozen
large fused graphs in fused mode)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax", reason="the JAX runtime runs modules on JAX's CPU backend (pip install 'jax[cpu]')")

from jax_session import run_python  # noqa: E402


def test_stablehlo_gpt_training_matches_cpu_strict_and_fused() -> None:
    r = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/models/test_training.py",
                    "-k", "test_training_matches_cpu and gpt and (strict or fused)"], timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "2 passed" in r.stdout, r.stdout[-2000:]
