"""Offline `LLM(...).generate` on the tpu platform against vLLM's own CPU platform."""

from __future__ import annotations

from pathlib import Path

import pytest
pytest.importorskip("vllm.platforms", reason="needs vLLM: run with `make test-vllm` (.venv-vllm)")

from vllm_helpers import offline_run
from tiny_models import prompts


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_tokens_match_cpu_platform(arch: str, tiny_models: dict[str, Path],
                                          cpu_reference: dict[str, dict]) -> None:
    """Six prompts of different lengths, batched, 12 greedy tokens each: token-identical."""
    lengths = {len(p.split()) for p in prompts(6)}
    assert len(lengths) >= 4, "the batch should mix prompt lengths"
    ours = offline_run(tiny_models[arch], "tpu")
    ref = cpu_reference[arch]
    assert ours["platform"] == "TpuPlatform" and ref["platform"] == "CpuPlatform"
    assert ours["weight_device"] == "tpu:0" and ours["kv_cache_device"] == "tpu:0"
    assert ref["weight_device"] == "cpu"
    assert [len(t) for t in ours["token_ids"]] == [12] * 6
    assert ours["token_ids"] == ref["token_ids"]
