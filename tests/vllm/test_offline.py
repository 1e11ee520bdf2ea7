"""Offline `LLM(...).generate` on the tpu platform against vLLM's own CPU platform."""

from __future__ import annotations

from pathlib import Path

import pytest
pytest.importorskip("vllm.platforms", reason="needs vLLM: run with `make test-vllm` (.venv-vllm)")

from tiny_models import prompts


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_tokens_match_cpu_platform(arch: str, tpu_run: dict[str, dict],
                                          cpu_reference: dict[str, dict]) -> None:
    """Six prompts of different lengths, batched, 12 greedy tokens each: token-identical."""
    lengths = {len(p.split()) for p in prompts(6)}
    assert len(lengths) >= 4, "the batch should mix prompt lengths"
    ours = tpu_run[arch]
    ref = cpu_reference[arch]
    assert ours["platform"] == "TpuPlatform" and ref["platform"] == "CpuPlatform"
    assert ours["weight_device"] == "tpu:0" and ours["kv_cache_device"] == "tpu:0"
    assert ref["weight_device"] == "cpu"
    assert [len(t) for t in ours["token_ids"]] == [12] * 6
    assert ours["token_ids"] == ref["token_ids"]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_attention_paths_match_cpu_platform(arch: str, tpu_run: dict[str, dict],
                                            cpu_reference: dict[str, dict]) -> None:
    """Each attention path gives the CPU platform's tokens: one request with nothing cached
    (flash attention over the new keys), one request with its prefix cached (keys gathered
    from the cache), several requests with cached prefixes (padded layout); and the three
    agree with each other."""
    ours = tpu_run[arch]["paths"]
    ref = cpu_reference[arch]["paths"]
    assert set(ours) == {"alone_fresh", "alone_cached", "batch_cached"}
    for key in ours:
        assert [len(t) for t in ours[key]] == [12] * 3, key
        assert ours[key] == ref[key], key
    assert ours["alone_fresh"] == ours["alone_cached"] == ours["batch_cached"]
