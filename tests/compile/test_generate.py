"""Transformers' generate() with a static cache on tpu: it auto-compiles the decoding step with
torch.compile's default backend, which the default route sends to the tpu backend. Tokens must
equal CPU eager greedy decoding; the compiled graph must lower whole."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from torch_tpu.compile import stats

transformers = pytest.importorskip("transformers", reason="transformers is not installed (optional dependency)")


def test_static_cache_generate_autocompiles_and_matches_cpu():
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (1, 6))
    want = model.generate(ids, max_new_tokens=8, do_sample=False, cache_implementation="static",
                          disable_compile=True)
    before = stats()
    got = model.to("tpu").generate(ids.to("tpu"), max_new_tokens=8, do_sample=False, cache_implementation="static")
    after = stats()
    assert after["graphs_seen"] > before["graphs_seen"]  # generate() compiled, through our backend
    assert after["fallbacks"] == before["fallbacks"]
    assert torch.equal(got.cpu(), want)
    torch._dynamo.reset()
