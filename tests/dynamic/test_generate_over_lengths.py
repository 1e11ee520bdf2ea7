"""Hugging Face generate() over prompts of different lengths, with a DynamicCache and a static
cache, in each mode: tokens equal CPU's, and the programs compiled per prompt (issue 39).

bench/dynamic_generate.py runs the slow sweep (10 prompt lengths, GPT-2 and Llama, host and PJRT).
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import torch_tpu

transformers = pytest.importorskip("transformers", reason="generate() needs transformers")
transformers.logging.set_verbosity_error()

VOCAB = 96
NEW = 8


def _tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _kwargs(cache: str, compiled: bool) -> dict:
    kw = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw.update(cache_implementation="static", max_cache_len=128)
    if not compiled:
        kw["disable_compile"] = True
    return kw


def _programs() -> int:
    m = torch_tpu.metrics()
    return (int(m["cache_misses"]) + int(m["fused"]["graphs_compiled"]) + int(m["compile"]["graphs_compiled"])
            + int(m["compile"]["specializations"]))


# (cache, mode, generate()'s own torch.compile of the decoding step). Transformers compiles
# only compileable caches (the static one), with backend "tpu" and dynamic=False.
CASES = [("dynamic", "strict", False), ("dynamic", "fused", False), ("static", "strict", False),
         ("static", "fused", False), ("static", "strict", True)]

_PER_TOKEN = ("eager modes compile per never-seen total length: generate() concatenates each new token to "
              "input_ids (and a DynamicCache to its keys/values), so every decode step of a prompt whose "
              "lengths no earlier prompt reached has new sizes, and per-op programs and fused graphs are "
              "keyed on concrete sizes. Measured (bench/dynamic_generate.py, host runtime, GPT-2): per new length "
              "14 per-op programs (dynamic cache, strict), 6 fused graphs (dynamic, fused), 1 (static, strict: "
              "the input_ids concatenate), 3 (static, fused); the compiled static decode step itself is one graph "
              "for every prompt and token, but generate()'s eager concatenate around it still compiles 1 per new "
              "length")


def _ids(case):
    cache, mode, compiled = case
    return f"{cache}-{mode}{'-compiled' if compiled else ''}"


@pytest.mark.parametrize("case", [pytest.param(c, id=_ids(c), marks=[pytest.mark.xfail(strict=True, reason=_PER_TOKEN)]) for c in CASES])
def test_generate_matches_cpu_and_compiles_no_program_per_token(case):
    """Two prompts, then a third whose total lengths (prompt + generated) no earlier prompt
    reached: once with one new token (its prefill), then with NEW. Tokens equal CPU's, and the
    decode steps of the second run compile at most 2 programs whatever the number of tokens."""
    cache, mode, compiled = case
    torch._dynamo.reset()
    cpu, dev = _tiny(), _tiny().to("tpu")
    g = torch.Generator().manual_seed(0)
    # The third prompt's lengths differ per case: programs outlive a test, in one process.
    p1, p2, p3 = (torch.randint(3, VOCAB, (1, n), generator=g) for n in (5, 9, 60 + 10 * CASES.index(case)))
    added = []
    with torch_tpu.mode(mode):
        for p, new in ((p1, NEW), (p2, 2), (p3, 1), (p3, NEW)):
            kw = {**_kwargs(cache, compiled), "max_new_tokens": new, "min_new_tokens": new}
            want = cpu.generate(p, **{**kw, "disable_compile": True})
            before = _programs()
            got = dev.generate(p.to("tpu"), **kw).cpu()
            added.append(_programs() - before)
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    if compiled:  # one graph for the decoding step, compiled once for every prompt and token
        assert torch_tpu.compile.stats()["graphs_compiled"] >= 1
    assert added[3] <= 2, f"programs compiled per generate() call {added} (the last: {NEW - 1} decode steps)"
