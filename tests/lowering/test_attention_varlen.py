"""torch.nn.attention.varlen.varlen_attn on tpu (aten._flash_attention_forward/_backward,
lowering/attention_varlen.py): packed documents against per-document SDPA on CPU, forward and
gradients; the dense form of the ops too. TorchTitan's "varlen" attention backend runs this."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.varlen import varlen_attn

import torch_tpu  # noqa: F401

aten = torch.ops.aten


def _reference(q, k, v, lens, causal: bool):
    outs, start = [], 0
    for n in lens:
        sl = slice(start, start + n)
        o = F.scaled_dot_product_attention(q[sl].transpose(0, 1), k[sl].transpose(0, 1), v[sl].transpose(0, 1),
                                           is_causal=causal)
        outs.append(o.transpose(0, 1))
        start += n
    return torch.cat(outs)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_varlen_attn_matches_per_document_sdpa(causal: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    lens = [5, 1, 9, 3]
    T, H, D = sum(lens), 3, 8
    q, k, v = (torch.randn(T, H, D, dtype=dtype) for _ in range(3))
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    want = _reference(*[t.float() for t in leaves], lens, causal)
    go = torch.randn_like(want)
    grads = torch.autograd.grad(want, leaves, go)

    tleaves = [t.detach().to("tpu").requires_grad_() for t in (q, k, v)]
    window = (-1, 0) if causal else (-1, -1)
    got = varlen_attn(*tleaves, cu.to("tpu"), cu.to("tpu"), max(lens), max(lens), window_size=window)
    assert got.shape == (T, H, D) and got.dtype == dtype
    tgrads = torch.autograd.grad(got, tleaves, go.to("tpu", dtype))
    # bfloat16 inputs: the reference computes in float32 from the same bfloat16 values; the
    # result is rounded to bfloat16 once (3e-2 relative).
    tol = {} if dtype == torch.float32 else {"rtol": 3e-2, "atol": 3e-2}
    torch.testing.assert_close(got.cpu().float(), want, **tol)
    for g, e in zip(tgrads, grads):
        torch.testing.assert_close(g.cpu().float(), e.float(), **tol)


def test_dense_flash_ops_and_the_log_sum_exp() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 4, 8), torch.randn(2, 6, 4, 8), torch.randn(2, 6, 4, 8)
    out, lse, *_ = aten._flash_attention_forward(q.to("tpu"), k.to("tpu"), v.to("tpu"), None, None, 6, 6, 0.0, True,
                                                 False)
    want, want_lse = aten._scaled_dot_product_flash_attention_for_cpu(q.transpose(1, 2), k.transpose(1, 2),
                                                                      v.transpose(1, 2), 0.0, True)
    torch.testing.assert_close(out.cpu(), want.transpose(1, 2))
    torch.testing.assert_close(lse.cpu(), want_lse)
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 6)


def test_unsupported_arguments_raise() -> None:
    q = torch.randn(4, 2, 8, device="tpu")
    cu = torch.tensor([0, 4], dtype=torch.int32, device="tpu")
    with pytest.raises(NotImplementedError, match="dropout_p > 0"):
        aten._flash_attention_forward(q, q, q, cu, cu, 4, 4, 0.5, True, False)


def test_varlen_attn_under_compile_runs_its_graphs_eagerly_with_a_reason() -> None:
    """torch.compile(backend="tpu") of varlen_attn: the custom op has no graph lowering and its
    backward graph takes the uint64 random state (a dtype the IR lacks), so both graphs run their
    ops eagerly, with the reason in the warning; values and gradients equal per-document SDPA."""
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    lens = [5, 7]
    q, k, v = (torch.randn(sum(lens), 2, 8) for _ in range(3))
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    want = _reference(*leaves, lens, True)
    grads = torch.autograd.grad(want.sum(), leaves)

    def loss(q, k, v, cu):
        return varlen_attn(q, k, v, cu, cu, max(lens), max(lens), window_size=(-1, 0)).sum()

    tleaves = [t.detach().to("tpu").requires_grad_() for t in (q, k, v)]
    with pytest.warns(UserWarning, match="uint64, a dtype the IR has no type for"):
        got = torch.compile(loss, backend="tpu")(*tleaves, cu.to("tpu"))
        tgrads = torch.autograd.grad(got, tleaves)
    torch.testing.assert_close(got.cpu(), want.sum())
    for g, e in zip(tgrads, grads):
        torch.testing.assert_close(g.cpu(), e)
