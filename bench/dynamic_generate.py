"""HF generate() over prompts of different lengths: programs compiled per prompt and per token.

Run: PYTHONPATH=. .venv/bin/python bench/dynamic_generate.py [--kinds gpt2,llama]
         [--caches dynamic,static] [--modes strict,fused,compiled] [--prompts 10] [--new 16]
     TORCH_TPU_RUNTIME=pjrt TORCH_TPU_PJRT_PLUGIN=<pjrt_c_api_cpu_plugin.so> ... (the PJRT runtime)

A tiny random Hugging Face causal LM (no hub access) generates greedily `--new` tokens for each
of `--prompts` prompts of distinct lengths (4, 7, 10, ...), with the default DynamicCache and
with cache_implementation="static" (max_cache_len fixed for every prompt), in each mode:
  strict / fused  the eager modes (disable_compile: generate() does not compile)
  compiled        generate()'s own auto-compile of the decoding step (static cache only:
                  Transformers compiles only compileable caches, with backend "tpu",
                  dynamic=False; the prefill runs eagerly in strict mode)
Per prompt it prints the programs compiled (per-op misses + fused graphs + compiled graphs,
and XLA executables on PJRT), the tokens' equality with CPU, and wall time.
"""

from __future__ import annotations

import argparse
import time

import torch

import torch_tpu
from torch_tpu import _C

VOCAB = 96


def tiny(kind: str) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
        return GPT2LMHeadModel(cfg).eval()
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return LlamaForCausalLM(cfg).eval()


def prompts(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, VOCAB, (1, 4 + 3 * i), generator=g) for i in range(n)]


def counts() -> dict[str, int]:
    m = torch_tpu.metrics()
    c = m["compile"]
    pj = _C._pjrt_info()
    return {"per_op": int(m["cache_misses"]), "fused": int(m["fused"]["graphs_compiled"]),
            "compiled": int(c["graphs_compiled"]) + int(c["specializations"]),
            "xla": int(pj["compiles"]) if pj else 0}


def gen_kwargs(cache: str, mode: str, new: int) -> dict:
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw.update(cache_implementation="static", max_cache_len=128)
    if mode != "compiled":
        kw["disable_compile"] = True
    return kw


def run(kind: str, cache: str, mode: str, ps: list[torch.Tensor], new: int) -> list[dict]:
    import torch._dynamo

    torch._dynamo.reset()
    cpu = tiny(kind)
    dev = tiny(kind).to("tpu")
    rows = []
    with torch_tpu.mode("strict" if mode == "compiled" else mode):
        for p in ps:
            want = cpu.generate(p, **{**gen_kwargs(cache, mode, new), "disable_compile": True})
            before = counts()
            t0 = time.perf_counter()
            got = dev.generate(p.to("tpu"), **gen_kwargs(cache, mode, new)).cpu()
            dt = time.perf_counter() - t0
            after = counts()
            rows.append({"len": p.shape[1], "equal": torch.equal(got, want), "s": dt,
                         **{k: after[k] - before[k] for k in after}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="gpt2,llama")
    ap.add_argument("--caches", default="dynamic,static")
    ap.add_argument("--modes", default="strict,fused,compiled")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--new", type=int, default=16)
    a = ap.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    ps = prompts(a.prompts)
    print(f"runtime {'pjrt' if _C._pjrt_info() else 'host'}, {a.new} new tokens, prompt lengths "
          f"{[p.shape[1] for p in ps]}")
    for kind in a.kinds.split(","):
        for cache in a.caches.split(","):
            for mode in a.modes.split(","):
                if mode == "compiled" and cache == "dynamic":
                    continue  # Transformers never auto-compiles with a DynamicCache
                rows = run(kind, cache, mode, ps, a.new)
                cols = ("per_op", "fused", "compiled", "xla")
                print(f"{kind:5} {cache:7} {mode:8} equal={all(r['equal'] for r in rows)} "
                      f"first={rows[0]['s']:.2f}s later={sum(r['s'] for r in rows[1:]) / max(1, len(rows) - 1):.3f}s/prompt")
                for c in cols:
                    print(f"    {c:8} per prompt: {[r[c] for r in rows]}")


if __name__ == "__main__":
    main()
