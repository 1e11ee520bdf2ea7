"""Hugging Face integration: loading to the device, Transformers' device detection, Trainer, generate().

No hub access: every model is a tiny random one made in code under a fixed seed and, where a
test loads weights, saved with save_pretrained to a temporary directory first.
"""

from __future__ import annotations

import pytest
import torch

import torch_tpu
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Trainer, TrainingArguments)
from transformers.utils import is_torch_tpu_available

VOCAB = 96


def _tiny(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
        return GPT2LMHeadModel(cfg).eval()
    if kind == "llama":
        cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
        return LlamaForCausalLM(cfg).eval()
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return Qwen2ForCausalLM(cfg).eval()


def test_transformers_sees_the_backend():
    # Transformers 5 asks torch.accelerator for the current accelerator and checks its type.
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert is_torch_tpu_available()
    args = TrainingArguments(output_dir="unused", report_to=[], use_cpu=False)
    assert args.device == torch.device("tpu:0")


def test_from_pretrained_device_map_tpu(tmp_path):
    model = _tiny("llama")
    model.save_pretrained(tmp_path, safe_serialization=True)
    assert (tmp_path / "model.safetensors").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="tpu")
    assert all(p.device.type == "tpu" for p in loaded.parameters())
    for (name, p), (_, q) in zip(model.state_dict().items(), loaded.state_dict().items()):
        torch.testing.assert_close(q.cpu(), p, rtol=0, atol=0, msg=name)
    ids = torch.tensor([[5, 9, 11, 3, 7, 8]])
    with torch.no_grad():
        want = model(ids).logits
        got = loaded(ids.to("tpu")).logits.cpu()
    # rtol 1e-4: a whole transformer's float32 logits (matmul accumulation order differs from CPU).
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_trainer_runs_on_tpu(tmp_path, monkeypatch):
    # Trainer places the model through Accelerate, whose device table (1.15) does not know
    # "tpu": torch_tpu.integrations.accelerate makes it fall back to torch.accelerator (tpu)
    # instead of cpu, with no ACCELERATE_TORCH_DEVICE needed.
    from accelerate.state import AcceleratorState
    monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    model = _tiny("gpt2")
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": (ids := torch.randint(3, VOCAB, (16,), generator=g)), "labels": ids.clone()}
            for _ in range(8)]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=3,
                             learning_rate=1e-3, report_to=[], logging_steps=1, save_strategy="no",
                             dataloader_num_workers=0, use_cpu=False)
    assert args.device.type == "tpu"
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Trainer(model=model, args=args, train_dataset=data)
    result = trainer.train()
    assert result.global_step == 3
    assert next(model.parameters()).device.type == "tpu"
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach().cpu(), before[n])]
    assert moved, "the optimizer step changed no parameter"
    AcceleratorState._reset_state(reset_partial_state=True)


# Each model x cache in strict mode; fused mode on Llama (the other two differ only in layers
# the strict runs already cover). The static cache normally makes generate() torch.compile the
# decoding step (backend "tpu", see modeling_utils._default_compile_config); that path is the
# last case, the others set disable_compile so that they test the eager ops on each mode.
GENERATE_CASES = [(k, c, "strict", False) for k in ("gpt2", "llama", "qwen2") for c in ("dynamic", "static")] + [
    ("llama", "dynamic", "fused", False), ("llama", "static", "fused", False), ("llama", "static", "strict", True)]


@pytest.mark.parametrize("kind,cache,mode,compiled", GENERATE_CASES)
def test_generate_matches_cpu(kind, cache, mode, compiled):
    model = _tiny(kind)
    prompt = torch.tensor([[5, 9, 11, 3], [7, 8, 12, 4]])
    kwargs = dict(max_new_tokens=6, pad_token_id=0, cache_implementation=cache)
    if cache == "static" and not compiled:
        kwargs["disable_compile"] = True
    want = model.generate(prompt, do_sample=False, **{**kwargs, "disable_compile": True})
    dev = _tiny(kind).to("tpu")
    compiled_before = torch_tpu.compile.stats()["graphs_compiled"]
    with torch_tpu.mode(mode):
        got = dev.generate(prompt.to("tpu"), do_sample=False, **kwargs).cpu()
        torch.manual_seed(7)
        s1 = dev.generate(prompt.to("tpu"), do_sample=True, top_k=0, output_logits=True,
                          return_dict_in_generate=True, **kwargs)
        torch.manual_seed(7)
        s2 = dev.generate(prompt.to("tpu"), do_sample=True, top_k=0, **kwargs).cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if compiled:  # the decoding steps really ran as torch.compile(backend="tpu") graphs
        assert torch_tpu.compile.stats()["graphs_compiled"] > compiled_before
    seq = s1.sequences.cpu()
    torch.testing.assert_close(s2, seq, rtol=0, atol=0)  # a seeded run on the device is reproducible
    # Sampled tokens come from the device's Philox generator, which (like CUDA's) draws other
    # numbers than CPU's Mersenne Twister, so equal seeds cannot give CPU's tokens. What must match
    # is the distribution each token was drawn from: the logits at every step equal CPU's logits
    # for the same (device-sampled) sequence, computed by CPU in one teacher-forced forward.
    with torch.no_grad():
        ref = model(seq).logits
    n = prompt.shape[1]
    for step, logits in enumerate(s1.logits):
        # 1e-4: logits from the KV-cache path vs a full recompute on CPU (different op order).
        torch.testing.assert_close(logits.cpu(), ref[:, n - 1 + step], rtol=1e-4, atol=1e-4)
