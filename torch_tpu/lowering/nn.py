"""Lowerings: nn ops that are not convolution, pooling, normalization or losses.

Softmax family, embedding, attention, upsampling, pixel (un)shuffle, im2col/col2im. The other nn
families live in nn_conv.py, nn_pool.py, nn_norm.py and nn_loss.py and share the small helpers
defined at the top of this module (kept private to the nn files: they build IR directly, so the
nn lowerings do not depend on other op families being lowered).

Half types are computed in float32 and rounded once at the end, as the CPU kernels do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import NeedsBakedScalars
from .core import broadcast_to, canonical_dim, opmath
from .elementwise import _tname
from .registry import register

aten = torch.ops.aten


# -- shared helpers for the nn lowerings ---------------------------------------------------------

def check(cond: bool, msg: str, exc: type[Exception] = RuntimeError) -> None:
    if not cond:
        raise exc(msg)


def full(b: GraphBuilder, value: float | int | bool, dtype: torch.dtype, shape: Sequence[int]) -> Value:
    return b.full(value, dtype, tuple(shape))


def splat(b: GraphBuilder, s: Value, dtype: torch.dtype, shape: Sequence[int]) -> Value:
    """A 0-d runtime scalar converted to dtype and broadcast to shape."""
    return b.broadcast_in_dim(b.convert(s, dtype), tuple(shape), ())


def along(b: GraphBuilder, v: Value, shape: Sequence[int], dim: int) -> Value:
    """Broadcast a 1-d value along dimension dim of shape (e.g. a per-channel vector)."""
    return b.broadcast_in_dim(v, tuple(shape), (dim,))


def rsum(b: GraphBuilder, x: Value, dims: Sequence[int], keepdim: bool = False) -> Value:
    out = b.reduce(x, "sum", dims)
    return b.reshape(out, [1 if d in dims else s for d, s in enumerate(x.shape)]) if keepdim else out


def rmax(b: GraphBuilder, x: Value, dims: Sequence[int], keepdim: bool = False) -> Value:
    out = b.reduce(x, "max", dims)
    return b.reshape(out, [1 if d in dims else s for d, s in enumerate(x.shape)]) if keepdim else out


def keep(b: GraphBuilder, x: Value, dims: Sequence[int], reduced: Value) -> Value:
    """Broadcast a reduction result (dims removed) back to x's shape."""
    rest = [d for d in range(x.rank) if d not in dims]
    return b.broadcast_in_dim(reduced, x.shape, rest)


def iota_i64(b: GraphBuilder, n: int) -> Value:
    return b.iota(torch.int64, (n,), 0)


def baked_float(v: Value | None) -> float | None:
    """The compile-time value of an optional float argument; asks to be re-lowered with baked
    scalars when it is a runtime input (it decides index arithmetic, not just values)."""
    if v is None:
        return None
    if v.const is None:
        raise NeedsBakedScalars()
    return float(v.const)


def one_hot_select(b: GraphBuilder, idx: Value, n: int, dim: int, shape: Sequence[int]) -> Value:
    """Bool mask of shape with mask[..., i@dim, ...] = (i == idx[...]); idx has shape without dim."""
    shape = tuple(shape)
    io = b.iota(torch.int64, shape, dim)
    rest = [d for d in range(len(shape)) if d != dim]
    return b.compare("eq", io, b.broadcast_in_dim(idx, shape, rest))


# -- softmax -----------------------------------------------------------------------------------

def _softmax_core(b: GraphBuilder, x: Value, dim: int, log: bool, m: Value | None = None) -> Value:
    """(Log-)softmax of x along dim; m: x's max along dim, when the caller has it already."""
    if x.rank == 0:
        return b.full(0.0 if log else 1.0, x.dtype, ())
    m = rmax(b, x, [dim]) if m is None else m
    shifted = b.sub(x, keep(b, x, [dim], m))
    # A row of -inf has max -inf and would give NaN from (-inf) - (-inf), as on CPU.
    e = b.exp(shifted)
    s = rsum(b, e, [dim])
    if log:
        return b.sub(shifted, keep(b, x, [dim], b.log(s)))
    return b.div(e, keep(b, x, [dim], s))


@register(aten._softmax.default)
def softmax(b: GraphBuilder, x: Value, dim: int, half_to_float: bool) -> Value:
    return _softmax_common(b, x, dim, half_to_float, log=False)


@register(aten._log_softmax.default)
def log_softmax(b: GraphBuilder, x: Value, dim: int, half_to_float: bool) -> Value:
    return _softmax_common(b, x, dim, half_to_float, log=True)


def _softmax_common(b: GraphBuilder, x: Value, dim: int, half_to_float: bool, log: bool) -> Value:
    dim = canonical_dim(dim, x.rank)
    if not x.dtype.is_floating_point:
        # CPU returns an empty tensor of any dtype as it is, and names its kernel otherwise.
        if x.numel() == 0:
            return b.full(0, x.dtype, x.shape)
        kernel = ("log_" if log else "") + ("softmax_lastdim_kernel_impl" if dim >= x.rank - 1 else "softmax_kernel_impl")
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_tname(x.dtype)}'")
    out_dtype = torch.float32 if half_to_float and x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    y = _softmax_core(b, b.convert(x, opmath(x.dtype)), dim, log)
    return b.convert(y, out_dtype)


@register(aten._safe_softmax.default)
def safe_softmax(b: GraphBuilder, x: Value, dim: int, dtype: torch.dtype | None) -> Value:
    """Softmax whose fully-masked (all -inf) rows give 0 instead of NaN (the SDPA math path)."""
    out_dtype = dtype or x.dtype
    dim = canonical_dim(dim, x.rank)
    xc = b.convert(b.convert(x, out_dtype), opmath(out_dtype))
    if x.rank == 0:
        return b.convert(_softmax_core(b, xc, dim, log=False), out_dtype)
    # A row is all -inf exactly when its max is -inf (a NaN makes both false): the max softmax
    # needs anyway answers it, instead of a second pass over the row and a bool tensor.
    m = rmax(b, xc, [dim])
    y = _softmax_core(b, xc, dim, log=False, m=m)
    masked = b.compare("eq", m, full(b, -math.inf, m.dtype, m.shape))
    y = b.select(keep(b, xc, [dim], masked), full(b, 0, y.dtype, y.shape), y)
    return b.convert(y, out_dtype)


@register(aten._softmax_backward_data.default)
def softmax_backward(b: GraphBuilder, go: Value, out: Value, dim: int, input_dtype: torch.dtype) -> Value:
    comp = opmath(out.dtype)
    g, y = b.convert(go, comp), b.convert(out, comp)
    if y.rank == 0:
        return b.convert(full(b, 0, comp, ()), input_dtype)
    dim = canonical_dim(dim, y.rank)
    gy = b.mul(g, y)
    gi = b.sub(gy, b.mul(y, keep(b, y, [dim], rsum(b, gy, [dim]))))
    return b.convert(gi, input_dtype)


@register(aten._log_softmax_backward_data.default)
def log_softmax_backward(b: GraphBuilder, go: Value, out: Value, dim: int, input_dtype: torch.dtype) -> Value:
    comp = opmath(out.dtype)
    g, y = b.convert(go, comp), b.convert(out, comp)
    if y.rank == 0:
        return b.convert(full(b, 0, comp, ()), input_dtype)
    dim = canonical_dim(dim, y.rank)
    gi = b.sub(g, b.mul(b.exp(y), keep(b, y, [dim], rsum(b, g, [dim]))))
    return b.convert(gi, input_dtype)


# -- embedding ---------------------------------------------------------------------------------

def _take_rows(b: GraphBuilder, table: Value, idx: Value) -> Value:
    """table[idx] for a 2-d table and any-shaped int64 idx: result idx.shape + [D]."""
    m = idx.numel()
    flat = b.reshape(idx, (m,))
    index = b.broadcast_in_dim(flat, (m, table.shape[1]), (0,))
    rows = b.gather(table, index, 0)
    return b.reshape(rows, (*idx.shape, table.shape[1]))


@register(aten.embedding.default)
def embedding(b: GraphBuilder, weight: Value, indices: Value, padding_idx: int, scale_grad_by_freq: bool,
              sparse: bool) -> Value:
    check(weight.rank == 2, "'weight' must be 2-D")
    check(indices.dtype in (torch.int64, torch.int32),
          f"Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
          f"but got {indices.dtype} instead (while checking arguments for embedding)")
    return _take_rows(b, weight, b.convert(indices, torch.int64))


@register(aten.embedding_dense_backward.default)
def embedding_dense_backward(b: GraphBuilder, go: Value, indices: Value, num_weights: int, padding_idx: int,
                             scale_grad_by_freq: bool) -> Value:
    comp = opmath(go.dtype)
    d = go.shape[-1]
    m = indices.numel()
    idx = b.reshape(b.convert(indices, torch.int64), (m,))
    g = b.reshape(b.convert(go, comp), (m, d))
    if scale_grad_by_freq:
        counts = b.scatter(full(b, 0, comp, (num_weights,)), idx, full(b, 1, comp, (m,)), 0, "add")
        per = b.gather(counts, idx, 0)
        g = b.div(g, b.broadcast_in_dim(per, (m, d), (0,)))
    if padding_idx >= 0:  # rows looked up at padding_idx get no gradient
        pad = b.compare("eq", idx, b.full(padding_idx, torch.int64, (m,)))
        g = b.select(b.broadcast_in_dim(pad, (m, d), (0,)), full(b, 0, comp, (m, d)), g)
    out = b.scatter(full(b, 0, comp, (num_weights, d)), b.broadcast_in_dim(idx, (m, d), (0,)), g, 0, "add")
    return b.convert(out, go.dtype)


@register(aten.embedding_renorm.default)
def embedding_renorm(b: GraphBuilder, weight: Value, indices: Value, max_norm: Value, norm_type: Value) -> Value:
    """nn.Embedding(max_norm=...): each looked-up row whose norm exceeds max_norm is scaled to
    max_norm / (norm + 1e-7), as CPU does. A row looked up twice is written twice with the same
    value, so duplicates need no de-duplication."""
    check(weight.rank == 2, "embedding_renorm: 'self' must be 2-D")
    check(indices.dtype in (torch.int64, torch.int32), "embedding_renorm(): Expected indices to be Long or Int")
    m, d = indices.numel(), weight.shape[1]
    if m == 0:
        return weight
    p = baked_float(norm_type)  # picks the formula
    comp = opmath(weight.dtype)
    idx = b.reshape(b.convert(indices, torch.int64), (m,))
    rows = b.convert(_take_rows(b, weight, idx), comp)
    mag = b.unary("abs", rows)
    if p == math.inf:
        norm = rmax(b, mag, [1])
    elif p == 1:
        norm = rsum(b, mag, [1])
    else:
        norm = b.pow(rsum(b, b.pow(mag, full(b, p, comp, (m, d))), [1]), full(b, 1.0 / p, comp, (m,)))
    limit = splat(b, max_norm, comp, (m,))
    scale = b.select(b.compare("gt", norm, limit), b.div(limit, b.add(norm, full(b, 1e-7, comp, (m,)))),
                     full(b, 1, comp, (m,)))
    scaled = b.convert(b.mul(rows, b.broadcast_in_dim(scale, (m, d), (0,))), weight.dtype)
    return b.scatter(weight, b.broadcast_in_dim(idx, (m, d), (0,)), scaled, 0)


# -- attention ---------------------------------------------------------------------------------

def _attn_scores(b: GraphBuilder, q: Value, k: Value, is_causal: bool, attn_mask: Value | None,
                 scale: Value | None) -> Value:
    """scale * q @ k^T with the causal/attention masks applied, in float32/float64; [..., L, S]."""
    comp = opmath(q.dtype)
    qc, kc = b.convert(q, comp), b.convert(k, comp)
    nb = q.rank - 2
    batch = list(range(nb))
    s = b.dot_general(qc, kc, batch, batch, [nb + 1], [nb + 1])
    if scale is None:
        sc = full(b, 1.0 / math.sqrt(q.shape[-1]), comp, s.shape)
    else:
        sc = splat(b, scale, comp, s.shape)
    s = b.mul(s, sc)
    L, S = s.shape[-2], s.shape[-1]
    ninf = full(b, -math.inf, comp, s.shape)
    if is_causal:  # top-left aligned lower triangle, like torch.ones(L, S).tril()
        row = b.iota(torch.int64, (L, S), 0)
        col = b.iota(torch.int64, (L, S), 1)
        allowed = b.broadcast_in_dim(b.compare("le", col, row), s.shape, (nb, nb + 1))
        s = b.select(allowed, s, ninf)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = b.select(broadcast_to(b, attn_mask, s.shape), s, ninf)
        else:
            s = b.add(s, broadcast_to(b, b.convert(attn_mask, comp), s.shape))
    return s


def _zero_dropout(dropout_p: Value, op: str) -> None:
    """Dropout in attention needs the CPU kernel's random stream to match; only p == 0 lowers."""
    if dropout_p.const is None:
        raise NeedsBakedScalars()
    if float(dropout_p.const) != 0.0:
        raise NotImplementedError(f"torch_tpu: {op} with dropout_p > 0")


def _attention_forward(b: GraphBuilder, q: Value, k: Value, v: Value, is_causal: bool, attn_mask: Value | None,
                       scale: Value | None) -> tuple[Value, Value]:
    """softmax(scale * q @ k^T + mask) @ v and the rows' log-sum-exp (op-math dtype)."""
    check(q.rank == 4 and k.rank == 4 and v.rank == 4, "flash attention expects 4-D query, key and value")
    s = _attn_scores(b, q, k, is_causal, attn_mask, scale)
    nb = s.rank - 2
    m = rmax(b, s, [nb + 1])
    # A fully masked row (max -inf) gives output 0 and log-sum-exp 0, as the CPU kernel does;
    # the backward's exp(s - lse) is then 0 there too. Other rows are untouched.
    empty = b.compare("eq", m, full(b, -math.inf, m.dtype, m.shape))
    m = b.select(empty, full(b, 0, m.dtype, m.shape), m)
    shifted = b.sub(s, keep(b, s, [nb + 1], m))
    e = b.exp(shifted)
    tot = rsum(b, e, [nb + 1])
    tot = b.select(empty, full(b, 1, tot.dtype, tot.shape), tot)
    p = b.div(e, keep(b, s, [nb + 1], tot))
    batch = list(range(nb))
    out = b.dot_general(p, b.convert(v, p.dtype), batch, batch, [nb + 1], [nb])
    lse = b.add(m, b.log(tot))  # logsumexp stays in op-math (float32 for half inputs)
    return b.convert(out, q.dtype), lse


def _attention_backward(b: GraphBuilder, go: Value, q: Value, k: Value, v: Value, out: Value, lse: Value,
                        is_causal: bool, attn_mask: Value | None,
                        scale: Value | None) -> tuple[Value, Value, Value, Value]:
    """Gradients of q, k, v and of an additive mask (op-math dtype), from the saved log-sum-exp."""
    comp = opmath(q.dtype)
    s = _attn_scores(b, q, k, is_causal, attn_mask, scale)
    nb = s.rank - 2
    batch = list(range(nb))
    # Recompute the probabilities from the saved log-sum-exp.
    p = b.exp(b.sub(s, b.broadcast_in_dim(b.convert(lse, comp), s.shape, list(range(nb + 1)))))
    g, vc, oc = b.convert(go, comp), b.convert(v, comp), b.convert(out, comp)
    qc, kc = b.convert(q, comp), b.convert(k, comp)
    dv = b.dot_general(p, g, batch, batch, [nb], [nb])                  # p^T @ go : [.., S, Ev]
    dp = b.dot_general(g, vc, batch, batch, [nb + 1], [nb + 1])         # go @ v^T : [.., L, S]
    delta = rsum(b, b.mul(g, oc), [nb + 1])                             # rowsum(go * out)
    ds = b.mul(p, b.sub(dp, keep(b, dp, [nb + 1], delta)))
    sc = full(b, 1.0 / math.sqrt(q.shape[-1]), comp, ()) if scale is None else b.convert(scale, comp)
    dq = b.dot_general(ds, kc, batch, batch, [nb + 1], [nb])             # ds @ k : [.., L, E]
    dk = b.dot_general(ds, qc, batch, batch, [nb], [nb])                 # ds^T @ q : [.., S, E]
    dq = b.mul(dq, b.broadcast_in_dim(sc, dq.shape, ()))
    dk = b.mul(dk, b.broadcast_in_dim(sc, dk.shape, ()))
    return b.convert(dq, q.dtype), b.convert(dk, k.dtype), b.convert(dv, v.dtype), ds


@register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def sdpa_flash_cpu(b: GraphBuilder, q: Value, k: Value, v: Value, dropout_p: Value, is_causal: bool,
                   attn_mask: Value | None, scale: Value | None) -> tuple[Value, Value]:
    _zero_dropout(dropout_p, "_scaled_dot_product_flash_attention_for_cpu")
    return _attention_forward(b, q, k, v, is_causal, attn_mask, scale)


@register(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def sdpa_flash_cpu_backward(b: GraphBuilder, go: Value, q: Value, k: Value, v: Value, out: Value, lse: Value,
                            dropout_p: Value, is_causal: bool, attn_mask: Value | None,
                            scale: Value | None) -> tuple[Value, Value, Value]:
    _zero_dropout(dropout_p, "flash attention backward")
    return _attention_backward(b, go, q, k, v, out, lse, is_causal, attn_mask, scale)[:3]


# The "efficient attention" overloads: what SDPA calls on tpu (aten/attention.cpp) because DTensor
# has sharding strategies for them (batch and heads shard; the CPU kernel's op has none). Same
# math as above; their contract is CUDA's: the log-sum-exp is float32 [B, H, ceil(L/32)*32] when
# compute_log_sumexp (the padding is never read; we fill it with 0) and [B, H, 0] otherwise,
# the Philox seed and offset are 0-d int64 (zero: no dropout), and the backward also gives the
# additive mask's gradient when asked.
_LSE_ALIGN = 32


@register(aten._scaled_dot_product_efficient_attention.default)
def sdpa_efficient(b: GraphBuilder, q: Value, k: Value, v: Value, attn_bias: Value | None, compute_log_sumexp: bool,
                   dropout_p: Value, is_causal: bool, scale: Value | None) -> tuple[Value, Value, Value, Value]:
    _zero_dropout(dropout_p, "_scaled_dot_product_efficient_attention")
    out, lse = _attention_forward(b, q, k, v, is_causal, attn_bias, scale)
    lse = b.convert(lse, torch.float32)
    L = q.shape[2]
    padded = -(-L // _LSE_ALIGN) * _LSE_ALIGN if compute_log_sumexp else 0
    if padded == 0:
        lse = b.full(0.0, torch.float32, (q.shape[0], q.shape[1], 0))
    else:  # also by 0: one graph shape for every L (compile/graph_templates.py learns sizes from it)
        lse = b.pad(lse, b.full(0.0, torch.float32, ()), [0, 0, 0], [0, 0, padded - L])
    zero = b.full(0, torch.int64, ())
    return out, lse, zero, b.full(0, torch.int64, ())


@register(aten._scaled_dot_product_efficient_attention_backward.default)
def sdpa_efficient_backward(b: GraphBuilder, go: Value, q: Value, k: Value, v: Value, attn_bias: Value | None,
                            out: Value, lse: Value, philox_seed: Value, philox_offset: Value, dropout_p: Value,
                            grad_input_mask: list[bool], is_causal: bool,
                            scale: Value | None) -> tuple[Value | None, Value | None, Value | None, Value | None]:
    _zero_dropout(dropout_p, "_scaled_dot_product_efficient_attention_backward")
    L = q.shape[2]
    check(lse.rank == 3 and lse.shape[2] >= L,
          "efficient attention backward needs the forward's log-sum-exp (compute_log_sumexp=True)")
    lse = b.slice(lse, [0, 0, 0], [lse.shape[0], lse.shape[1], L])
    dq, dk, dv, ds = _attention_backward(b, go, q, k, v, out, lse, is_causal, attn_bias, scale)
    dbias = None
    if attn_bias is not None and len(grad_input_mask) > 3 and grad_input_mask[3]:
        dbias = b.convert(ds, attn_bias.dtype)
    mask = list(grad_input_mask) + [True] * (3 - len(grad_input_mask))
    return (dq if mask[0] else None, dk if mask[1] else None, dv if mask[2] else None, dbias)


# -- upsampling --------------------------------------------------------------------------------

def _scale_for(in_size: int, out_size: int, scale: float | None, comp: torch.dtype) -> float:
    """PyTorch's compute_scales_value: 1/scale when a positive scale is given, else in/out,
    rounded to the kernel's accumulation dtype."""
    s = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    return float(torch.tensor(s, dtype=comp))


def _nearest_index(b: GraphBuilder, in_size: int, out_size: int, scale: float | None, exact: bool) -> Value:
    """Source index of every output position (int64 [out_size]), as CPU's nearest_idx computes it."""
    o = iota_i64(b, out_size)
    if out_size == in_size and not exact:
        return o
    if out_size == 2 * in_size and not exact:
        return b.shr_arith(o, b.full(1, torch.int64, (out_size,)))
    s = _scale_for(in_size, out_size, scale, torch.float32)
    of = b.convert(o, torch.float32)
    if exact:  # nearest-exact samples pixel centers
        of = b.add(of, full(b, 0.5, torch.float32, (out_size,)))
    src = b.convert(b.floor(b.mul(of, full(b, s, torch.float32, (out_size,)))), torch.int64)
    return b.min(src, b.full(in_size - 1, torch.int64, (out_size,)))


def _gather_dim(b: GraphBuilder, x: Value, idx: Value, dim: int) -> Value:
    shape = list(x.shape)
    shape[dim] = idx.shape[0]
    return b.gather(x, b.broadcast_in_dim(idx, shape, (dim,)), dim)


def _scatter_add_dim(b: GraphBuilder, g: Value, idx: Value, dim: int, size: int) -> Value:
    shape = list(g.shape)
    shape[dim] = size
    return b.scatter(full(b, 0, g.dtype, shape), b.broadcast_in_dim(idx, g.shape, (dim,)), g, dim, "add")


def _out_sizes(x_shape: Sequence[int], output_size: Sequence[int] | None, scale_factors: Sequence[float] | None) -> list[int]:
    nsp = len(output_size) if output_size else len(scale_factors)
    if output_size:
        return list(output_size)
    return [int(math.floor(x_shape[-nsp + i] * scale_factors[i])) for i in range(nsp)]


def _upsample_nearest(b: GraphBuilder, x: Value, output_size: Sequence[int], scales: Sequence[float | None],
                      exact: bool) -> Value:
    nsp = len(output_size)
    check(x.rank == nsp + 2, f"Expected {nsp + 2}D input for upsample_nearest, got {x.shape}")
    y = x
    for i in range(nsp):
        d = 2 + i
        y = _gather_dim(b, y, _nearest_index(b, x.shape[d], output_size[i], scales[i], exact), d)
    return y


def _upsample_nearest_backward(b: GraphBuilder, go: Value, output_size: Sequence[int], input_size: Sequence[int],
                               scales: Sequence[float | None], exact: bool) -> Value:
    comp = opmath(go.dtype)
    g = b.convert(go, comp)
    nsp = len(output_size)
    for i in reversed(range(nsp)):
        d = 2 + i
        g = _scatter_add_dim(b, g, _nearest_index(b, input_size[d], output_size[i], scales[i], exact), d,
                             input_size[d])
    return b.convert(g, go.dtype)


def _register_nearest(nsp: int, fwd, vec, bwd, exact: bool) -> None:
    @register(fwd, bake_scalars=True)
    def lower(b: GraphBuilder, x: Value, output_size: list[int], *scales: Value | None) -> Value:
        return _upsample_nearest(b, x, output_size, [baked_float(s) for s in scales], exact)

    @register(vec, bake_scalars=True)
    def lower_vec(b: GraphBuilder, x: Value, output_size: list[int] | None, scale_factors: list[float] | None) -> Value:
        out = _out_sizes(x.shape, output_size, scale_factors)
        sc = list(scale_factors) if scale_factors else [None] * nsp
        return _upsample_nearest(b, x, out, sc, exact)

    @register(bwd, bake_scalars=True)
    def lower_bwd(b: GraphBuilder, go: Value, output_size: list[int], input_size: list[int],
                  *scales: Value | None) -> Value:
        return _upsample_nearest_backward(b, go, output_size, input_size, [baked_float(s) for s in scales], exact)


_register_nearest(1, aten.upsample_nearest1d.default, aten.upsample_nearest1d.vec,
                  aten.upsample_nearest1d_backward.default, False)
_register_nearest(2, aten.upsample_nearest2d.default, aten.upsample_nearest2d.vec,
                  aten.upsample_nearest2d_backward.default, False)
_register_nearest(3, aten.upsample_nearest3d.default, aten.upsample_nearest3d.vec,
                  aten.upsample_nearest3d_backward.default, False)
_register_nearest(1, aten._upsample_nearest_exact1d.default, aten._upsample_nearest_exact1d.vec,
                  aten._upsample_nearest_exact1d_backward.default, True)
_register_nearest(2, aten._upsample_nearest_exact2d.default, aten._upsample_nearest_exact2d.vec,
                  aten._upsample_nearest_exact2d_backward.default, True)
_register_nearest(3, aten._upsample_nearest_exact3d.default, aten._upsample_nearest_exact3d.vec,
                  aten._upsample_nearest_exact3d_backward.default, True)


def _source_position(b: GraphBuilder, in_size: int, out_size: int, align_corners: bool, scale: float | None,
                     comp: torch.dtype) -> Value:
    """CPU's area_pixel_compute_source_index before its clamp: the input position each output
    position samples, in the accumulation dtype."""
    n = out_size
    o = b.convert(iota_i64(b, n), comp)
    if align_corners:
        s = float(torch.tensor((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0, dtype=comp))
        return b.mul(o, full(b, s, comp, (n,)))
    s = _scale_for(in_size, out_size, scale, comp)
    return b.sub(b.mul(b.add(o, full(b, 0.5, comp, (n,))), full(b, s, comp, (n,))), full(b, 0.5, comp, (n,)))


def _linear_taps(b: GraphBuilder, in_size: int, out_size: int, align_corners: bool, scale: float | None,
                 comp: torch.dtype) -> tuple[Value, Value, Value, Value]:
    """(i0, i1, w0, w1) for linear interpolation along one dim, following CPU's
    area_pixel_compute_source_index + guard_index_and_lambda in the accumulation dtype."""
    n = out_size
    src = _source_position(b, in_size, out_size, align_corners, scale, comp)
    if not align_corners:  # linear (not cubic) clamps the position at 0
        src = b.max(src, full(b, 0, comp, (n,)))
    i0 = b.min(b.convert(b.floor(src), torch.int64), b.full(in_size - 1, torch.int64, (n,)))
    lam = b.sub(src, b.convert(i0, comp))
    lam = b.min(b.max(lam, full(b, 0, comp, (n,))), full(b, 1, comp, (n,)))
    i1 = b.min(b.add(i0, b.full(1, torch.int64, (n,))), b.full(in_size - 1, torch.int64, (n,)))
    return i0, i1, b.sub(full(b, 1, comp, (n,)), lam), lam


def _bilinear_scales(scales_h: Value | None, scales_w: Value | None) -> list[float | None]:
    return [baked_float(scales_h), baked_float(scales_w)]


def _upsample_linear(b: GraphBuilder, x: Value, output_size: Sequence[int], align_corners: bool,
                     scales: Sequence[float | None]) -> Value:
    nsp = len(output_size)
    check(x.rank == nsp + 2, f"Expected {nsp + 2}D input, got {x.shape}")
    comp = opmath(x.dtype)
    y = b.convert(x, comp)
    for i in range(nsp):
        d = 2 + i
        i0, i1, w0, w1 = _linear_taps(b, x.shape[d], output_size[i], align_corners, scales[i], comp)
        a0, a1 = _gather_dim(b, y, i0, d), _gather_dim(b, y, i1, d)
        y = b.add(b.mul(a0, along(b, w0, a0.shape, d)), b.mul(a1, along(b, w1, a1.shape, d)))
    return b.convert(y, x.dtype)


def _upsample_linear_backward(b: GraphBuilder, go: Value, output_size: Sequence[int], input_size: Sequence[int],
                              align_corners: bool, scales: Sequence[float | None]) -> Value:
    comp = opmath(go.dtype)
    g = b.convert(go, comp)
    nsp = len(output_size)
    for i in reversed(range(nsp)):
        d = 2 + i
        i0, i1, w0, w1 = _linear_taps(b, input_size[d], output_size[i], align_corners, scales[i], comp)
        g = b.add(_scatter_add_dim(b, b.mul(g, along(b, w0, g.shape, d)), i0, d, input_size[d]),
                  _scatter_add_dim(b, b.mul(g, along(b, w1, g.shape, d)), i1, d, input_size[d]))
    return b.convert(g, go.dtype)


@register(aten.upsample_bilinear2d.default, bake_scalars=True)
def upsample_bilinear2d(b: GraphBuilder, x: Value, output_size: list[int], align_corners: bool,
                        scales_h: Value | None, scales_w: Value | None) -> Value:
    return _upsample_linear(b, x, output_size, align_corners, _bilinear_scales(scales_h, scales_w))


@register(aten.upsample_bilinear2d.vec, bake_scalars=True)
def upsample_bilinear2d_vec(b: GraphBuilder, x: Value, output_size: list[int] | None, align_corners: bool,
                            scale_factors: list[float] | None) -> Value:
    out = _out_sizes(x.shape, output_size, scale_factors)
    return _upsample_linear(b, x, out, align_corners, list(scale_factors) if scale_factors else [None, None])


@register(aten.upsample_bilinear2d_backward.default, bake_scalars=True)
def upsample_bilinear2d_backward(b: GraphBuilder, go: Value, output_size: list[int], input_size: list[int],
                                 align_corners: bool, scales_h: Value | None, scales_w: Value | None) -> Value:
    return _upsample_linear_backward(b, go, output_size, input_size, align_corners,
                                     _bilinear_scales(scales_h, scales_w))


@register(aten.upsample_linear1d.default, bake_scalars=True)
def upsample_linear1d(b: GraphBuilder, x: Value, output_size: list[int], align_corners: bool,
                      scales: Value | None) -> Value:
    return _upsample_linear(b, x, output_size, align_corners, [baked_float(scales)])


@register(aten.upsample_linear1d_backward.default, bake_scalars=True)
def upsample_linear1d_backward(b: GraphBuilder, go: Value, output_size: list[int], input_size: list[int],
                               align_corners: bool, scales: Value | None) -> Value:
    return _upsample_linear_backward(b, go, output_size, input_size, align_corners, [baked_float(scales)])


@register(aten.upsample_trilinear3d_backward.default, bake_scalars=True)
def upsample_trilinear3d_backward(b: GraphBuilder, go: Value, output_size: list[int], input_size: list[int],
                                  align_corners: bool, scales_d: Value | None, scales_h: Value | None,
                                  scales_w: Value | None) -> Value:
    return _upsample_linear_backward(b, go, output_size, input_size, align_corners,
                                     [baked_float(scales_d), baked_float(scales_h), baked_float(scales_w)])


def _cubic_taps(b: GraphBuilder, in_size: int, out_size: int, align_corners: bool, scale: float | None,
                comp: torch.dtype) -> list[tuple[Value, Value]]:
    """The 4 (index, weight) taps of bicubic interpolation along one dim, as CPU's kernel: the
    source position is not clamped at 0, indices are clamped into the input (edge taps repeat),
    and the weights are the cubic convolution coefficients (A = -0.75) of its fraction."""
    n = out_size
    src = _source_position(b, in_size, out_size, align_corners, scale, comp)
    fl = b.floor(src)
    t = b.sub(src, fl)
    base = b.convert(fl, torch.int64)
    a = -0.75

    def c(v: float) -> Value:
        return full(b, v, comp, (n,))

    def near(x: Value) -> Value:  # |x| <= 1: ((A + 2) x - (A + 3)) x^2 + 1
        return b.add(b.mul(b.sub(b.mul(c(a + 2), x), c(a + 3)), b.mul(x, x)), c(1))

    def far(x: Value) -> Value:  # 1 < |x| < 2: ((A x - 5A) x + 8A) x - 4A
        return b.sub(b.mul(b.add(b.mul(b.sub(b.mul(c(a), x), c(5 * a)), x), c(8 * a)), x), c(4 * a))

    one_minus_t = b.sub(c(1), t)
    weights = [far(b.add(t, c(1))), near(t), near(one_minus_t), far(b.add(one_minus_t, c(1)))]
    taps = []
    for k, w in enumerate(weights):
        idx = b.add(base, b.full(k - 1, torch.int64, (n,)))
        idx = b.min(b.max(idx, b.full(0, torch.int64, (n,))), b.full(in_size - 1, torch.int64, (n,)))
        taps.append((idx, w))
    return taps


@register(aten.upsample_bicubic2d_backward.default, bake_scalars=True)
def upsample_bicubic2d_backward(b: GraphBuilder, go: Value, output_size: list[int], input_size: list[int],
                                align_corners: bool, scales_h: Value | None, scales_w: Value | None) -> Value:
    """Each output's gradient back to its 4x4 input taps: separable, one dim at a time (the
    2-D weights are products of the per-dim ones)."""
    comp = opmath(go.dtype)
    g = b.convert(go, comp)
    scales = _bilinear_scales(scales_h, scales_w)
    for i in reversed(range(2)):
        d = 2 + i
        out = None
        for idx, w in _cubic_taps(b, input_size[d], output_size[i], align_corners, scales[i], comp):
            part = _scatter_add_dim(b, b.mul(g, along(b, w, g.shape, d)), idx, d, input_size[d])
            out = part if out is None else b.add(out, part)
        g = out
    return b.convert(g, go.dtype)


# -- pixel shuffle, im2col/col2im --------------------------------------------------------------

@register(aten.pixel_shuffle.default)
def pixel_shuffle(b: GraphBuilder, x: Value, r: int) -> Value:
    check(x.rank >= 3, f"pixel_shuffle expects input to have at least 3 dimensions, but got input with {x.rank} dimension(s)")
    *lead, c, h, w = x.shape
    check(c % (r * r) == 0, f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
          f"of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    n = len(lead)
    y = b.reshape(x, (*lead, c // (r * r), r, r, h, w))
    y = b.transpose(y, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return b.reshape(y, (*lead, c // (r * r), h * r, w * r))


@register(aten.pixel_unshuffle.default)
def pixel_unshuffle(b: GraphBuilder, x: Value, r: int) -> Value:
    check(x.rank >= 3, f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with {x.rank} dimension(s)")
    *lead, c, h, w = x.shape
    check(h % r == 0 and w % r == 0, "pixel_unshuffle expects height and width to be divisible by downscale_factor")
    n = len(lead)
    y = b.reshape(x, (*lead, c, h // r, r, w // r, r))
    y = b.transpose(y, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return b.reshape(y, (*lead, c * r * r, h // r, w // r))


def _col_geometry(size: Sequence[int], kernel: Sequence[int], dilation: Sequence[int], padding: Sequence[int],
                  stride: Sequence[int]) -> list[int]:
    out = [(size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)]
    check(all(o > 0 for o in out), f"Given input with spatial size {list(size)}, kernel_size={list(kernel)}, "
          f"dilation={list(dilation)}, padding={list(padding)}, calculated shape of the array of sliding blocks "
          f"as {out}, but its components must be at least one.")
    return out


@register(aten.im2col.default)
def im2col(b: GraphBuilder, x: Value, kernel: list[int], dilation: list[int], padding: list[int],
           stride: list[int]) -> Value:
    batched = x.rank == 4
    if not batched:
        x = b.reshape(x, (1, *x.shape))
    n, c, h, w = x.shape
    oh, ow = _col_geometry((h, w), kernel, dilation, padding, stride)
    xp = b.pad(x, full(b, 0, x.dtype, ()), (0, 0, padding[0], padding[1]), (0, 0, padding[0], padding[1]))
    cols = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            h0, w0 = i * dilation[0], j * dilation[1]
            s = b.slice(xp, (0, 0, h0, w0), (n, c, h0 + (oh - 1) * stride[0] + 1, w0 + (ow - 1) * stride[1] + 1),
                        (1, 1, stride[0], stride[1]))
            cols.append(b.reshape(s, (n, c, 1, oh * ow)))
    y = b.reshape(b.concatenate(cols, 2), (n, c * kernel[0] * kernel[1], oh * ow))
    return y if batched else b.reshape(y, y.shape[1:])


@register(aten.col2im.default)
def col2im(b: GraphBuilder, x: Value, output_size: list[int], kernel: list[int], dilation: list[int],
           padding: list[int], stride: list[int]) -> Value:
    batched = x.rank == 3
    if not batched:
        x = b.reshape(x, (1, *x.shape))
    n, ckk, _ = x.shape
    kk = kernel[0] * kernel[1]
    check(ckk % kk == 0, f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
          f"but got input.size(1)={ckk} and kernel_size={list(kernel)}")
    c = ckk // kk
    oh, ow = _col_geometry(output_size, kernel, dilation, padding, stride)
    comp = opmath(x.dtype)
    cols = b.reshape(b.convert(x, comp), (n, c, kk, oh, ow))
    hp, wp = output_size[0] + 2 * padding[0], output_size[1] + 2 * padding[1]
    zero = full(b, 0, comp, ())
    acc = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            h0, w0 = i * dilation[0], j * dilation[1]
            blk = b.reshape(b.slice(cols, (0, 0, i * kernel[1] + j, 0, 0), (n, c, i * kernel[1] + j + 1, oh, ow)),
                            (n, c, oh, ow))
            # Place block element (y, x) at padded position (h0 + y*stride, w0 + x*stride).
            hi_h = hp - h0 - ((oh - 1) * stride[0] + 1)
            hi_w = wp - w0 - ((ow - 1) * stride[1] + 1)
            placed = b.pad(blk, zero, (0, 0, h0, w0), (0, 0, hi_h, hi_w), (0, 0, stride[0] - 1, stride[1] - 1))
            acc = placed if acc is None else b.add(acc, placed)
    y = b.slice(acc, (0, 0, padding[0], padding[1]), (n, c, padding[0] + output_size[0], padding[1] + output_size[1]))
    y = b.convert(y, x.dtype)
    return y if batched else b.reshape(y, y.shape[1:])
