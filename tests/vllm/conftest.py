"""Fixtures for the vLLM plugin tests: tiny checkpoints and runs of tests/vllm/offline_run.py.

These tests need .venv-vllm (`make test-vllm`); under another interpreter without vLLM they
are skipped with that reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM: run with `make test-vllm` (.venv-vllm)")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a vLLM child process: this checkout's torch_tpu and plugin first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("VLLM_TARGET_DEVICE", None)
    env.update(extra)
    return env


def offline_run(model: Path, platform: str, *args: str, timeout: int = 900) -> dict:
    """Run offline_run.py in a child process; its JSON result."""
    cmd = [sys.executable, str(HERE / "offline_run.py"), str(model), "--platform", platform, *args]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"{platform} run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random-init Llama and Qwen2 checkpoints with an offline tokenizer."""
    from tiny_models import build_model

    root = tmp_path_factory.mktemp("models")
    return {arch: build_model(root / arch, arch) for arch in ("llama", "qwen2")}


@pytest.fixture(scope="session")
def cpu_reference(tiny_models: dict[str, Path]) -> dict[str, dict]:
    """Greedy outputs of vLLM's own CPU platform (computed once per architecture)."""
    cache: dict[str, dict] = {}

    class Ref(dict):
        def __missing__(self, arch: str) -> dict:
            self[arch] = offline_run(tiny_models[arch], "cpu")
            return self[arch]

    return Ref(cache)
