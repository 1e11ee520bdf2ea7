"""FlexAttention (torch.nn.attention.flex_attention) on "tpu": eager and compiled (backend "tpu"
and torch.compile's default, which routes tpu graphs to it), forward and backward, against a
dense masked attention on CPU (CPU's FlexAttention has no backward)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import torch_tpu

B, H, HKV, L, D = 2, 4, 2, 64, 16


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _alibi_like(score, b, h, q_idx, kv_idx):
    return score - (q_idx - kv_idx) * 0.02 * (h + 1)


def _reference(q, k, v, gqa: bool):
    """Dense attention with the same mask and score modification, on CPU with autograd."""
    if gqa:
        k, v = k.repeat_interleave(H // HKV, 1), v.repeat_interleave(H // HKV, 1)
    qi, ki = torch.arange(L)[:, None], torch.arange(L)[None]
    heads = torch.arange(H)[:, None, None]
    s = q @ k.transpose(-1, -2) / D ** 0.5 - (qi - ki) * 0.02 * (heads + 1)
    return s.masked_fill(qi < ki, float("-inf")).softmax(-1) @ v


def _inputs(gqa: bool):
    torch.manual_seed(0)
    hk = HKV if gqa else H
    return [torch.randn(B, h, L, D, requires_grad=True) for h in (H, hk, hk)]


def _check(run, gqa: bool) -> None:
    cpu = _inputs(gqa)
    ref = _reference(*cpu, gqa)
    ref.backward(torch.ones_like(ref))
    tpu = [t.detach().to("tpu").requires_grad_() for t in cpu]
    mask = create_block_mask(_causal, B, H, L, L, device="tpu")
    out = run(*tpu, mask, gqa)
    out.backward(torch.ones_like(out))
    # float32 attention: the scores' summation order differs from the dense reference's.
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    for t, c in zip(tpu, cpu):
        torch.testing.assert_close(t.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5)


def _flex(q, k, v, mask, gqa):
    return flex_attention(q, k, v, score_mod=_alibi_like, block_mask=mask, enable_gqa=gqa)


@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_eager(mode: str, gqa: bool) -> None:
    with torch_tpu.mode(mode):
        _check(_flex, gqa)


@pytest.mark.parametrize("backend", ["tpu", None])
@pytest.mark.parametrize("gqa", [False, True])
def test_compiled(backend: str | None, gqa: bool) -> None:
    torch._dynamo.reset()
    torch_tpu.compile.reset_stats()
    compiled = torch.compile(_flex) if backend is None else torch.compile(_flex, backend=backend)
    _check(compiled, gqa)
    stats = torch_tpu.compile.stats()
    # Forward and backward compiled as ATen graphs: no graph ran its ops eagerly.
    assert stats["fallbacks"] == 0, stats["fallback_ops"]
    # (the second backend sees the same graphs and reuses the first one's programs)
    assert stats["graphs_compiled"] + stats["graphs_reused"] >= 2, stats


def test_other_devices_keep_pytorchs_check() -> None:
    """Only "tpu" is admitted: CPU keeps PyTorch's own refusal of the backward."""
    q, k, v = _inputs(False)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        flex_attention(q, k, v)
