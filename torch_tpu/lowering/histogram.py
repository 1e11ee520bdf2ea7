"""Histograms: histc (mixture-of-experts routers count tokens per expert with it).

histc follows the CPU kernel (ATen/native/cpu/HistogramKernel.cpp, linear interpolation with
local search): an element's bin is estimated as trunc((x - lo) / (hi - lo) * bins), then
corrected against the bin edges linspace(lo, hi, bins + 1) (an upper-bound search among the
neighbouring edges), so rounding at an edge gives CPU's bin; the last bin includes `hi`;
elements outside [lo, hi] (and NaN) are not counted. min == max (the default 0, 0) takes the
range from the data, widened by 1 on each side when it is a single value. Integer inputs are
accepted (as CUDA does; CPU raises for them), computed in float64 and counted in their dtype.
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .core import opmath
from .registry import register

aten = torch.ops.aten


def _linspace_edges(b: GraphBuilder, lo: Value, hi: Value, bins: int, ct: torch.dtype) -> Value:
    """linspace(lo, hi, bins + 1) with CPU's formula (from the start for the first half of the
    points, from the end for the second half), so the edges equal CPU's to the last bit."""
    steps = bins + 1
    i = b.iota(ct, [steps], 0)
    step = b.binary("div", b.binary("sub", hi, lo), b.constant(float(steps - 1), ct))
    stepb = b.broadcast_in_dim(step, [steps], ())
    from_start = b.binary("add", b.broadcast_in_dim(lo, [steps], ()), b.binary("mul", stepb, i))
    back = b.binary("sub", b.full(float(steps - 1), ct, [steps]), i)
    from_end = b.binary("sub", b.broadcast_in_dim(hi, [steps], ()), b.binary("mul", stepb, back))
    first_half = b.compare("lt", b.iota(torch.int64, [steps], 0), b.full(steps // 2, torch.int64, [steps]))
    return b.select(first_half, from_start, from_end)


@register(aten.histc.default)
def histc(b: GraphBuilder, x: Value, bins: int, min: Value, max: Value) -> Value:  # noqa: A002 (schema names)
    if bins <= 0:
        raise RuntimeError("torch.histc(): bins must be > 0, but got " + str(bins) + " for dimension 0")
    if x.dtype in (torch.bool,) or x.dtype.is_complex:
        raise RuntimeError(f"\"histogram_tpu\" not implemented for '{str(x.dtype).removeprefix('torch.')}'")
    out_dtype = x.dtype
    ct = opmath(x.dtype) if x.dtype.is_floating_point else torch.float64
    n = x.numel()
    if n == 0:
        return b.full(0, out_dtype, [bins])
    flat = b.convert(b.reshape(x, [n]), ct)
    lo = b.convert(min, ct)
    hi = b.convert(max, ct)
    # min == max: the data's range (CPU: aminmax over the input).
    same = b.compare("eq", lo, hi)
    lo = b.select(same, b.reduce(flat, "min", [0]), lo)
    hi = b.select(same, b.reduce(flat, "max", [0]), hi)
    one = b.constant(1.0, ct)
    same = b.compare("eq", lo, hi)
    lo = b.select(same, b.binary("sub", lo, one), lo)
    hi = b.select(same, b.binary("add", hi, one), hi)

    lob = b.broadcast_in_dim(lo, [n], ())
    hib = b.broadcast_in_dim(hi, [n], ())
    inside = b.binary("and", b.compare("ge", flat, lob), b.compare("le", flat, hib))
    est = b.binary("mul", b.binary("div", b.binary("sub", flat, lob), b.binary("sub", hib, lob)),
                   b.full(float(bins), ct, [n]))
    # Outside elements (masked below) and NaN get estimate 0 so every gather index is valid.
    est = b.select(inside, b.unary("trunc", est), b.full(0.0, ct, [n]))
    pos = b.convert(est, torch.int64)
    pos = b.binary("min", b.binary("max", pos, b.full(0, torch.int64, [n])), b.full(bins, torch.int64, [n]))

    edges = _linspace_edges(b, lo, hi, bins, ct)
    # upper_bound over edges[pos_min:pos_max], pos_min = max(0, pos - 1), pos_max = min(pos + 2, bins + 1)
    pos_min = b.binary("max", b.binary("sub", pos, b.full(1, torch.int64, [n])), b.full(0, torch.int64, [n]))
    count = b.full(0, torch.int64, [n])
    for off in (-1, 0, 1):
        k = b.binary("add", pos, b.full(off, torch.int64, [n]))
        valid = b.binary("and", b.compare("ge", k, b.full(0, torch.int64, [n])),
                         b.compare("le", k, b.full(bins, torch.int64, [n])))
        kc = b.select(valid, k, b.full(0, torch.int64, [n]))
        le = b.binary("and", valid, b.compare("le", b.gather(edges, kc, 0), flat))
        count = b.binary("add", count, b.convert(le, torch.int64))
    found = b.binary("sub", b.binary("add", pos_min, count), b.full(1, torch.int64, [n]))
    found = b.binary("min", found, b.full(bins - 1, torch.int64, [n]))  # the last bin includes hi
    found = b.binary("max", found, b.full(0, torch.int64, [n]))
    index = b.select(inside, found, b.full(0, torch.int64, [n]))
    ones = b.select(inside, b.full(1, out_dtype, [n]), b.full(0, out_dtype, [n]))
    return b.scatter(b.full(0, out_dtype, [bins]), index, ones, 0, "add")
