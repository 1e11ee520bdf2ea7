"""Fixtures for the vLLM plugin tests: tiny checkpoints and the CPU platform's reference run.

These tests need .venv-vllm (`make test-vllm`); under an interpreter without vLLM every test
module skips itself (a conftest cannot skip), asking for "vllm.platforms", not "vllm": under
pytest this folder itself imports as a namespace package "vllm".
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_helpers import offline_run  # noqa: E402


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


@pytest.fixture(scope="session")
def tpu_run(tiny_models: dict[str, Path]) -> dict[str, dict]:
    """The same run on the tpu platform (computed once per architecture)."""

    class Run(dict):
        def __missing__(self, arch: str) -> dict:
            self[arch] = offline_run(tiny_models[arch], "tpu")
            return self[arch]

    return Run()
