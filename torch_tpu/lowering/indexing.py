"""Lowerings: gathers, scatters, advanced indexing, sorting and searching.

Index checks follow CPU: ops that wrap negative indices (index/index_put, take, index_fill)
normalize them in the graph; the others pass indices through. Any index still outside its
dimension is routed to an invalid position of the IR gather/scatter, which raises IndexError on
the host runtime (RuntimeError for torch.gather and the scatter family, as on CPU; the reference
interpreter raises too), so bad indices never read silently.

Advanced indexing (index.Tensor / index_put) is one flat gather/scatter: the indexed dims are
moved to the front and merged into one, the broadcast indices become one linear row index, and
the remaining (sliced) dims form the row. One index tensor on one dim (`x[idx]`, `x[:, idx]`)
is index_select's gather on x as it is, after the wrap of negative indices.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .core import broadcast_shapes, broadcast_to, canonical_dim, contiguous_strides, numel, opmath
from .registry import register
from .shape import full_i64, move_dim_last, narrow, take_along_axis

aten = torch.ops.aten


# -- helpers ------------------------------------------------------------------------------------

def _as_index(b: GraphBuilder, idx: Value, what: str, uint8_is_mask: bool = True) -> Value:
    """int64 indices. For index/index_put, bool and uint8 tensors are masks (converted to integer
    indices by the C++ layer before lowering); other ops treat uint8 as plain integers."""
    if idx.dtype == torch.bool or (idx.dtype == torch.uint8 and uint8_is_mask):
        raise NotImplementedError(f"torch_tpu: bool/uint8 mask indices in {what} must be converted to integer "
                                  "indices before lowering")
    if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise IndexError(f"tensors used as indices must be long, int, byte or bool tensors")
    return b.convert(idx, torch.int64)


def _wrap(b: GraphBuilder, idx: Value, n: int) -> Value:
    """Negative indices count from the end; anything still out of range stays the index as
    written (>= n or < -n: still out of range), so the gather/scatter's error names it."""
    # Only [-n, 0) wraps: one select instead of wrapping every negative and undoing it.
    neg = b.binary("and", b.compare("lt", idx, full_i64(b, 0, idx.shape)),
                   b.compare("ge", idx, full_i64(b, -n, idx.shape)))
    return b.select(neg, b.add(idx, full_i64(b, n, idx.shape)), idx)


def _index_1d(b: GraphBuilder, index: Value, what: str) -> Value:
    index = _as_index(b, index, what, False)
    if index.rank > 1:
        raise IndexError(f"{what}(): Index is supposed to be a vector")
    return b.reshape(index, [index.numel()])


def _dim_of(x: Value, dim: int) -> int:
    return canonical_dim(dim, x.rank) if x.rank else 0


def _as_rank1(b: GraphBuilder, x: Value) -> Value:
    return b.reshape(x, [1]) if x.rank == 0 else x


# -- gather-style ops ---------------------------------------------------------------------------

@register(aten.index_select.default)
def index_select(b: GraphBuilder, x: Value, dim: int, index: Value) -> Value:
    d = _dim_of(x, dim)
    idx = _index_1d(b, index, "index_select")
    # CPU refuses any index into an empty dim before it reads one: a 1-d self with IndexError
    # (its vector kernel's bounds check), a higher rank with the RuntimeError below.
    if x.rank > 0 and x.shape[d] == 0 and idx.numel() > 0:
        if x.rank == 1:
            raise IndexError("index out of range in self")
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    out = take_along_axis(b, _as_rank1(b, x), d, idx)
    return b.reshape(out, []) if x.rank == 0 else out


@register(aten.gather.default)
def gather(b: GraphBuilder, x: Value, dim: int, index: Value, sparse_grad: bool = False) -> Value:
    d = _dim_of(x, dim)
    index = _as_index(b, index, "gather", False)
    if index.numel() == 0:
        return b.full(0, x.dtype, index.shape)
    # An out-of-range index raises RuntimeError, as CPU's gather does (indexing: IndexError).
    if x.rank == 0 or index.rank == 0:
        r = b.gather(_as_rank1(b, x), b.reshape(index, [1]) if index.rank == 0 else index, d, runtime_error=True)
        return b.reshape(r, index.shape)
    return b.gather(x, index, d, runtime_error=True)


@register(aten.take.default)
def take(b: GraphBuilder, x: Value, index: Value) -> Value:
    flat = b.reshape(x, [x.numel()])
    idx = _wrap(b, b.reshape(_as_index(b, index, "take", False), [index.numel()]), x.numel())
    return b.reshape(b.gather(flat, idx, 0), index.shape)


@register(aten.take_along_dim.default)
def take_along_dim(b: GraphBuilder, x: Value, indices: Value, dim: int | None = None) -> Value:
    indices = _as_index(b, indices, "take_along_dim", False)
    if dim is None:
        return b.gather(b.reshape(x, [x.numel()]), b.reshape(indices, [indices.numel()]), 0)
    d = canonical_dim(dim, x.rank)
    # broadcast all dims except d
    xs, is_ = list(x.shape), list(indices.shape)
    xs[d], is_[d] = 1, 1
    common = broadcast_shapes(xs, is_)
    xt, it = list(common), list(common)
    xt[d], it[d] = x.shape[d], indices.shape[d]
    return b.gather(broadcast_to(b, x, xt), broadcast_to(b, indices, it), d)


# -- scatter-style ops --------------------------------------------------------------------------

def _scatter_src(b: GraphBuilder, index: Value, src: Value, dtype: torch.dtype) -> Value:
    """torch.scatter reads only src's leading index-shaped block."""
    src = b.convert(src, dtype)
    if src.shape != index.shape:
        src = b.slice(src, [0] * src.rank, list(index.shape))
    return src


def _scatter(b: GraphBuilder, x: Value, dim: int, index: Value, src: Value, mode: str) -> Value:
    d = _dim_of(x, dim)
    index = _as_index(b, index, "scatter", False)
    if index.numel() == 0:
        return x
    # An out-of-range index raises RuntimeError, as CPU's scatter does (index_put_: IndexError).
    if x.rank == 0:
        r = b.scatter(b.reshape(x, [1]), b.reshape(index, [1]), b.reshape(src, [1]), 0, mode, runtime_error=True)
        return b.reshape(r, [])
    return b.scatter(x, index, src, d, mode, runtime_error=True)


_REDUCE_MODE = {"add": "add", "multiply": "mul", "sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


@register(aten.scatter.src)
def scatter_src(b, x, dim, index, src):
    return _scatter(b, x, dim, index, _scatter_src(b, index, src, x.dtype), "replace")


@register(aten.scatter.value)
def scatter_value(b, x, dim, index, value):
    return _scatter(b, x, dim, index, b.broadcast_in_dim(b.convert(value, x.dtype), index.shape, ()), "replace")


@register(aten.scatter.reduce)
def scatter_reduce_legacy(b, x, dim, index, src, reduce):
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    return _scatter(b, x, dim, index, _scatter_src(b, index, src, x.dtype), _REDUCE_MODE[reduce])


@register(aten.scatter.value_reduce)
def scatter_value_reduce(b, x, dim, index, value, reduce):
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    v = b.broadcast_in_dim(b.convert(value, x.dtype), index.shape, ())
    return _scatter(b, x, dim, index, v, _REDUCE_MODE[reduce])


@register(aten.scatter_add.default)
def scatter_add(b, x, dim, index, src):
    return _scatter(b, x, dim, index, _scatter_src(b, index, src, x.dtype), "add")


_IDENTITY = {"sum": 0, "mean": 0, "prod": 1}


def _reduce_identity(reduce: str, dtype: torch.dtype) -> float | int | bool:
    if reduce in _IDENTITY:
        return _IDENTITY[reduce]
    if dtype.is_floating_point:
        return float("-inf") if reduce == "amax" else float("inf")
    if dtype == torch.bool:
        return reduce == "amin"
    info = torch.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


@register(aten.scatter_reduce.two)
def scatter_reduce(b: GraphBuilder, x: Value, dim: int, index: Value, src: Value, reduce: str,
                   include_self: bool = True) -> Value:
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if index.numel() == 0:
        return x
    src = _scatter_src(b, index, src, x.dtype)
    base = x
    if not include_self:
        # Positions that receive at least one element start from the reduction's identity.
        hit = _scatter(b, b.full(False, torch.bool, x.shape), dim, index,
                       b.full(True, torch.bool, index.shape), "replace")
        base = b.select(hit, b.full(_reduce_identity(reduce, x.dtype), x.dtype, x.shape), x)
    if reduce != "mean":
        return _scatter(b, base, dim, index, src, _REDUCE_MODE[reduce])
    total = _scatter(b, base, dim, index, src, "add")
    count = _scatter(b, b.full(1 if include_self else 0, torch.int64, x.shape), dim, index,
                     full_i64(b, 1, index.shape), "add")
    count = b.max(count, full_i64(b, 1, x.shape))  # untouched positions keep their value
    if x.dtype.is_floating_point:
        comp = opmath(x.dtype)
        return b.convert(b.div(b.convert(total, comp), b.convert(count, comp)), x.dtype)
    # integer mean rounds toward -inf (div with rounding_mode="floor")
    t64 = b.convert(total, torch.int64)
    q = b.div(t64, count)
    fix = b.binary("and", b.compare("ne", b.mul(q, count), t64), b.compare("lt", t64, full_i64(b, 0, x.shape)))
    q = b.select(fix, b.sub(q, full_i64(b, 1, x.shape)), q)
    return b.convert(q, x.dtype)


def _index_source(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value,
                  what: str) -> tuple[int, Value, Value, Value]:
    """index_add/index_copy/index_reduce operands: (dim, x as rank >= 1, source in x's dtype,
    the index spread over source's slices along dim), after ATen's shape checks."""
    d = _dim_of(x, dim)
    idx = _index_1d(b, index, what)
    xs = _as_rank1(b, x)
    src = b.convert(source, x.dtype)
    src = b.reshape(src, [1]) if source.rank == 0 else src
    if src.rank != xs.rank or any(src.shape[k] != xs.shape[k] for k in range(xs.rank) if k != d) \
            or src.shape[d] != idx.shape[0]:
        raise RuntimeError(f"{what}(): Source/destination tensor must have same slice shapes and the index length "
                           f"must match the source size along dim {d}")
    return d, xs, src, b.broadcast_in_dim(idx, src.shape, [d])


def _index_scatter(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value, mode: str,
                   what: str) -> Value:
    """index_add/index_copy: source slices written at index positions along dim."""
    d, xs, src, full = _index_source(b, x, dim, index, source, what)
    if full.numel() == 0 or (what == "index_add" and x.rank > 1 and x.numel() == 0):
        return x  # (CPU's index_add returns before reading the index when x has rank > 1 and no elements)
    return b.reshape(b.scatter(xs, full, src, d, mode), x.shape)


@register(aten.index_reduce.default)
def index_reduce(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value, reduce: str,
                 include_self: bool = True) -> Value:
    """index_reduce is scatter_reduce with the index spread over source's slices along dim: the
    same counts for "mean" (self counted when included, floor division for integers)."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    d, xs, src, full = _index_source(b, x, dim, index, source, "index_reduce")
    if full.numel() == 0:
        return x
    return b.reshape(scatter_reduce(b, xs, d, full, src, reduce, include_self), x.shape)


@register(aten.index_add.default)
def index_add(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value, alpha: Value) -> Value:
    src = b.convert(source, x.dtype)
    if not (alpha.const is not None and alpha.const == 1):
        src = b.mul(src, b.broadcast_in_dim(b.convert(alpha, x.dtype), src.shape, ())) if x.dtype != torch.bool \
            else b.binary("and", src, b.broadcast_in_dim(b.convert(alpha, torch.bool), src.shape, ()))
    return _index_scatter(b, x, dim, index, src, "add", "index_add")


@register(aten.index_copy.default)
def index_copy(b, x, dim, index, source):
    return _index_scatter(b, x, dim, index, source, "replace", "index_copy")


def _index_fill(b: GraphBuilder, x: Value, dim: int, index: Value, value: Value) -> Value:
    d = _dim_of(x, dim)
    xs = _as_rank1(b, x)
    idx = _wrap(b, _index_1d(b, index, "index_fill"), xs.shape[d])
    if idx.shape[0] == 0:
        return x
    shape = list(xs.shape)
    shape[d] = idx.shape[0]
    v = b.broadcast_in_dim(b.convert(b.reshape(value, []), x.dtype), shape, ())
    return b.reshape(b.scatter(xs, b.broadcast_in_dim(idx, shape, [d]), v, d), x.shape)


@register(aten.index_fill.int_Scalar)
def index_fill_scalar(b, x, dim, index, value):
    return _index_fill(b, x, dim, index, value)


@register(aten.index_fill.int_Tensor)
def index_fill_tensor(b, x, dim, index, value):
    if value.rank != 0:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.rank} dimension(s).")
    return _index_fill(b, x, dim, index, value)


# -- advanced indexing --------------------------------------------------------------------------

def _plan(b: GraphBuilder, x: Value, indices: Sequence[Value | None], what: str):
    """Shared index.Tensor / index_put analysis.

    Returns (rows, lin, bshape, perm_out, out_shape): rows is x as [A, R] with the indexed
    dims first; lin the flat row index [nB] (an invalid entry is the index as written when one
    dim is indexed, else -1; either fails the gather/scatter's check); bshape the broadcast index
    shape; out_shape the indexing result and perm_out the permutation from [*bshape, *rest]
    to it.
    """
    if len(indices) > x.rank:
        raise IndexError(f"too many indices for tensor of dimension {x.rank} (got {len(indices)})")
    idx = list(indices) + [None] * (x.rank - len(indices))
    adv = [d for d, i in enumerate(idx) if i is not None]
    if not adv:
        raise RuntimeError(f"{what}: at least one index must be a tensor")
    vals = {d: _as_index(b, idx[d], what) for d in adv}
    bshape = list(broadcast_shapes(*[v.shape for v in vals.values()]))
    rest = [d for d in range(x.rank) if d not in adv]
    xt = b.transpose(x, adv + rest)
    a_sizes = [x.shape[d] for d in adv]
    r_sizes = [x.shape[d] for d in rest]
    A, R = numel(a_sizes), numel(r_sizes)
    rows = b.reshape(xt, [A, R])
    nb = numel(bshape)
    lin = full_i64(b, 0, bshape)
    bad = b.full(False, torch.bool, bshape)
    for stride, d in zip(contiguous_strides(a_sizes), adv):
        n = x.shape[d]
        i = broadcast_to(b, vals[d], bshape)
        z, nn = full_i64(b, 0, bshape), full_i64(b, n, bshape)
        i = b.select(b.compare("lt", i, z), b.add(i, nn), i)
        bad = b.binary("or", bad, b.binary("or", b.compare("lt", i, z), b.compare("ge", i, nn)))
        lin = b.add(lin, b.mul(i, full_i64(b, stride, bshape)))
    if len(adv) == 1:
        # One indexed dim: a bad index reaches the gather/scatter as the user wrote it, so the
        # IndexError names it (as CPU's does). Wrapped, it is >= n or < 0 exactly when it was bad.
        raw = broadcast_to(b, vals[adv[0]], bshape)
        lin = b.select(bad, raw, lin)
    else:
        lin = b.select(bad, full_i64(b, -1, bshape), lin)
    lin = b.reshape(lin, [nb])
    # Adjacent advanced indices keep their place; separated ones move the result dims first.
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    k = len(bshape)
    if adjacent and adv[0] > 0:
        p = adv[0]
        perm_out = list(range(k, k + p)) + list(range(k)) + list(range(k + p, k + len(rest)))
    else:
        perm_out = list(range(k + len(rest)))
    grouped = bshape + r_sizes
    out_shape = [grouped[q] for q in perm_out]
    return rows, lin, bshape, r_sizes, perm_out, out_shape, adv + rest


def _index_one_dim(b: GraphBuilder, x: Value, d: int, index: Value) -> Value:
    """x[:, ..., index] with one index tensor on dim d: index_select's graph (one gather on x as
    it is, a row gather on dim 0) plus the wrap of negative indices. The general plan's
    transposes, flat row index and masks cost a host step each (a few us per call: vLLM's
    runner indexes its hidden states so every step); the wrap's four int64 steps remain."""
    idx = _as_index(b, index, "index")
    n, k = x.shape[d], idx.numel()
    flat = _wrap(b, b.reshape(idx, [k]), n)  # an out-of-range index reaches the gather as written
    out_shape = list(x.shape[:d]) + list(idx.shape) + list(x.shape[d + 1:])
    if k == 0 or numel(out_shape) == 0:
        return b.full(0, x.dtype, out_shape)
    return b.reshape(take_along_axis(b, x, d, flat), out_shape)


@register(aten.index.Tensor, aten.index.Tensor_hacked_twin, aten._unsafe_index.Tensor)
def index(b: GraphBuilder, x: Value, indices: Sequence[Value | None]) -> Value:
    adv = [d for d, i in enumerate(indices) if i is not None]
    if len(adv) == 1 and len(indices) <= x.rank:
        return _index_one_dim(b, x, adv[0], indices[adv[0]])
    rows, lin, bshape, r_sizes, perm_out, out_shape, _ = _plan(b, x, indices, "index")
    nb, R = lin.shape[0], rows.shape[1]
    if nb == 0 or R == 0:
        return b.full(0, x.dtype, out_shape)
    g = b.gather(rows, b.broadcast_in_dim(lin, [nb, R], [0]), 0)
    return b.transpose(b.reshape(g, bshape + r_sizes), perm_out)


@register(aten.index_put.default, aten.index_put.hacked_twin, aten._unsafe_index_put.default)
def index_put(b: GraphBuilder, x: Value, indices: Sequence[Value | None], values: Value,
              accumulate: bool = False) -> Value:
    masked = _masked_fill_put(b, x, indices, values, accumulate)
    if masked is not None:
        return masked
    rows, lin, bshape, r_sizes, perm_out, out_shape, perm_in = _plan(b, x, indices, "index_put")
    nb, R = lin.shape[0], rows.shape[1]
    if nb and any(i is not None and x.shape[d] == 0 for d, i in enumerate(indices)):
        # CPU checks this from the shapes alone, even when no element would be written (R == 0).
        raise IndexError("index is out of bounds for dimension with size 0")
    # CPU's order: index checks (_plan), the source's shape, its dtype; indices in the kernel.
    vs = list(values.shape)
    if len(vs) > len(out_shape) or any(v not in (1, o) for v, o in zip(vs[::-1], out_shape[::-1])):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(out_shape)}")
    _check_put_dtype(x, values)
    if nb == 0 or R == 0:
        return x
    v = broadcast_to(b, b.convert(values, x.dtype), out_shape)
    v = b.reshape(b.transpose(v, [perm_out.index(q) for q in range(len(perm_out))]), [nb, R])
    mode = "add" if accumulate else "replace"
    if accumulate and x.dtype == torch.bool:  # sum of bools saturates: an "or"
        mode = "max"
    out = b.scatter(rows, b.broadcast_in_dim(lin, [nb, R], [0]), v, 0, mode)
    out = b.reshape(out, [x.shape[d] for d in perm_in])
    return b.transpose(out, [perm_in.index(d) for d in range(x.rank)])


def _check_put_dtype(x: Value, values: Value) -> None:
    """CPU's index_put check (a single-valued put through one mask is a masked_fill instead, which
    converts the value: the C++ layer converts it before an eager mask becomes indices)."""
    if values.dtype != x.dtype:
        from .elementwise import _tname  # elementwise does not import indexing
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got {_tname(x.dtype)} for "
                           f"the destination and {_tname(values.dtype)} for the source.")


def _masked_fill_put(b: GraphBuilder, x: Value, indices: Sequence[Value | None], values: Value,
                     accumulate: bool) -> Value | None:
    """``x[mask] = v`` (or ``+=``) with one mask over x's leading dims and a single value: a
    select, with no host read of the mask. Torch.compile graphs keep the mask (eager mode
    turns masks into integer indices before lowering); other masked puts need the True count."""
    present = [i for i in indices if i is not None]
    if len(present) != 1 or indices[0] is None or not isinstance(indices[0], Value):
        return None
    mask = indices[0]
    # (uint8 masks stay on the general path: CPU rejects them here, in masked_fill_.)
    if mask.dtype != torch.bool or tuple(x.shape[:mask.rank]) != tuple(mask.shape) or values.numel() != 1 or \
            values.rank > x.rank - mask.rank:
        return None
    if accumulate:  # CPU's masked_fill path is for plain puts only
        _check_put_dtype(x, values)
    m = b.broadcast_in_dim(mask, list(x.shape), list(range(mask.rank)))
    v = broadcast_to(b, b.convert(values, x.dtype), x.shape)
    if not accumulate:
        return b.select(m, v, x)
    if x.dtype == torch.bool:
        return b.binary("or", x, b.binary("and", m, v))
    return b.select(m, b.add(x, v), x)


@register(aten._index_put_impl.default)
def index_put_impl(b: GraphBuilder, x: Value, indices: Sequence[Value | None], values: Value,
                   accumulate: bool = False, unsafe: bool = False) -> Value:
    """The functional form of _index_put_impl_ (what index_put_ and index backward call); `unsafe`
    only skips CPU's bounds checks, which the lowering always performs."""
    return index_put(b, x, indices, values, accumulate)


# -- masked ops ---------------------------------------------------------------------------------

@register(aten.masked_scatter.default)
def masked_scatter(b: GraphBuilder, x: Value, mask: Value, source: Value) -> Value:
    """Position p of the k-th True in mask (row-major) takes source.flatten()[k]."""
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_only supports boolean masks, but got mask with dtype {mask.dtype}")
    shape = broadcast_shapes(x.shape, mask.shape)
    xb, mb = broadcast_to(b, x, shape), broadcast_to(b, mask, shape)
    n = numel(shape)
    if n == 0:
        return xb
    src = b.convert(b.reshape(source, [source.numel()]), x.dtype)
    mflat = b.reshape(mb, [n])
    if source.numel() == 0:
        # Any True then reads past the end of source: route it to the invalid index -1.
        src = b.full(0, x.dtype, [1])
        pos = b.select(mflat, full_i64(b, -1, [n]), full_i64(b, 0, [n]))
    else:
        k = b.sub(b.scan(b.convert(mflat, torch.int64), "sum", 0), full_i64(b, 1, [n]))
        pos = b.max(k, full_i64(b, 0, [n]))
        over = b.compare("ge", pos, full_i64(b, source.numel(), [n]))
        pos = b.select(b.binary("and", mflat, over), full_i64(b, -1, [n]), b.select(over, full_i64(b, 0, [n]), pos))
    # Too few source elements is CPU's RuntimeError, not an indexing IndexError.
    taken = b.gather(src, pos, 0, runtime_error=True)
    return b.reshape(b.select(mflat, taken, b.reshape(xb, [n])), shape)


@register(aten.nonzero_static.default)
def nonzero_static(b: GraphBuilder, x: Value, size: int, fill_value: int = -1) -> Value:
    """The first `size` nonzero coordinates, padded with fill_value: a compaction scatter."""
    n, r = x.numel(), x.rank
    if size < 0:
        raise RuntimeError(f"nonzero_static: 'size' must be an non-negative integer, but got {size}")
    if n == 0 or size == 0:
        return b.full(fill_value, torch.int64, [size, r])
    flat = b.reshape(x, [n])
    nz = b.compare("ne", flat, b.full(0, x.dtype, [n])) if x.dtype != torch.bool else flat
    pos = b.sub(b.scan(b.convert(nz, torch.int64), "sum", 0), full_i64(b, 1, [n]))
    # zeros and nonzeros beyond `size` all write the spare slot `size`, which is dropped
    keep = b.binary("and", nz, b.compare("lt", pos, full_i64(b, size, [n])))
    dest = b.select(keep, pos, full_i64(b, size, [n]))
    lin = b.scatter(full_i64(b, -1, [size + 1]), dest, b.iota(torch.int64, [n], 0), 0)
    lin = b.slice(lin, [0], [size])
    valid = b.compare("ge", lin, full_i64(b, 0, [size]))
    cols = []
    for stride, s in zip(contiguous_strides(x.shape), x.shape):
        c = b.rem(b.div(lin, full_i64(b, stride, [size])), full_i64(b, max(s, 1), [size]))
        cols.append(b.reshape(b.select(valid, c, full_i64(b, fill_value, [size])), [size, 1]))
    if r == 0:
        return b.full(0, torch.int64, [size, 0])
    return b.concatenate(cols, 1)


# -- sorting ------------------------------------------------------------------------------------

def _sort(b: GraphBuilder, x: Value, dim: int, descending: bool) -> tuple[Value, Value]:
    d = canonical_dim(dim, x.rank)  # a 0-d tensor takes dims -1 and 0 only
    if x.rank == 0:
        return x, b.full(0, torch.int64, ())
    perm = b.sort(x, d, descending)
    return b.gather(x, perm, d), perm


@register(aten.sort.default)
def sort(b, x, dim=-1, descending=False):
    return _sort(b, x, dim, descending)


@register(aten.sort.stable)
def sort_stable(b, x, stable=None, dim=-1, descending=False):
    return _sort(b, x, dim, descending)


@register(aten.mode.default)
def mode(b: GraphBuilder, x: Value, dim: int = -1, keepdim: bool = False) -> tuple[Value, Value]:
    """The most frequent value along dim (the smallest among equally frequent ones, as ATen's
    kernels) and an index where it occurs (which one is unspecified: CPU returns one picked by
    an unstable sort). A stable sort, runs of equal neighbours (NaN equals nothing), each
    run's length by a scatter-add, then the first element of the longest run."""
    from .reductions import _arg, cumsum  # reductions does not import indexing

    d = canonical_dim(dim, x.rank)
    if x.rank == 0:
        return x, b.full(0, torch.int64, ())
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    values, perm = _sort(b, x, d, False)
    starts = b.full(True, torch.bool, [*x.shape[:d], 1, *x.shape[d + 1:]])
    if n > 1:
        differs = b.compare("ne", narrow(b, values, d, 1, n - 1), narrow(b, values, d, 0, n - 1))
        starts = b.concatenate([starts, differs], d)
    run_of = b.sub(cumsum(b, b.convert(starts, torch.int64), d), full_i64(b, 1, x.shape))
    lengths = b.scatter(full_i64(b, 0, x.shape), run_of, full_i64(b, 1, x.shape), d, "add")
    best = _arg(b, b.gather(lengths, run_of, d), "argmax", d)  # the first element of a longest run
    best = b.reshape(best, [*x.shape[:d], 1, *x.shape[d + 1:]])
    out_v, out_i = b.gather(values, best, d), b.gather(perm, best, d)
    reduced = [*x.shape[:d], *x.shape[d + 1:]]
    if not keepdim:
        out_v, out_i = b.reshape(out_v, reduced), b.reshape(out_i, reduced)
    return out_v, out_i


@register(aten.argsort.default)
def argsort(b, x, dim=-1, descending=False):
    return _sort(b, x, dim, descending)[1]


@register(aten.argsort.stable)
def argsort_stable(b, x, stable, dim=-1, descending=False):
    return _sort(b, x, dim, descending)[1]


@register(aten.msort.default)
def msort(b, x):
    return _sort(b, x, 0, False)[0]


@register(aten.topk.default)
def topk(b: GraphBuilder, x: Value, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    d = canonical_dim(dim, x.rank)
    n = x.shape[d] if x.rank else 1
    if not 0 <= k <= n:
        raise RuntimeError("selected index k out of range")
    vals, idx = _sort(b, x, d, largest)
    if x.rank == 0:
        return vals, idx
    lo, hi = [0] * x.rank, list(x.shape)
    hi[d] = k
    return b.slice(vals, lo, hi), b.slice(idx, lo, hi)


@register(aten.kthvalue.default)
def kthvalue(b: GraphBuilder, x: Value, k: int, dim: int = -1, keepdim: bool = False):
    d = canonical_dim(dim, x.rank)
    n = x.shape[d] if x.rank else 1
    if not 1 <= k <= n:
        raise IndexError(f"kthvalue(): selected number k out of range for dimension {d}")
    vals, idx = _sort(b, x, d, False)
    if x.rank == 0:
        return vals, idx
    lo, hi = [0] * x.rank, list(x.shape)
    lo[d], hi[d] = k - 1, k
    v, i = b.slice(vals, lo, hi), b.slice(idx, lo, hi)
    if not keepdim:
        shape = [s for q, s in enumerate(x.shape) if q != d]
        v, i = b.reshape(v, shape), b.reshape(i, shape)
    return v, i


# -- searching ----------------------------------------------------------------------------------

def _search(b: GraphBuilder, seq: Value, vals: Value, right: bool, out_int32: bool) -> Value:
    """Insertion points: count of sequence elements < v (<= v for right), per innermost row.

    A dense compare-and-count (O(n*m) work), equal to a binary search on a sorted sequence.
    """
    dtype = torch.result_type(torch.empty((), dtype=seq.dtype), torch.empty((), dtype=vals.dtype)) \
        if seq.dtype != vals.dtype else seq.dtype
    seq, vals = b.convert(seq, dtype), b.convert(vals, dtype)
    n = seq.shape[-1] if seq.rank else 1
    if seq.rank <= 1:
        seq = b.reshape(seq, [n])
        shape = list(vals.shape) + [n]
        s = b.broadcast_in_dim(seq, shape, [len(shape) - 1])
        v = b.broadcast_in_dim(vals, shape, list(range(vals.rank)))
    else:
        if list(seq.shape[:-1]) != list(vals.shape[:-1]):
            raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                               "dimensions of boundaries tensor and input value tensor must match")
        m = vals.shape[-1]
        shape = list(vals.shape) + [n]
        lead = list(range(vals.rank - 1))
        s = b.broadcast_in_dim(seq, shape, lead + [len(shape) - 1])
        v = b.broadcast_in_dim(vals, shape, lead + [len(shape) - 2])
    # CPU's binary search tests !(s >= v) (left) / !(s > v) (right); the negated form sends a NaN
    # value past every boundary, as CPU does.
    before = b.unary("not", b.compare("gt" if right else "ge", s, v))
    cnt = b.reduce(b.convert(before, torch.int64), "sum", [len(shape) - 1])
    return b.convert(cnt, torch.int32 if out_int32 else torch.int64)


def _side(right: bool, side: str | None) -> bool:
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        return side == "right"
    return right


@register(aten.searchsorted.Tensor)
def searchsorted(b, seq, x, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        seq = b.gather(seq, sorter, seq.rank - 1)
    return _search(b, seq, x, _side(right, side), out_int32)


@register(aten.searchsorted.Scalar)
def searchsorted_scalar(b, seq, x, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        seq = b.gather(seq, sorter, seq.rank - 1)
    if seq.rank > 1:
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension "
                           "is 1")
    return _search(b, seq, b.reshape(x, []), _side(right, side), out_int32)


@register(aten.bucketize.Tensor)
def bucketize(b, x, boundaries, out_int32=False, right=False):
    if boundaries.rank != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.rank})")
    return _search(b, boundaries, x, right, out_int32)


@register(aten.bucketize.Scalar)
def bucketize_scalar(b, x, boundaries, out_int32=False, right=False):
    return bucketize(b, b.reshape(x, []), boundaries, out_int32, right)
