"""Lowerings: antialiased bilinear and bicubic interpolation (`F.interpolate(..., antialias=True)`,
torchvision's `Resize(antialias=True)`): `_upsample_bilinear2d_aa`, `_upsample_bicubic2d_aa`
(.default and .vec) and their backward ops.

Design: the antialiased resize is separable and linear. Along one spatial dim every output
position o takes a normalized filter (triangle for bilinear, Keys cubic with a = -0.5 for
bicubic) over an input window whose half-width grows with the scale when downsampling, so one
dim's resize is a product with a weight matrix W [out, in], and the 2-d resize is
W_h @ x @ W_w^T per (N, C) plane (two dot_generals; the accelerator's matmul units do the work
and the graph stays small and static whatever the scale). The weights depend only on sizes and
scales, which are Python values at lowering time, but the IR has no tensor constants, so W is
built in the graph from iotas with the same arithmetic as ATen's CPU kernel
(UpSampleKernel.cpp, HelperInterpBase's antialias weights): the window bounds, the filter
argument and the normalization follow its mix of float and double operations term by term, so
window edges and weights agree with CPU's bit for bit up to the summation order of the
normalizer. As on CPU, the width pass runs first, a dim whose size does not change is not
resampled, and the intermediate is stored in the input dtype.

uint8 follows CPU's fixed-point path: the weights are computed in double, scaled by 2^p
(p: the largest precision <= 22 bits at which the axis' largest weight still fits in int16,
found in the graph from that maximum) and rounded to integers; each pass sums integer products
(exactly, in float64: every partial sum is an integer below 2^53), adds half an LSB, shifts
right by p (floor division by 2^p, exact) and clamps to [0, 255], so the results match CPU
exactly, the uint8 rounding of the intermediate included.

The backward is the transposed products, grad_in = W_h^T @ grad_out @ W_w; CPU's backward
resamples every dim (also one whose size is unchanged), and so does this one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .nn import _out_sizes, baked_float, check
from .registry import register

aten = torch.ops.aten

# Taps of the plain (not antialiased) filters: the support is half of it, scaled when downsampling.
_LINEAR_TAPS = 2
_CUBIC_TAPS = 4
# Keys' cubic convolution coefficient for the antialiased bicubic filter (PIL's, not OpenCV's -0.75).
_KEYS_A = -0.5
# CPU's fixed-point uint8 path: weights have at most this many fractional bits and fit in int16.
_MAX_PRECISION = 22
_INT16_LIMIT = 1 << 15


def _round_to(value: float, dtype: torch.dtype) -> float:
    """value rounded to dtype (the C++ kernel's scalar_t), as a Python float."""
    return float(torch.tensor(value, dtype=torch.float64).to(dtype))


def _axis_scale(in_size: int, out_size: int, align_corners: bool, scale: float | None, dtype: torch.dtype) -> float:
    """ATen's area_pixel_compute_scale in dtype: (in-1)/(out-1) with align_corners (0 for a single
    output), else 1/scale for an explicit positive scale, else in/out."""
    if align_corners:
        if out_size <= 1:
            return 0.0
        return float(torch.tensor(in_size - 1, dtype=dtype) / torch.tensor(out_size - 1, dtype=dtype))
    if scale is not None and scale > 0:
        return _round_to(1.0 / scale, dtype)
    return float(torch.tensor(in_size, dtype=dtype) / torch.tensor(out_size, dtype=dtype))


def _full(b: GraphBuilder, value: float | int, like: Value) -> Value:
    return b.full(value, like.dtype, like.shape)


def _linear_filter(b: GraphBuilder, t: Value) -> Value:
    """The triangle filter max(0, 1 - |t|) in t's dtype."""
    a = b.abs(t)
    return b.select(b.compare("lt", a, _full(b, 1.0, a)), b.sub(_full(b, 1.0, a), a), _full(b, 0.0, a))


def _cubic_filter(b: GraphBuilder, t: Value) -> Value:
    """Keys' cubic convolution kernel (a = -0.5) in t's dtype, with CPU's operation order
    (cubic_convolution1 on |t| < 1, cubic_convolution2 on 1 <= |t| < 2, else 0)."""
    a = b.abs(t)

    def c(v: float) -> Value:
        return _full(b, v, a)

    # ((A + 2) x - (A + 3)) x x + 1
    near = b.add(b.mul(b.mul(b.sub(b.mul(c(_KEYS_A + 2), a), c(_KEYS_A + 3)), a), a), c(1.0))
    # ((A x - 5A) x + 8A) x - 4A
    far = b.sub(b.mul(b.add(b.mul(b.sub(b.mul(c(_KEYS_A), a), c(5 * _KEYS_A)), a), c(8 * _KEYS_A)), a),
                c(4 * _KEYS_A))
    return b.select(b.compare("lt", a, c(1.0)), near,
                    b.select(b.compare("lt", a, c(2.0)), far, c(0.0)))


def _aa_weights(b: GraphBuilder, in_size: int, out_size: int, align_corners: bool, scale: float | None,
                taps: int, filt: Callable[[GraphBuilder, Value], Value], dtype: torch.dtype) -> Value:
    """The normalized antialiasing weights W [out_size, in_size] of one dim in dtype (the CPU
    kernel's scalar_t: the input's float dtype, float64 for uint8), zero outside each output's
    window.

    Mirrors ATen's window and weight computation: with s the scale, the support is taps/2 scaled
    by s when s >= 1; output o centers at s (o + 0.5) (no half-pixel shift: align_corners only
    changes s); its window is [trunc(center - support + 0.5), trunc(center + support + 0.5)),
    clipped to the input and to ceil(support) * 2 + 1 taps; input x gets
    filter((x - center + 0.5) / max(s, 1)), and the window's weights are divided by their sum
    (when non-zero). Each step rounds to dtype or runs in double exactly where the C++ does
    (float scalar_t mixed with double literals)."""
    f64 = torch.float64
    s = _axis_scale(in_size, out_size, align_corners, scale, dtype)
    support = _round_to(taps * 0.5 * s, dtype) if s >= 1.0 else taps * 0.5
    max_taps = int(math.ceil(support)) * 2 + 1
    invscale = _round_to(1.0 / s, dtype) if s >= 1.0 else 1.0
    shape = (out_size, in_size)

    # center = scalar_t(s * (o + 0.5)): the product is in double.
    o = b.convert(b.iota(torch.int64, shape, 0), f64)
    center = b.convert(b.mul(b.add(o, b.full(0.5, f64, shape)), b.full(s, f64, shape)), dtype)
    sup = b.full(support, dtype, shape)
    half = b.full(0.5, f64, shape)

    def bound(edge: Value) -> Value:
        # int64(double(edge) + 0.5); floor equals C++'s truncation wherever the result is not clamped to 0.
        return b.convert(b.floor(b.add(b.convert(edge, f64), half)), torch.int64)

    lo = b.max(bound(b.sub(center, sup)), b.full(0, torch.int64, shape))
    hi = b.min(bound(b.add(center, sup)), b.full(in_size, torch.int64, shape))
    # The window holds at most max_taps inputs (CPU clips a window one wider by rounding).
    hi = b.min(hi, b.add(lo, b.full(max_taps, torch.int64, shape)))
    x = b.iota(torch.int64, shape, 1)
    inside = b.binary("and", b.compare("ge", x, lo), b.compare("lt", x, hi))

    # filter(scalar_t((double(scalar_t(x) - center) + 0.5) * invscale))
    d = b.sub(b.convert(x, dtype), center)
    t = b.convert(b.mul(b.add(b.convert(d, f64), half), b.full(invscale, f64, shape)), dtype)
    w = b.select(inside, filt(b, t), b.full(0.0, dtype, shape))

    total = b.broadcast_in_dim(b.reduce(w, "sum", [1]), shape, [0])
    zero = b.compare("eq", total, b.full(0.0, dtype, shape))
    return b.select(zero, w, b.div(w, b.select(zero, b.full(1.0, dtype, shape), total)))


def _filter_for(taps: int) -> Callable[[GraphBuilder, Value], Value]:
    return _linear_filter if taps == _LINEAR_TAPS else _cubic_filter


def _apply(b: GraphBuilder, x: Value, w: Value, dim: int) -> Value:
    """x resampled along dim (2 or 3 of NCHW) by w [out, in]: sum_i w[o, i] x[.., i, ..]."""
    y = b.dot_general(x, w, [], [], [dim], [1])  # the new dim comes last
    if dim == 3:
        return y
    return b.transpose(y, [0, 1, 3, 2])


def _apply_transposed(b: GraphBuilder, g: Value, w: Value, dim: int) -> Value:
    """g [.., out, ..] mapped back along dim by w^T: sum_o w[o, i] g[.., o, ..]."""
    y = b.dot_general(g, w, [], [], [dim], [0])
    if dim == 3:
        return y
    return b.transpose(y, [0, 1, 3, 2])


def _check_input(name: str, x: Value, output_size: Sequence[int]) -> None:
    check(x.rank == 4, f"{name}: expected a 4-d (N, C, H, W) input, got shape {list(x.shape)}")
    check(len(output_size) == 2, f"{name}: expected output_size of 2 elements, got {list(output_size)}")
    check(all(s > 0 for s in x.shape[2:]) and all(s > 0 for s in output_size),
          f"{name}: input and output sizes should be greater than 0, but got input (H: {x.shape[2]}, "
          f"W: {x.shape[3]}) output (H: {output_size[0]}, W: {output_size[1]})")
    check(x.dtype in (torch.float32, torch.float64, torch.uint8),
          f"{name}: not implemented for {x.dtype} (CPU's kernel supports float32, float64 and uint8)",
          NotImplementedError)


def _precision(b: GraphBuilder, w: Value) -> Value:
    """2^p as a float64 0-d value, p = CPU's int16 weight precision for w: the first p < 22 at
    which int(0.5 + max(w) * 2^(p + 1)) no longer fits in int16, else 22. The condition grows
    with p, so p is the number of candidates that still fit."""
    f64 = torch.float64
    n = _MAX_PRECISION
    wmax = b.broadcast_in_dim(b.reduce(w, "max", [0, 1]), (n,), [])
    pows = b.convert(b.shl(b.full(2, torch.int64, (n,)), b.iota(torch.int64, (n,), 0)), f64)  # 2^(p+1)
    scaled = b.floor(b.add(b.mul(wmax, pows), b.full(0.5, f64, (n,))))
    fits = b.convert(b.compare("lt", scaled, b.full(float(_INT16_LIMIT), f64, (n,))), torch.int64)
    p = b.reduce(fits, "sum", [0])
    return b.convert(b.shl(b.constant(1, torch.int64), p), f64)


def _fixed_point_pass(b: GraphBuilder, x: Value, w: Value, dim: int) -> Value:
    """One uint8 resampling pass along dim on x (float64 holding integers 0..255): the integer
    weights round(w * 2^p) (half away from zero), the integer sum of products, plus 2^(p-1),
    floor-divided by 2^p and clamped to [0, 255]. All values stay exact integers in float64."""
    f64 = torch.float64
    scale = _precision(b, w)
    v = b.mul(w, b.broadcast_in_dim(scale, w.shape, []))
    halfw = b.full(0.5, f64, w.shape)
    wi = b.trunc(b.select(b.compare("lt", v, b.full(0.0, f64, w.shape)), b.sub(v, halfw), b.add(v, halfw)))
    acc = _apply(b, x, wi, dim)
    sc = b.broadcast_in_dim(scale, acc.shape, [])
    out = b.floor(b.div(b.add(acc, b.mul(sc, b.full(0.5, f64, acc.shape))), sc))
    return b.min(b.max(out, b.full(0.0, f64, acc.shape)), b.full(255.0, f64, acc.shape))


def _upsample_aa(b: GraphBuilder, name: str, x: Value, output_size: Sequence[int], align_corners: bool,
                 scales: Sequence[float | None], taps: int) -> Value:
    _check_input(name, x, output_size)
    filt = _filter_for(taps)
    uint8 = x.dtype == torch.uint8
    wdtype = torch.float64 if uint8 else x.dtype
    y = b.convert(x, torch.float64) if uint8 else x
    # Width first, then height, each only when its size changes (CPU's order and skips: the
    # intermediate is rounded to the input dtype, which matters for uint8).
    for dim in (3, 2):
        i = dim - 2
        if output_size[i] == x.shape[dim]:
            continue
        w = _aa_weights(b, x.shape[dim], output_size[i], align_corners, scales[i], taps, filt, wdtype)
        y = _fixed_point_pass(b, y, w, dim) if uint8 else _apply(b, y, w, dim)
    return b.convert(y, x.dtype)


def _upsample_aa_backward(b: GraphBuilder, name: str, go: Value, output_size: Sequence[int],
                          input_size: Sequence[int], align_corners: bool, scales: Sequence[float | None],
                          taps: int) -> Value:
    check(len(input_size) == 4, f"{name}: expected input_size of 4 elements, got {list(input_size)}")
    check(len(output_size) == 2, f"{name}: expected output_size of 2 elements, got {list(output_size)}")
    expected = [input_size[0], input_size[1], *output_size]
    check(list(go.shape) == expected,
          f"{name}: expected grad_output of shape {expected} (the forward's output), got {list(go.shape)}")
    check(go.dtype in (torch.float32, torch.float64),
          f"{name}: not implemented for {go.dtype} (CPU's kernel supports float32 and float64)",
          NotImplementedError)
    filt = _filter_for(taps)
    g = go
    for dim in (3, 2):
        i = dim - 2
        w = _aa_weights(b, input_size[dim], output_size[i], align_corners, scales[i], taps, filt, go.dtype)
        g = _apply_transposed(b, g, w, dim)
    return g


def _register(taps: int, name: str, fwd, vec, bwd) -> None:
    @register(fwd, bake_scalars=True)
    def lower(b: GraphBuilder, x: Value, output_size: list[int], align_corners: bool, scales_h: Value | None,
              scales_w: Value | None) -> Value:
        return _upsample_aa(b, name, x, output_size, align_corners, [baked_float(scales_h), baked_float(scales_w)],
                            taps)

    @register(vec, bake_scalars=True)
    def lower_vec(b: GraphBuilder, x: Value, output_size: list[int] | None, align_corners: bool,
                  scale_factors: list[float] | None) -> Value:
        check(bool(output_size) != bool(scale_factors),
              f"{name}: must specify exactly one of output_size and scale_factors")
        check(x.rank == 4, f"{name}: expected a 4-d (N, C, H, W) input, got shape {list(x.shape)}")
        out = _out_sizes(x.shape, output_size, scale_factors)
        scales = list(scale_factors) if scale_factors else [None, None]
        return _upsample_aa(b, name, x, out, align_corners, scales, taps)

    @register(bwd, bake_scalars=True)
    def lower_bwd(b: GraphBuilder, go: Value, output_size: list[int], input_size: list[int], align_corners: bool,
                  scales_h: Value | None, scales_w: Value | None) -> Value:
        return _upsample_aa_backward(b, name + "_backward", go, output_size, input_size, align_corners,
                                     [baked_float(scales_h), baked_float(scales_w)], taps)


_register(_LINEAR_TAPS, "_upsample_bilinear2d_aa", aten._upsample_bilinear2d_aa.default,
          aten._upsample_bilinear2d_aa.vec, aten._upsample_bilinear2d_aa_backward.default)
_register(_CUBIC_TAPS, "_upsample_bicubic2d_aa", aten._upsample_bicubic2d_aa.default,
          aten._upsample_bicubic2d_aa.vec, aten._upsample_bicubic2d_aa_backward.default)
