"""Lowerings: the fused LSTM and GRU cells (``_thnn_fused_*``) and their backwards.

ATen's RNN code (nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell, projections and packed sequences
included) computes the gate matmuls itself and hands the pointwise part of each time step to
these ops on CUDA, XPU and PrivateUse1 devices. They follow the CUDA kernels: gates in the
order i, f, g, o (LSTM) and r, z, n (GRU); arithmetic in op-math (float32 for half types)
with each result rounded once; the backward reads the activations the forward saved in its
workspace, rounded to the input dtype as CUDA stores them:

* LSTM workspace [B, 4H]: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o).
* GRU workspace [B, 5H]: r, z, n, hx, and the hidden gates' n part plus its bias
  (the factor r multiplies, needed for r's gradient).
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .core import opmath
from .nn import check, full, rsum
from .registry import register

aten = torch.ops.aten


def _chunks(b: GraphBuilder, x: Value, n: int, comp: torch.dtype) -> list[Value]:
    """The n equal column blocks of a [B, n*H] value, converted to comp."""
    rows, cols = x.shape
    h = cols // n
    return [b.convert(b.slice(x, (0, k * h), (rows, (k + 1) * h)), comp) for k in range(n)]


def _bias_chunks(b: GraphBuilder, bias: Value | None, n: int, rows: int, comp: torch.dtype) -> list[Value | None]:
    """A [n*H] bias as n [rows, H] blocks in comp (Nones when the cell has no bias)."""
    if bias is None:
        return [None] * n
    return _chunks(b, b.broadcast_in_dim(bias, (rows, bias.shape[0]), (1,)), n, comp)


def _join(b: GraphBuilder, blocks: list[Value]) -> Value:
    """The [B, k*H] value whose column blocks are the k [B, H] blocks."""
    return b.concatenate(blocks, 1)


def _plus(b: GraphBuilder, *xs: Value | None) -> Value:
    """Left-to-right sum of the values given (the CUDA kernels' order of additions)."""
    terms = [x for x in xs if x is not None]
    out = terms[0]
    for t in terms[1:]:
        out = b.add(out, t)
    return out


def _one_minus(b: GraphBuilder, x: Value) -> Value:
    return b.sub(full(b, 1.0, x.dtype, x.shape), x)


def _check_cell(name: str, ig: Value, hg: Value, prev: Value, ib: Value | None, hb: Value | None,
                factor: int) -> None:
    """The shape checks of ATen's fused-cell kernels (gates [B, factor*H], biases [factor*H])."""
    check(ig.rank == 2, f"{name}: Expected 2-dimensional tensor, but got {ig.rank}-dimensional tensor for argument "
                        f"#1 'input_gates'")
    check(ig.shape == hg.shape, f"{name}: input_gates {list(ig.shape)} and hidden_gates {list(hg.shape)} differ")
    check(ig.shape[1] % factor == 0, f"{name}: gate size {ig.shape[1]} is not a multiple of {factor}")
    check((ib is None) == (hb is None), f"{name}: input_bias and hidden_bias must both be given or both be None")
    if ib is not None:
        check(ib.shape == hb.shape == (ig.shape[1],),
              f"{name}: biases {list(ib.shape)}, {list(hb.shape)} must have shape [{ig.shape[1]}]")
    check(prev.shape == (ig.shape[0], ig.shape[1] // factor),
          f"{name}: previous state {list(prev.shape)} does not fit gates {list(ig.shape)}")


# -- LSTM --------------------------------------------------------------------------------------

@register(aten._thnn_fused_lstm_cell.default)
def thnn_fused_lstm_cell(b: GraphBuilder, input_gates: Value, hidden_gates: Value, cx: Value,
                         input_bias: Value | None, hidden_bias: Value | None) -> tuple[Value, Value, Value]:
    """(hy, cy, workspace): c' = f*c + i*g, h' = o*tanh(c') from pre-activation gate sums."""
    _check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias, 4)
    dtype, comp = input_gates.dtype, opmath(input_gates.dtype)
    rows = input_gates.shape[0]
    pre = [_plus(b, x, h, bi, bh) for x, h, bi, bh in zip(
        _chunks(b, input_gates, 4, comp), _chunks(b, hidden_gates, 4, comp),
        _bias_chunks(b, input_bias, 4, rows, comp), _bias_chunks(b, hidden_bias, 4, rows, comp))]
    i, f, o = b.logistic(pre[0]), b.logistic(pre[1]), b.logistic(pre[3])
    g = b.tanh(pre[2])
    cy = b.add(b.mul(f, b.convert(cx, comp)), b.mul(i, g))
    hy = b.mul(o, b.tanh(cy))
    workspace = b.convert(_join(b, [i, f, g, o]), dtype)
    return b.convert(hy, cx.dtype), b.convert(cy, cx.dtype), workspace


@register(aten._thnn_fused_lstm_cell_backward_impl.default)
def thnn_fused_lstm_cell_backward_impl(b: GraphBuilder, grad_hy: Value | None, grad_cy: Value | None, cx: Value,
                                       cy: Value, workspace: Value, has_bias: bool):
    """(grad_gates [B, 4H], grad_cx, grad_bias [4H] | None); all undefined when neither output
    has a gradient. One grad_gates serves both gate inputs and both biases: they are summed."""
    if grad_hy is None and grad_cy is None:
        return None, None, None
    ref = grad_hy if grad_hy is not None else grad_cy
    check(ref.rank == 2, f"fused_lstm_cell_backward: Expected 2-dimensional tensor, but got {ref.rank}-dimensional "
                         f"tensor for argument #{1 if grad_hy is not None else 2}")
    for v, name in ((grad_hy, "grad_hy"), (grad_cy, "grad_cy"), (cx, "cx"), (cy, "cy")):
        if v is not None:
            check(v.shape == ref.shape,
                  f"fused_lstm_cell_backward: {name} has size {list(v.shape)}, expected {list(ref.shape)}")
    check(workspace.rank == 2 and workspace.numel() == 4 * ref.numel(),
          f"fused_lstm_cell_backward: workspace {list(workspace.shape)} does not fit {list(ref.shape)}")
    dtype, comp = workspace.dtype, opmath(workspace.dtype)
    i, f, g, o = _chunks(b, workspace, 4, comp)
    tanh_cy = b.tanh(b.convert(cy, comp))
    # d(loss)/d(c') collects the path through h' = o*tanh(c') and c' itself.
    gc = None
    if grad_hy is not None:
        go = b.convert(grad_hy, comp)
        gc = b.mul(b.mul(go, o), _one_minus(b, b.mul(tanh_cy, tanh_cy)))
        grad_o = b.mul(b.mul(b.mul(go, tanh_cy), _one_minus(b, o)), o)
    else:
        grad_o = full(b, 0.0, comp, o.shape)
    if grad_cy is not None:
        gc = b.convert(grad_cy, comp) if gc is None else b.add(gc, b.convert(grad_cy, comp))
    grad_i = b.mul(b.mul(b.mul(gc, g), _one_minus(b, i)), i)
    grad_f = b.mul(b.mul(b.mul(gc, b.convert(cx, comp)), _one_minus(b, f)), f)
    grad_g = b.mul(b.mul(gc, i), _one_minus(b, b.mul(g, g)))
    grad_gates = b.convert(_join(b, [grad_i, grad_f, grad_g, grad_o]), dtype)
    grad_cx = b.convert(b.mul(gc, f), cx.dtype)
    # CUDA sums the stored (rounded) gradients, accumulating in op-math.
    grad_bias = b.convert(rsum(b, b.convert(grad_gates, comp), [0]), dtype) if has_bias else None
    return grad_gates, grad_cx, grad_bias


# -- GRU ---------------------------------------------------------------------------------------

@register(aten._thnn_fused_gru_cell.default)
def thnn_fused_gru_cell(b: GraphBuilder, input_gates: Value, hidden_gates: Value, hx: Value,
                        input_bias: Value | None, hidden_bias: Value | None) -> tuple[Value, Value]:
    """(hy, workspace): n = tanh(x_n + r*(h_n + b_hn)), h' = n + z*(h - n)."""
    _check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias, hidden_bias, 3)
    comp = opmath(input_gates.dtype)
    rows = input_gates.shape[0]
    xr, xz, xn = _chunks(b, input_gates, 3, comp)
    hr, hz, hn = _chunks(b, hidden_gates, 3, comp)
    bir, biz, bin_ = _bias_chunks(b, input_bias, 3, rows, comp)
    bhr, bhz, bhn = _bias_chunks(b, hidden_bias, 3, rows, comp)
    r = b.logistic(_plus(b, xr, hr, bir, bhr))
    z = b.logistic(_plus(b, xz, hz, biz, bhz))
    hn_b = _plus(b, hn, bhn)
    n = b.tanh(b.add(_plus(b, xn, bin_), b.mul(r, hn_b)))
    hxc = b.convert(hx, comp)
    hy = b.add(n, b.mul(z, b.sub(hxc, n)))
    workspace = b.convert(_join(b, [r, z, n, hxc, hn_b]), hx.dtype)
    return b.convert(hy, hx.dtype), workspace


@register(aten._thnn_fused_gru_cell_backward.default)
def thnn_fused_gru_cell_backward(b: GraphBuilder, grad_hy: Value, workspace: Value, has_bias: bool):
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias): the
    two gate gradients differ only in the n block (r scales the hidden side's)."""
    check(grad_hy.rank == 2, f"fused_gru_cell_backward: Expected 2-dimensional tensor, but got {grad_hy.rank}-"
                             f"dimensional tensor for argument #1 'grad_hy'")
    check(workspace.shape == (grad_hy.shape[0], grad_hy.shape[1] * 5),
          f"fused_gru_cell_backward: workspace has size {list(workspace.shape)}, expected "
          f"{[grad_hy.shape[0], grad_hy.shape[1] * 5]}")
    dtype, comp = workspace.dtype, opmath(workspace.dtype)
    r, z, n, hx, hn = _chunks(b, workspace, 5, comp)
    go = b.convert(grad_hy, comp)
    one_z = _one_minus(b, z)
    grad_z = b.mul(b.mul(b.mul(go, b.sub(hx, n)), one_z), z)
    grad_hx = b.mul(go, z)
    grad_n = b.mul(b.mul(go, one_z), _one_minus(b, b.mul(n, n)))
    grad_hn = b.mul(grad_n, r)
    grad_r = b.mul(b.mul(b.mul(grad_n, hn), _one_minus(b, r)), r)
    grad_input = b.convert(_join(b, [grad_r, grad_z, grad_n]), dtype)
    grad_hidden = b.convert(_join(b, [grad_r, grad_z, grad_hn]), dtype)
    grad_ib = grad_hb = None
    if has_bias:  # sums of the stored (rounded) gradients, as CUDA's
        grad_ib = b.convert(rsum(b, b.convert(grad_input, comp), [0]), dtype)
        grad_hb = b.convert(rsum(b, b.convert(grad_hidden, comp), [0]), dtype)
    return grad_input, grad_hidden, b.convert(grad_hx, grad_hy.dtype), grad_ib, grad_hb
