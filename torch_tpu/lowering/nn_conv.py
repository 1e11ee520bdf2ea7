"""Lowerings: convolution (1d/2d/3d, grouped, dilated, transposed) and convolution_backward.

Everything is the IR ``convolution`` op (a cross-correlation with window strides, edge padding
that may be negative, lhs dilation and rhs dilation):

* transposed convolution = convolution of the stride-dilated input (lhs_dilation = stride) with
  the spatially reversed kernel whose in/out channels are swapped within each group, padded by
  dilation*(k-1) - padding (plus output_padding on the high side);
* grad_input of a convolution is the transposed convolution of grad_output (and vice versa);
* grad_weight is a convolution in which the batch dimension is the contracted "feature"
  dimension: lhs = input with batch and channels swapped, rhs = grad_output likewise, window
  strides = dilation, rhs_dilation = stride.

Half types are convolved in float32 and rounded once, as the CPU kernels accumulate in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .core import opmath
from .nn import check, rsum
from .registry import register

aten = torch.ops.aten


def _expand(param: Sequence[int], n: int, name: str) -> list[int]:
    p = list(param)
    if len(p) == 1 and n > 1:
        p = p * n
    check(len(p) == n, f"expected {name} to be a single integer value or a list of {n} values to match the "
          f"convolution dimensions, but got {name}={list(param)}")
    return p


def _conv_forward(b: GraphBuilder, x: Value, w: Value, stride: list[int], padding: list[int], dilation: list[int],
                  groups: int) -> Value:
    """Plain cross-correlation, symmetric padding."""
    n = x.rank - 2
    return b.convolution(x, w, stride, padding, padding, [1] * n, dilation, groups)


def _flip_weight(b: GraphBuilder, w: Value, groups: int) -> Value:
    """[Cin, Cout/g, *k] (transposed-conv layout) -> [Cout, Cin/g, *k], spatially reversed."""
    cin, cout_g, *k = w.shape
    n = len(k)
    t = b.reshape(w, (groups, cin // groups, cout_g, *k))
    t = b.transpose(t, (0, 2, 1, *range(3, 3 + n)))
    t = b.reshape(t, (groups * cout_g, cin // groups, *k))
    return b.reverse(t, list(range(2, 2 + n)))


def _conv_transpose(b: GraphBuilder, x: Value, w: Value, stride: list[int], padding: list[int],
                    dilation: list[int], output_padding: list[int], groups: int) -> Value:
    """Transposed convolution of x [N, Cin, *sp] with w [Cin, Cout/g, *k]."""
    n = x.rank - 2
    k = w.shape[2:]
    lo = [dilation[i] * (k[i] - 1) - padding[i] for i in range(n)]
    hi = [lo[i] + output_padding[i] for i in range(n)]
    return b.convolution(x, _flip_weight(b, w, groups), [1] * n, lo, hi, stride, dilation, groups)


def _conv_weight_grad(b: GraphBuilder, x: Value, go: Value, k: Sequence[int], stride: list[int],
                      padding: list[int], dilation: list[int], groups: int) -> Value:
    """d(conv(x, w))/dw contracted with go: [O, C/g, *k] for x [N, C, *sp], go [N, O, *sp']."""
    n = x.rank - 2
    nb, c = x.shape[:2]
    o = go.shape[1]
    sp = x.shape[2:]
    # lhs: [C/g, g*N, *sp] so that feature group j holds (group j, every batch element).
    lhs = b.reshape(x, (nb, groups, c // groups, *sp))
    lhs = b.transpose(lhs, (2, 1, 0, *range(3, 3 + n)))
    lhs = b.reshape(lhs, (c // groups, groups * nb, *sp))
    rhs = b.transpose(go, (1, 0, *range(2, 2 + n)))  # [O, N, *sp']
    hi = [(k[i] - 1) * dilation[i] + (go.shape[2 + i] - 1) * stride[i] + 1 - sp[i] - padding[i] for i in range(n)]
    gw = b.convolution(lhs, rhs, dilation, padding, hi, [1] * n, stride, groups)  # [C/g, O, *k]
    return b.transpose(gw, (1, 0, *range(2, 2 + n)))


_INT_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte"}


def _conv_dtype(dtype: torch.dtype) -> torch.dtype:
    """Computation dtype: float32 for half types (CPU accumulates in float32); float64 for integers.

    The IR convolution takes float operands only. CPU convolves integers in their own dtype with
    wrap-around arithmetic; float64 products and sums are exact while every partial sum stays
    below 2**53 in magnitude, and the result then goes through int64, so narrow integer types wrap
    exactly like CPU's. Beyond 2**53 (huge int64 values) results would differ: an exact integer
    convolution needs an integer IR convolution (a C++/IR change).
    """
    if not dtype.is_floating_point:
        return torch.float64
    return opmath(dtype)


@register(aten.convolution.default)
def convolution(b: GraphBuilder, x: Value, w: Value, bias: Value | None, stride: list[int], padding: list[int],
                dilation: list[int], transposed: bool, output_padding: list[int], groups: int) -> Value:
    n = w.rank - 2
    check(n >= 1, f"weight should have at least three dimensions, got {w.rank}")
    check(x.dtype == w.dtype, f"Input type ({x.dtype}) and weight type ({w.dtype}) should be the same")
    check(x.dtype != torch.bool, "\"slow_conv2d_cpu\" not implemented for 'Bool'", NotImplementedError)
    if transposed and not x.dtype.is_floating_point and x.dtype != torch.int64:
        raise NotImplementedError(f"\"slow_conv_transpose{w.rank - 2}d_out_cpu\" not implemented for "
                                  f"'{_INT_NAMES[x.dtype]}'")
    # aten.convolution takes batched input only (conv2d & co. add the batch dim before it).
    check(x.rank == n + 2, f"Expected {n + 2}-dimensional input for {n + 2}-dimensional weight {list(w.shape)}, "
          f"but got {x.rank}-dimensional input of size {list(x.shape)} instead")
    stride, padding = _expand(stride, n, "stride"), _expand(padding, n, "padding")
    dilation, output_padding = _expand(dilation, n, "dilation"), _expand(output_padding, n, "output_padding")
    check(all(s > 0 for s in stride), "non-positive stride is not supported")
    check(all(p >= 0 for p in padding), "negative padding is not supported")
    comp = _conv_dtype(x.dtype)
    xc, wc = b.convert(x, comp), b.convert(w, comp)
    if transposed:
        check(x.shape[1] == w.shape[0], f"Given transposed=1, weight of size {list(w.shape)}, expected input"
              f"{list(x.shape)} to have {w.shape[0]} channels, but got {x.shape[1]} channels instead")
        y = _conv_transpose(b, xc, wc, stride, padding, dilation, output_padding, groups)
    else:
        check(x.shape[1] == w.shape[1] * groups, f"Given groups={groups}, weight of size {list(w.shape)}, expected "
              f"input{list(x.shape)} to have {w.shape[1] * groups} channels, but got {x.shape[1]} channels instead")
        y = _conv_forward(b, xc, wc, stride, padding, dilation, groups)
    if bias is not None:
        check(bias.shape == (y.shape[1],), f"Given weight of size {list(w.shape)}, expected bias to be 1-dimensional "
              f"with {y.shape[1]} elements, but got bias of size {list(bias.shape)} instead")
        y = b.add(y, b.broadcast_in_dim(b.convert(bias, comp), y.shape, (1,)))
    if not x.dtype.is_floating_point:  # via int64, so that narrow integer results wrap like CPU's
        y = b.convert(b.convert(y, torch.int64), x.dtype)
    return b.convert(y, x.dtype)


@register(aten._convolution.default, aten._convolution.deprecated)
def _convolution(b: GraphBuilder, x: Value, w: Value, bias: Value | None, stride: list[int], padding: list[int],
                 dilation: list[int], transposed: bool, output_padding: list[int], groups: int, *flags) -> Value:
    # benchmark/deterministic/cudnn_enabled/allow_tf32 only pick CUDA algorithms.
    return convolution(b, x, w, bias, stride, padding, dilation, transposed, output_padding, groups)


@register(aten.convolution_backward.default)
def convolution_backward(b: GraphBuilder, go: Value, x: Value, w: Value, bias_sizes: list[int] | None,
                         stride: list[int], padding: list[int], dilation: list[int], transposed: bool,
                         output_padding: list[int], groups: int,
                         output_mask: list[bool]) -> tuple[Value | None, Value | None, Value | None]:
    n = w.rank - 2
    check(x.rank == n + 2 and go.rank == n + 2, f"convolution_backward expects batched {n + 2}-d input and grad_output")
    stride, padding = _expand(stride, n, "stride"), _expand(padding, n, "padding")
    dilation, output_padding = _expand(dilation, n, "dilation"), _expand(output_padding, n, "output_padding")
    comp = opmath(x.dtype)
    g, xc, wc = b.convert(go, comp), b.convert(x, comp), b.convert(w, comp)
    k = w.shape[2:]
    gi = gw = gb = None
    if output_mask[0]:
        if transposed:
            # The adjoint of a transposed convolution is the plain convolution with the same weight;
            # the output_padding positions at the high end of grad_output map to no input element
            # (they matter when output_padding >= stride, allowed with dilation), so crop them.
            hi = [padding[i] - output_padding[i] for i in range(n)]
            gi = b.convolution(g, wc, stride, padding, hi, [1] * n, dilation, groups)
        else:
            # Output padding recovers the input positions the forward's floor division dropped.
            op = [x.shape[2 + i] - ((go.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1) + 1)
                  for i in range(n)]
            gi = _conv_transpose(b, g, wc, stride, padding, dilation, op, groups)
        gi = b.convert(gi, x.dtype)
    if output_mask[1]:
        if transposed:  # roles of input and grad_output swap; the result is already [Cin, Cout/g, *k]
            gw = _conv_weight_grad(b, g, xc, k, stride, padding, dilation, groups)
        else:
            gw = _conv_weight_grad(b, xc, g, k, stride, padding, dilation, groups)
        gw = b.convert(gw, w.dtype)
    if output_mask[2]:
        gb = b.convert(rsum(b, g, [0, *range(2, 2 + n)]), go.dtype)
    return gi, gw, gb


# PyTorch routes convolutions on backends other than CPU/CUDA through the "overrideable" ops.
@register(aten.convolution_overrideable.default)
def convolution_overrideable(b: GraphBuilder, x: Value, w: Value, bias: Value | None, stride: list[int],
                             padding: list[int], dilation: list[int], transposed: bool, output_padding: list[int],
                             groups: int) -> Value:
    return convolution(b, x, w, bias, stride, padding, dilation, transposed, output_padding, groups)


@register(aten.convolution_backward_overrideable.default)
def convolution_backward_overrideable(b: GraphBuilder, go: Value, x: Value, w: Value, stride: list[int],
                                      padding: list[int], dilation: list[int], transposed: bool,
                                      output_padding: list[int], groups: int,
                                      output_mask: list[bool]) -> tuple[Value | None, Value | None, Value | None]:
    return convolution_backward(b, go, x, w, None, stride, padding, dilation, transposed, output_padding, groups,
                                output_mask)
