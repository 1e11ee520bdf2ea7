"""Lowerings: torch.segment_reduce (aten.segment_reduce and aten._segment_reduce_backward).

Design: segment_reduce reduces consecutive runs of data along `axis`, the runs given by a
lengths tensor [*pre, S] or an offsets tensor [*pre, S + 1] (pre: the data's dims before axis,
one set of segments per position there). Which elements a segment holds depends on those
tensors' values, but the output shape ([*pre, S, *post]) only on their shape, so the program
stays static: segment s spans [start_s, end_s) with end = cumsum(lengths), start = end -
lengths (or the offsets' neighbours), and comparing them with an iota over the D data positions
gives a [*pre, S, D] membership mask. Each reduction is then a masked reduction over D of the
data broadcast to [*pre, S, D, *post] (non-members replaced by the reduction's identity) -- no
scatter, so NaN and inf stay confined to their own segment on every runtime. Empty segments give
`initial`, or CPU's defaults: sum 0, prod 1, max -inf, min +inf, mean NaN. As CPU, `initial` is
folded into every segment's reduction (mean: (initial + sum) / length).

The backward needs each data element's own segment: with valid lengths or offsets the segments
are disjoint, so an element's segment index is the sum over s of s where the mask holds, and
gathering the per-segment gradient, output, length and counts with it gives per-element values.
CPU's conventions are kept: max/min send the gradient to every element equal to the result (or
NaN), dividing it by their count only where it is positive; prod divides grad * output by the
element, except for zero or NaN elements, which get grad times the product of the others
(initial included), computed from per-segment counts of zeros and NaNs so no O(D^2) product is
needed.

Half types are computed in float32, but CPU's running value has the data's own type, rounded
after every element, and a long bfloat16 sum differs visibly from one rounded once; so half-type
sums, means and products fold the members one element at a time with that rounding (unrolled
over the axis, up to _FOLD_MAX positions; longer axes accumulate in float32).

CPU's data-dependent checks (lengths non-negative and summing to the axis size unless `unsafe`;
no negative segment even then) cannot run inside a static program: the lowering validates shapes,
dtypes and arguments only, and invalid lengths or offsets give empty or truncated segments
instead of an error.
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .core import canonical_dim, opmath
from .nn import check
from .registry import register

aten = torch.ops.aten

_KINDS = {"sum": "sum", "mean": "mean", "prod": "prod", "max": "max", "amax": "max", "min": "min", "amin": "min"}
_TYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
               torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
               torch.uint8: "Byte", torch.bool: "Bool"}
# Longest axis for which half-type sums and products are accumulated element by element (CPU's
# rounding after every step; the fold is unrolled, ~7 nodes per element); beyond it they are
# accumulated in float32 and rounded once.
_FOLD_MAX = 256
# The value an empty segment takes without `initial`; also what non-members become in the
# masked reduction (mean reduces as a sum).
_IDENTITY = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


def _type_name(dtype: torch.dtype) -> str:
    return _TYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


class _Segments:
    """The segments of one call: data [*pre, D, *post] and the [*pre, S] bounds along `axis`."""

    def __init__(self, b: GraphBuilder, data: Value, reduce: str, lengths: Value | None, offsets: Value | None,
                 axis: int, name: str):
        check(reduce in _KINDS, f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
        check(lengths is not None or offsets is not None, f"{name}(): Either lengths or offsets must be defined.")
        check(data.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16),
              f"\"_segment_reduce_cpu\" not implemented for '{_type_name(data.dtype)}'", NotImplementedError)
        check(data.rank >= 1, f"{name}(): Expected data to have at least one dimension.")
        self.kind = _KINDS[reduce]
        self.axis = canonical_dim(axis, data.rank)
        bounds = offsets if offsets is not None else lengths  # CPU prefers offsets when both are given
        what = "offsets" if offsets is not None else "lengths"
        check(data.rank >= bounds.rank, f"Expected data.dim() >= {what}_value.dim() to be true, but got false.")
        check(self.axis == bounds.rank - 1,
              f"segment_reduce(): Expected axis to be the last dimension of {what} but got {self.axis}.")
        check(bounds.dtype in (torch.int32, torch.int64),
              f"\"_segment_reduce_{what}_cpu_kernel1\" not implemented for '{_type_name(bounds.dtype)}'",
              NotImplementedError)
        pre = tuple(data.shape[:self.axis])
        check(tuple(bounds.shape[:-1]) == pre, f"{name}(): Expected {what} of shape {[*pre, -1]} for data of shape "
              f"{list(data.shape)} reduced along axis {self.axis}, but got {list(bounds.shape)}.")
        self.pre, self.post = pre, tuple(data.shape[self.axis + 1:])
        self.d = data.shape[self.axis]
        bounds = b.convert(bounds, torch.int64)
        last = bounds.rank - 1
        if offsets is not None:
            check(bounds.shape[last] >= 1, f"{name}(): Expected offsets to hold at least one value along axis "
                  f"{self.axis}.")
            self.s = bounds.shape[last] - 1
            self.start = self._cut(b, bounds, 0, self.s)
            self.end = self._cut(b, bounds, 1, self.s + 1)
        else:
            self.s = bounds.shape[last]
            self.end = b.scan(bounds, "sum", last)
            self.start = b.sub(self.end, bounds)
        # Lengths: the CPU kernel's segment_length (negative ones only arise from invalid input).
        self.length = b.sub(self.end, self.start)
        sd = (*pre, self.s, self.d)
        pos = b.iota(torch.int64, sd, len(pre) + 1)
        bcast = tuple(range(len(pre) + 1))
        self.member = b.binary("and", b.compare("ge", pos, b.broadcast_in_dim(self.start, sd, bcast)),
                               b.compare("lt", pos, b.broadcast_in_dim(self.end, sd, bcast)))  # [*pre, S, D]

    @staticmethod
    def _cut(b: GraphBuilder, x: Value, lo: int, hi: int) -> Value:
        start = [0] * x.rank
        limit = list(x.shape)
        start[-1], limit[-1] = lo, hi
        return b.slice(x, start, limit)

    # shapes: "seg" = [*pre, S, *post] (the output), "cube" = [*pre, S, D, *post], "data" = data's
    def seg_shape(self) -> tuple[int, ...]:
        return (*self.pre, self.s, *self.post)

    def cube_shape(self) -> tuple[int, ...]:
        return (*self.pre, self.s, self.d, *self.post)

    def data_to_cube(self, b: GraphBuilder, x: Value) -> Value:
        n = len(self.pre)
        dims = (*range(n), *range(n + 1, n + 2 + len(self.post)))
        return b.broadcast_in_dim(x, self.cube_shape(), dims)

    def seg_to_cube(self, b: GraphBuilder, x: Value) -> Value:
        n = len(self.pre)
        dims = (*range(n + 1), *range(n + 2, n + 2 + len(self.post)))
        return b.broadcast_in_dim(x, self.cube_shape(), dims)

    def mask_cube(self, b: GraphBuilder) -> Value:
        return b.broadcast_in_dim(self.member, self.cube_shape(), tuple(range(len(self.pre) + 2)))

    def reduce(self, b: GraphBuilder, cube: Value, kind: str, identity: float | int) -> Value:
        """Reduction over each segment's members of a [*pre, S, D, *post] value (-> seg shape)."""
        masked = b.select(self.mask_cube(b), cube, b.full(identity, cube.dtype, cube.shape))
        return b.reduce(masked, kind, [len(self.pre) + 1])

    def per_segment(self, b: GraphBuilder, x: Value, kind: str, identity: float | int) -> Value:
        """Reduction over each segment's members of a data-shaped value (-> seg shape)."""
        return self.reduce(b, self.data_to_cube(b, x), kind, identity)

    def fold(self, b: GraphBuilder, x: Value, kind: str, acc: Value, dtype: torch.dtype) -> Value:
        """CPU's sequential accumulation of a data-shaped value x (computed in x's dtype) into
        acc (seg shape), element by element in data order, rounded to dtype after every step, as
        the CPU kernel's running value of the data's own (half) type is: acc = round(acc op x_d)
        for each member d of the segment. Unrolled over D, so only used up to _FOLD_MAX."""
        op = {"sum": "add", "prod": "mul"}[kind]
        n = len(self.pre)
        shape = self.seg_shape()
        post_dims = tuple(range(n + 1, n + 1 + len(self.post)))
        for d in range(self.d):
            start = [0] * x.rank
            limit = list(x.shape)
            start[n], limit[n] = d, d + 1
            xd = b.reshape(b.slice(x, start, limit), (*self.pre, *self.post))
            xd = b.broadcast_in_dim(xd, shape, (*range(n), *post_dims))
            md = b.slice(self.member, [0] * (n + 1) + [d], [*self.pre, self.s, d + 1])
            md = b.broadcast_in_dim(b.reshape(md, (*self.pre, self.s)), shape, tuple(range(n + 1)))
            step = b.convert(b.convert(b.binary(op, acc, xd), dtype), x.dtype)
            acc = b.select(md, step, acc)
        return acc

    def seg_lengths(self, b: GraphBuilder, dtype: torch.dtype, comp: torch.dtype) -> Value:
        """Segment lengths (seg shape) as CPU divides by them: converted to the data's dtype."""
        n = len(self.pre)
        return b.broadcast_in_dim(b.convert(b.convert(self.length, dtype), comp), self.seg_shape(),
                                  tuple(range(n + 1)))

    def owner(self, b: GraphBuilder) -> tuple[Value, Value]:
        """(each data element's segment index, whether it is in a segment), data-shaped; the
        segments are disjoint for valid bounds, so the sum over matches is the one match."""
        n = len(self.pre)
        seg_id = b.iota(torch.int64, self.member.shape, n)
        idx = b.reduce(b.select(self.member, seg_id, b.full(0, torch.int64, seg_id.shape)), "sum", [n])
        inside = b.reduce(self.member, "or", [n])  # [*pre, D]
        shape = (*self.pre, self.d, *self.post)
        dims = tuple(range(n + 1))
        return b.broadcast_in_dim(idx, shape, dims), b.broadcast_in_dim(inside, shape, dims)

    def to_data(self, b: GraphBuilder, seg_value: Value, idx: Value) -> Value:
        """The value of each data element's segment (seg shape -> data shape)."""
        return b.gather(seg_value, idx, len(self.pre))


def _initial(b: GraphBuilder, initial: Value | None, dtype: torch.dtype, comp: torch.dtype,
             shape: tuple[int, ...]) -> Value:
    """initial in the data's dtype (CPU converts it to scalar_t first), computed in comp."""
    return b.broadcast_in_dim(b.convert(b.convert(initial, dtype), comp), shape, ())


@register(aten.segment_reduce.default)
def segment_reduce(b: GraphBuilder, data: Value, reduce: str, lengths: Value | None = None,
                   indices: Value | None = None, offsets: Value | None = None, axis: int = 0, unsafe: bool = False,
                   initial: Value | None = None) -> Value:
    """data reduced over each segment along axis: [*pre, S, *post]."""
    check(indices is None, "segment_reduce(): indices based reduction is not supported yet.")
    seg = _Segments(b, data, reduce, lengths, offsets, axis, "segment_reduce")
    comp = opmath(data.dtype)
    shape = seg.seg_shape()
    kind = seg.kind
    init = _initial(b, initial, data.dtype, comp, shape) if initial is not None else None
    if comp != data.dtype and kind != "max" and kind != "min" and seg.d <= _FOLD_MAX:
        # Half types: CPU's running value is itself a half, rounded after every element.
        start = init if init is not None else b.full(_IDENTITY[kind], comp, shape)
        red = seg.fold(b, b.convert(data, comp), "prod" if kind == "prod" else "sum", start, data.dtype)
    else:
        red = seg.per_segment(b, b.convert(data, comp), "sum" if kind == "mean" else kind, _IDENTITY[kind])
        if init is not None:
            op = {"sum": "add", "mean": "add", "prod": "mul", "max": "max", "min": "min"}[kind]
            red = b.binary(op, init, red)  # max/min propagate a NaN initial, as CPU's std::max chain
    if kind == "mean":
        length = seg.seg_lengths(b, data.dtype, comp)
        empty = b.compare("le", length, b.full(0, comp, shape))
        mean = b.div(red, length)
        # An empty segment keeps initial (not divided), or is NaN without one, as on CPU.
        red = b.select(empty, init if init is not None else b.full(float("nan"), comp, shape), mean)
    return b.convert(red, data.dtype)


def _isnan(b: GraphBuilder, x: Value) -> Value:
    return b.compare("ne", x, x)


@register(aten._segment_reduce_backward.default)
def segment_reduce_backward(b: GraphBuilder, grad: Value, output: Value, data: Value, reduce: str,
                            lengths: Value | None = None, offsets: Value | None = None, axis: int = 0,
                            initial: Value | None = None) -> Value:
    """The gradient for data, CPU's per-reduction rules (module docstring)."""
    seg = _Segments(b, data, reduce, lengths, offsets, axis, "segment_reduce")
    check(tuple(grad.shape) == seg.seg_shape() and tuple(output.shape) == seg.seg_shape(),
          f"segment_reduce backward: expected grad and output of shape {list(seg.seg_shape())}, got "
          f"{list(grad.shape)} and {list(output.shape)}")
    comp = opmath(data.dtype)
    zero = b.full(0.0, comp, data.shape)
    if seg.s == 0 or 0 in data.shape:  # no element is in a segment
        return b.convert(zero, data.dtype)
    kind = seg.kind
    x = b.convert(data, comp)
    idx, inside = seg.owner(b)
    g = seg.to_data(b, b.convert(grad, comp), idx)
    if kind == "sum":
        gi = g
    elif kind == "mean":
        gi = b.div(g, seg.to_data(b, seg.seg_lengths(b, data.dtype, comp), idx))
    elif kind in ("max", "min"):
        out = seg.to_data(b, b.convert(output, comp), idx)
        hit = b.binary("and", inside, b.binary("or", _isnan(b, x), b.compare("eq", x, out)))
        count = seg.to_data(b, seg.per_segment(b, b.convert(hit, comp), "sum", 0), idx)
        count = b.convert(b.convert(count, data.dtype), comp)  # CPU divides by the count as a scalar_t
        gi = b.select(hit, g, zero)
        # CPU shares the gradient among tied elements only where it is positive (counter >= 2).
        share = b.binary("and", b.compare("ge", count, b.full(2.0, comp, count.shape)), b.compare("gt", gi, zero))
        gi = b.select(share, b.div(gi, count), gi)
    else:  # prod
        out = seg.to_data(b, b.convert(output, comp), idx)
        nan_x, zero_x = _isnan(b, x), b.compare("eq", x, zero)
        special = b.binary("or", nan_x, zero_x)
        one = b.full(1.0, comp, data.shape)
        # The product of the segment's other elements, for a zero or NaN element j: the regular
        # (non-zero, non-NaN) elements' product times what the other special ones contribute --
        # NaN if any other is NaN, else 0 if any other is 0, else 1.
        start = _initial(b, initial, data.dtype, comp, seg.seg_shape()) if initial is not None else None
        if comp != data.dtype and seg.d <= _FOLD_MAX:  # half types: CPU's per-step rounding
            regular = seg.fold(b, b.select(special, one, x), "prod",
                               start if start is not None else b.full(1.0, comp, seg.seg_shape()), data.dtype)
        else:
            regular = seg.per_segment(b, b.select(special, one, x), "prod", 1)
            if start is not None:
                regular = b.mul(start, regular)
        regular = seg.to_data(b, regular, idx)
        nans = seg.to_data(b, seg.per_segment(b, b.convert(nan_x, comp), "sum", 0), idx)
        zeros = seg.to_data(b, seg.per_segment(b, b.convert(zero_x, comp), "sum", 0), idx)
        other_nan = b.compare("gt", b.sub(nans, b.convert(nan_x, comp)), zero)
        other_zero = b.compare("gt", b.sub(zeros, b.convert(zero_x, comp)), zero)
        factor = b.select(other_nan, b.full(float("nan"), comp, data.shape), b.select(other_zero, zero, one))
        exclusive = b.mul(g, b.mul(regular, factor))
        safe_x = b.select(special, one, x)
        scaled = b.convert(b.convert(b.mul(g, out), data.dtype), comp)  # CPU rounds grad * output first
        gi = b.select(special, exclusive, b.div(scaled, safe_x))
    return b.convert(b.select(inside, gi, zero), data.dtype)
