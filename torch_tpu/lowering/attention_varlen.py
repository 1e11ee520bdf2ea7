"""Flash attention's own ops, `_flash_attention_forward` / `_flash_attention_backward`: what
`torch.nn.attention.varlen.varlen_attn` calls on every device but CUDA-with-cuDNN, and so what
TorchTitan's "varlen" attention backend (packed documents, block-causal) runs.

Varlen form: q, k, v packed as [T, H, D] with `cum_seq_q/k` ([B + 1] document offsets, int32,
device values). Each token's document and its offset from the document's end are computed in
the graph from those offsets (comparisons and sums, no data-dependent shape), and the allowed
(query, key) pairs form a [Tq, Tk] mask: same document, and inside the window, which is
flash's bottom-right aligned one (`is_causal` means right = 0; -1 or None is unlimited). The
attention itself is the shared lowering (nn.py's `_attention_forward/_backward`) on [1, H, T, D].
Dense form (no offsets): [B, L, H, D] inputs, the same window rule per sequence. The log-sum-exp
is float32 [H, T] (varlen) or [B, H, L] (dense), as CUDA's. Dropout (random stream), ALiBi,
paged KV (block_table) and seqused_k raise NotImplementedError; grouped-query inputs repeat
the key/value heads.
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .nn import _attention_backward, _attention_forward, _zero_dropout, check, rsum
from .registry import register

aten = torch.ops.aten


def _positions(b: GraphBuilder, cum: Value | None, n: int) -> tuple[Value | None, Value]:
    """Per token: its document index (None without offsets) and its position relative to the
    end of its document (-1 for the last token), int64 [n]."""
    t = b.iota(torch.int64, (n,), 0)
    if cum is None:
        return None, b.sub(t, b.full(n, torch.int64, (n,)))
    c = b.convert(cum, torch.int64)
    m = cum.shape[0]
    tt = b.broadcast_in_dim(t, (n, m), (0,))
    cc = b.broadcast_in_dim(c, (n, m), (1,))
    started = b.compare("le", cc, tt)                       # offsets at or before the token
    doc = b.sub(rsum(b, b.convert(started, torch.int64), [1]), b.full(1, torch.int64, (n,)))
    big = b.full(torch.iinfo(torch.int64).max, torch.int64, (n, m))
    end = b.reduce(b.select(started, big, cc), "min", [1])   # the first offset after the token
    return doc, b.sub(t, end)


def _allowed(b: GraphBuilder, q: tuple[Value | None, Value], k: tuple[Value | None, Value], left: int | None,
             right: int | None) -> Value | None:
    """The [Tq, Tk] bool mask of pairs a query may attend to (None: all)."""
    (dq, pq), (dk, pk) = q, k
    n, m = pq.shape[0], pk.shape[0]
    conds = []
    if dq is not None:
        conds.append(b.compare("eq", b.broadcast_in_dim(dq, (n, m), (0,)), b.broadcast_in_dim(dk, (n, m), (1,))))
    qp, kp = b.broadcast_in_dim(pq, (n, m), (0,)), b.broadcast_in_dim(pk, (n, m), (1,))
    if right is not None and right >= 0:   # key at most `right` after the query
        conds.append(b.compare("le", kp, b.add(qp, b.full(right, torch.int64, (n, m)))))
    if left is not None and left >= 0:     # and at most `left` before it
        conds.append(b.compare("ge", kp, b.sub(qp, b.full(left, torch.int64, (n, m)))))
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = b.binary("and", out, c)
    return out


def _window(is_causal: bool, left: int | None, right: int | None) -> tuple[int | None, int | None]:
    left = None if left is None or left < 0 else left
    right = None if right is None or right < 0 else right
    if is_causal:
        right = 0
    return left, right


def _to_bhld(b: GraphBuilder, x: Value, varlen: bool) -> Value:
    """[T, H, D] -> [1, H, T, D]; [B, L, H, D] -> [B, H, L, D]."""
    if varlen:
        return b.reshape(b.transpose(x, [1, 0, 2]), (1, x.shape[1], x.shape[0], x.shape[2]))
    return b.transpose(x, [0, 2, 1, 3])


def _from_bhld(b: GraphBuilder, x: Value, varlen: bool) -> Value:
    if varlen:
        return b.transpose(b.reshape(x, x.shape[1:]), [1, 0, 2])
    return b.transpose(x, [0, 2, 1, 3])


def _repeat_heads(b: GraphBuilder, x: Value, heads: int) -> Value:
    """Grouped-query key/value [.., Hk, L, D] (B, H, L, D layout) repeated to `heads` heads."""
    bsz, hk, n, d = x.shape
    if hk == heads:
        return x
    check(heads % hk == 0, f"flash attention: {heads} query heads are not a multiple of {hk} key/value heads")
    g = heads // hk
    return b.reshape(b.broadcast_in_dim(x, (bsz, hk, g, n, d), (0, 1, 3, 4)), (bsz, heads, n, d))


def _unrepeat_heads(b: GraphBuilder, dx: Value, hk: int) -> Value:
    bsz, h, n, d = dx.shape
    if h == hk:
        return dx
    return b.reduce(b.reshape(dx, (bsz, hk, h // hk, n, d)), "sum", [2])


def _unsupported(**args: object) -> None:
    for name, v in args.items():
        if v is not None:
            raise NotImplementedError(f"torch_tpu: _flash_attention_forward with {name}")


@register(aten._flash_attention_forward.default)
def flash_attention_forward(b: GraphBuilder, q: Value, k: Value, v: Value, cum_seq_q: Value | None,
                            cum_seq_k: Value | None, max_q: int, max_k: int, dropout_p: Value, is_causal: bool,
                            return_debug_mask: bool, scale: Value | None = None, window_size_left: int | None = None,
                            window_size_right: int | None = None, seqused_k: Value | None = None,
                            alibi_slopes: Value | None = None, block_table: Value | None = None,
                            num_splits: int | None = None) -> tuple[Value, ...]:
    _zero_dropout(dropout_p, "_flash_attention_forward")
    _unsupported(seqused_k=seqused_k, alibi_slopes=alibi_slopes, block_table=block_table)
    check(not return_debug_mask, "torch_tpu: _flash_attention_forward with return_debug_mask=True",
          NotImplementedError)
    varlen = cum_seq_q is not None
    check(varlen == (cum_seq_k is not None), "flash attention: give both cum_seq_q and cum_seq_k, or neither")
    check(q.rank == (3 if varlen else 4), "flash attention expects [T, H, D] (varlen) or [B, L, H, D] inputs")
    left, right = _window(is_causal, window_size_left, window_size_right)
    mask = _allowed(b, _positions(b, cum_seq_q, q.shape[0] if varlen else q.shape[1]),
                    _positions(b, cum_seq_k, k.shape[0] if varlen else k.shape[1]), left, right)
    qb = _to_bhld(b, q, varlen)
    kb = _repeat_heads(b, _to_bhld(b, k, varlen), qb.shape[1])
    vb = _repeat_heads(b, _to_bhld(b, v, varlen), qb.shape[1])
    out, lse = _attention_forward(b, qb, kb, vb, False, mask, scale)
    lse = b.convert(lse, torch.float32)
    if varlen:
        lse = b.reshape(lse, lse.shape[1:])  # [H, T]
    # No dropout, so no random state: zeros (int64; the IR has no uint64), as varlen_attn makes.
    rng = b.full(0, torch.int64, (2,))
    return _from_bhld(b, out, varlen), lse, rng, b.full(0, torch.int64, (0,)), b.full(0, q.dtype, (0,))


@register(aten._flash_attention_backward.default)
def flash_attention_backward(b: GraphBuilder, go: Value, q: Value, k: Value, v: Value, out: Value, lse: Value,
                             cum_seq_q: Value | None, cum_seq_k: Value | None, max_q: int, max_k: int,
                             dropout_p: Value, is_causal: bool, rng_state: Value, unused: Value,
                             scale: Value | None = None, window_size_left: int | None = None,
                             window_size_right: int | None = None) -> tuple[Value, Value, Value]:
    _zero_dropout(dropout_p, "_flash_attention_backward")
    varlen = q.rank == 3
    left, right = _window(is_causal, window_size_left, window_size_right)
    mask = _allowed(b, _positions(b, cum_seq_q if varlen else None, q.shape[0] if varlen else q.shape[1]),
                    _positions(b, cum_seq_k if varlen else None, k.shape[0] if varlen else k.shape[1]), left, right)
    qb = _to_bhld(b, q, varlen)
    hk = k.shape[1] if varlen else k.shape[2]
    kb = _repeat_heads(b, _to_bhld(b, k, varlen), qb.shape[1])
    vb = _repeat_heads(b, _to_bhld(b, v, varlen), qb.shape[1])
    if varlen:
        lse = b.reshape(lse, (1,) + lse.shape)
    dq, dk, dv, _ = _attention_backward(b, _to_bhld(b, go, varlen), qb, kb, vb, _to_bhld(b, out, varlen), lse, False,
                                        mask, scale)
    dk, dv = _unrepeat_heads(b, dk, hk), _unrepeat_heads(b, dv, hk)
    return _from_bhld(b, dq, varlen), _from_bhld(b, dk, varlen), _from_bhld(b, dv, varlen)
