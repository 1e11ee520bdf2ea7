"""Lowerings: the fused ops behind nn.MultiheadAttention's and nn.TransformerEncoderLayer's
inference "fast path" (``_native_multi_head_attention``, ``_transformer_encoder_layer_fwd``),
and ``_masked_softmax`` which they use (nn.TransformerEncoder's nested-tensor step is
csrc/aten/nested.cpp: its answer is a bool, not a tensor).

In eval mode without grad, PyTorch sends these modules to the fused ops on every device in its
``_supported_device_type`` list, which includes the PrivateUse1 backend, so without them any
nn.Transformer-based model fails in inference. The lowerings repeat the CPU kernels' steps
through the existing lowerings (mm/addmm/_addmm_activation/native_layer_norm), rounding each
intermediate to the input dtype where CPU stores it, so half types round where CPU does (their
products can still differ from CPU's in the last bit: summation order).
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .core import canonical_dim, opmath
from .linalg import addmm, addmm_activation, contract, mm
from .nn import _softmax_core, check, full
from .nn_norm import native_layer_norm
from .registry import register

aten = torch.ops.aten


def _round(b: GraphBuilder, v: Value, dtype: torch.dtype) -> Value:
    """v rounded to dtype and back to its op-math dtype: CPU stores this intermediate in dtype."""
    return b.convert(b.convert(v, dtype), v.dtype)


def _t(b: GraphBuilder, w: Value) -> Value:
    return b.transpose(w, (1, 0))


def _linear(b: GraphBuilder, x: Value, w: Value, bias: Value) -> Value:
    """x @ w^T + bias for x [..., K] through addmm, as ATen's linear on a flattened input."""
    one = b.constant(1, torch.int64)
    y = addmm(b, bias, b.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1])), _t(b, w), one, one)
    return b.reshape(y, (*x.shape[:-1], w.shape[0]))


# -- masked softmax ---------------------------------------------------------------------------

def _expand_mask(b: GraphBuilder, mask: Value, shape: tuple[int, ...], mask_type: int | None) -> Value:
    """A bool mask (True = masked out) broadcast to the scores' shape per CPU's mask_type rules:
    0 an (L, L) attention mask, 1 a (B, L) key padding mask, 2 the scores' own shape. Masks that
    are not 2-D, or scores that are not 4-D, are always type 2."""
    if mask.rank != 2 or len(shape) != 4:
        mask_type = 2
    if mask_type == 2:
        check(mask.shape == shape, "For mask_type == 2 mask shape should match input shape")
        return mask
    if mask_type == 1:
        check(mask.shape == (shape[0], shape[2]) and shape[2] == shape[3], "For mask_type == 1 mask shape should be (B, L)")
        return b.broadcast_in_dim(mask, shape, (0, 3))
    if mask_type == 0:
        check(mask.shape == (shape[2], shape[2]) and shape[2] == shape[3], "For mask_type == 0 mask shape should be (L, L)")
        return b.broadcast_in_dim(mask, shape, (2, 3))
    raise RuntimeError("Mask Type should be defined")


def _masked_softmax(b: GraphBuilder, x: Value, mask: Value | None, dim: int) -> Value:
    """Softmax of x (op-math) along dim without the masked elements. CPU's kernel behaves as
    softmax(x.masked_fill(mask, -inf)): a fully masked row is all NaN, a masked NaN is ignored."""
    if mask is not None:
        x = b.select(mask, full(b, -math.inf, x.dtype, x.shape), x)
    return _softmax_core(b, x, dim, log=False)


@register(aten._masked_softmax.default)
def masked_softmax(b: GraphBuilder, x: Value, mask: Value, dim: int | None, mask_type: int | None) -> Value:
    check(mask.dtype == torch.bool, "Mask should be a boolean tensor")
    check(x.dtype.is_floating_point, f"\"masked_softmax\" not implemented for '{x.dtype}'")
    dim = max(x.rank - 1, 0) if dim is None else canonical_dim(dim, x.rank)
    if x.rank == 0:  # CPU views it as one element
        check(mask.rank == 0, "For mask_type == 2 mask shape should match input shape")
        return b.reshape(masked_softmax(b, b.reshape(x, (1,)), b.reshape(mask, (1,)), 0, 2), ())
    m = _expand_mask(b, mask, x.shape, mask_type)
    return b.convert(_masked_softmax(b, b.convert(x, opmath(x.dtype)), m, dim), x.dtype)


# -- multi-head attention ---------------------------------------------------------------------

def _heads(b: GraphBuilder, x: Value, w: Value, bias: Value, num_heads: int, scale: float | None) -> Value:
    """One of q/k/v: (x @ w^T + bias) [* scale], as [B, heads, T, head_dim].

    CPU projects without the bias (gemm), then adds the bias and scales q in a second kernel,
    rounding after each step; the scale itself is rounded to the dtype first."""
    bsz, seq, d = x.shape
    dt = x.dtype
    y = b.convert(mm(b, b.reshape(x, (bsz * seq, d)), _t(b, w)), opmath(dt))
    y = _round(b, b.add(y, b.broadcast_in_dim(b.convert(bias, y.dtype), y.shape, (1,))), dt)
    if scale is not None:
        y = _round(b, b.mul(y, full(b, scale, y.dtype, y.shape)), dt)
    y = b.convert(y, dt)
    return b.transpose(b.reshape(y, (bsz, seq, num_heads, w.shape[0] // num_heads)), (0, 2, 1, 3))


def _inv_sqrt(head_dim: int, dtype: torch.dtype) -> float:
    """1 / sqrt(head_dim) as CPU computes it: sqrt in float (double for float64), the quotient
    in double, rounded to dtype."""
    root = math.sqrt(head_dim) if dtype == torch.float64 else float(torch.tensor(float(head_dim)).sqrt())
    return float(torch.tensor(1.0 / root, dtype=torch.float64).to(dtype))


def multi_head_attention(b: GraphBuilder, query: Value, key: Value, value: Value, embed_dim: int, num_heads: int,
                         qkv_weight: Value, qkv_bias: Value, proj_weight: Value, proj_bias: Value,
                         mask: Value | None, need_weights: bool, average_attn_weights: bool,
                         mask_type: int | None) -> tuple[Value, Value | None]:
    """CPU's native_multi_head_attention on dense [B, T, D] inputs."""
    d = embed_dim
    check(query.rank == 3, f"expected 3-D `query`, got {query.rank}-D tensor")
    check(query.shape[2] == d, f"passed-in embed_dim {d} didn't match last dim of query {query.shape[2]}")
    check(key.rank == 3, f"expected 3-D `key`, got {key.rank}-D tensor")
    check(value.rank == 3, f"expected 3-D `value`, got {value.rank}-D tensor")
    check(query.shape == key.shape == value.shape, "expected `query`/`key`/`value` shapes to match")
    check(qkv_weight.rank == 2, f"expected 2-D `qkv_weight`, got {qkv_weight.rank}-D tensor")
    check(qkv_weight.shape[0] == 3 * d, "expected `qkv_weight` first dim to be 3x embed_dim")
    check(qkv_weight.shape[1] == d, "expected `qkv_weight` second dim to be embed_Dim")
    check(qkv_bias.rank == 1, f"expected 1-D `qkv_bias`, got {qkv_bias.rank}-D tensor")
    check(qkv_bias.shape[0] == 3 * d, "expected `qkv_bias` first dim and first dim of query to be equal")
    check(num_heads > 0 and d % num_heads == 0, "`embed_dim` must divide evenly by `num_heads`")
    dt = query.dtype
    bsz, seq, _ = query.shape
    if bsz * seq * d == 0:  # CPU returns an empty result and no weights, even with need_weights
        return full(b, 0, dt, query.shape), None

    def part(v: Value, i: int) -> Value:  # rows i*D:(i+1)*D of the packed in-projection
        return b.slice(v, [i * d] + [0] * (v.rank - 1), [(i + 1) * d] + list(v.shape[1:]))

    head_dim = d // num_heads
    q = _heads(b, query, part(qkv_weight, 0), part(qkv_bias, 0), num_heads, _inv_sqrt(head_dim, dt))
    k = _heads(b, key, part(qkv_weight, 1), part(qkv_bias, 1), num_heads, None)
    v = _heads(b, value, part(qkv_weight, 2), part(qkv_bias, 2), num_heads, None)
    comp = opmath(dt)
    scores = b.convert(contract(b, q, k, [0, 1], [0, 1], [3], [3]), comp)  # [B, H, T, T]
    if mask is not None:
        # The fast path passes float masks (0 / -inf): CPU treats every nonzero entry as masked.
        if mask.dtype != torch.bool:
            mask = b.compare("ne", mask, full(b, 0, mask.dtype, mask.shape))
        mask = _expand_mask(b, mask, scores.shape, mask_type)
    p = b.convert(_masked_softmax(b, scores, mask, 3), dt)
    ctx = contract(b, p, v, [0, 1], [0, 1], [3], [2])  # [B, H, T, head_dim]
    ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (bsz, seq, d))
    out = _linear(b, ctx, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    if average_attn_weights:  # sum over heads (accumulated in op-math), then divide by their count
        s = _round(b, b.reduce(b.convert(p, comp), "sum", [1]), dt)
        p = b.convert(b.div(s, full(b, num_heads, comp, s.shape)), dt)
    return out, p


@register(aten._native_multi_head_attention.default)
def native_multi_head_attention(b: GraphBuilder, query: Value, key: Value, value: Value, embed_dim: int,
                                num_head: int, qkv_weight: Value, qkv_bias: Value, proj_weight: Value,
                                proj_bias: Value, mask: Value | None, need_weights: bool,
                                average_attn_weights: bool, mask_type: int | None) -> tuple[Value, Value | None]:
    return multi_head_attention(b, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask, need_weights, average_attn_weights, mask_type)


# -- transformer encoder layer ----------------------------------------------------------------

@register(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(b: GraphBuilder, src: Value, embed_dim: int, num_heads: int, qkv_weight: Value,
                                  qkv_bias: Value, proj_weight: Value, proj_bias: Value, use_gelu: bool,
                                  norm_first: bool, eps: Value, norm_weight_1: Value, norm_bias_1: Value,
                                  norm_weight_2: Value, norm_bias_2: Value, ffn_weight_1: Value, ffn_bias_1: Value,
                                  ffn_weight_2: Value, ffn_bias_2: Value, mask: Value | None,
                                  mask_type: int | None) -> Value:
    """Self-attention and feed-forward blocks with residuals and layer norms (post-norm, or
    pre-norm with norm_first), as CPU's transformer_encoder_layer_forward."""
    if src.numel() == 0:
        return src
    dt = src.dtype

    def norm(x: Value, w: Value, bias: Value) -> Value:
        return native_layer_norm(b, x, [embed_dim], w, bias, eps)[0]

    def residual(x: Value, y: Value) -> Value:  # CPU adds in place, in the tensor's dtype
        return b.convert(b.add(b.convert(x, opmath(dt)), b.convert(y, opmath(dt))), dt)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = residual(multi_head_attention(b, x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                      proj_bias, mask, False, True, mask_type)[0], src)
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    before_ffn = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    check(ffn_weight_1.rank == 2 and ffn_weight_2.rank == 2, "2d weights expected")
    one = b.constant(1, torch.int64)
    flat = b.reshape(x, (math.prod(x.shape[:2]), x.shape[2]))
    h = addmm_activation(b, ffn_bias_1, flat, _t(b, ffn_weight_1), one, one, use_gelu)
    y = b.reshape(addmm(b, ffn_bias_2, h, _t(b, ffn_weight_2), one, one), (*x.shape[:2], ffn_weight_2.shape[0]))
    x = residual(y, before_ffn)
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x
