"""Lowerings: view and shape ops with value semantics, and the copy ops built from them.

On the eager device the C++ layer implements views as metadata and never calls these. They
are used when a view op appears inside a traced decomposition or a compiled FX graph, where
only the values matter: every lowering here returns a fresh value with the view's contents.
The ``*_copy`` variants (functionalization's names for the same ops) share the lowerings.

Besides views: cat/stack, flip, roll, repeat, tril/triu, constant/reflection/replication
padding (with backward), and the ``*_scatter`` ops that write a view's values back.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .core import canonical_dim, contiguous_strides, numel, result_type
from .registry import register

aten = torch.ops.aten


# -- helpers shared with indexing.py ------------------------------------------------------------

def infer_size(shape: Sequence[int], n: int) -> list[int]:
    """Resolve one -1 in a view/reshape size against n elements (ATen's infer_size)."""
    shape = [int(s) for s in shape]
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = numel([s for s in shape if s != -1])
    if neg:
        if known == 0 or n % known:
            raise RuntimeError(f"shape '{shape}' is invalid for input of size {n}")
        shape[neg[0]] = n // known
    if numel(shape) != n:
        raise RuntimeError(f"shape '{shape}' is invalid for input of size {n}")
    return shape


def move_dim_last(b: GraphBuilder, x: Value, d: int) -> tuple[Value, list[int]]:
    """x with dim d moved to the end, and the inverse permutation."""
    perm = [i for i in range(x.rank) if i != d] + [d]
    inv = [perm.index(i) for i in range(x.rank)]
    return b.transpose(x, perm), inv


def i64(b: GraphBuilder, v: int) -> Value:
    return b.constant(int(v), torch.int64)


def full_i64(b: GraphBuilder, v: int, shape: Sequence[int]) -> Value:
    return b.full(int(v), torch.int64, shape)


def affine_index(b: GraphBuilder, shape: Sequence[int], axis: int, start: int, step: int) -> Value:
    """int64 tensor of `shape` with value start + i*step along axis (broadcast elsewhere)."""
    idx = b.iota(torch.int64, shape, axis)
    if step != 1:
        idx = b.mul(idx, full_i64(b, step, shape))
    if start != 0:
        idx = b.add(idx, full_i64(b, start, shape))
    return idx


def take_along_axis(b: GraphBuilder, x: Value, axis: int, idx1d: Value) -> Value:
    """x indexed along axis by the 1-D int64 index idx1d (like index_select without checks)."""
    shape = list(x.shape)
    shape[axis] = idx1d.shape[0]
    index = b.broadcast_in_dim(idx1d, shape, [axis])
    return b.gather(x, index, axis)


# -- views --------------------------------------------------------------------------------------

@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default,
          aten._reshape_copy.default)
def view(b: GraphBuilder, x: Value, size: Sequence[int]) -> Value:
    return b.reshape(x, infer_size(size, x.numel()))


@register(aten._reshape_alias.default, aten._reshape_alias_copy.default)
def reshape_alias(b: GraphBuilder, x: Value, size: Sequence[int], stride: Sequence[int]) -> Value:
    # Only emitted for strides a contiguous reshape would produce, so the values are a reshape.
    return b.reshape(x, list(size))


@register(aten.alias.default, aten.alias_copy.default, aten.lift_fresh_copy.default)
def alias(b: GraphBuilder, x: Value) -> Value:
    return x


@register(aten.expand.default, aten.expand_copy.default)
def expand(b: GraphBuilder, x: Value, size: Sequence[int], implicit: bool = False) -> Value:
    size = list(size)
    if len(size) < x.rank:
        raise RuntimeError(f"expand: the number of sizes provided ({len(size)}) must be greater or equal to the "
                           f"number of dimensions in the tensor ({x.rank})")
    lead = len(size) - x.rank
    out = []
    for i, s in enumerate(size):
        if i < lead:
            if s < 0:
                raise RuntimeError(f"expand: -1 is not allowed in a leading, non-existing dimension {i}")
            out.append(s)
            continue
        have = x.shape[i - lead]
        if s == -1:
            s = have
        if have != s and have != 1:
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing size ({have}) at "
                               f"non-singleton dimension {i}.  Target sizes: {size}.  Tensor sizes: {list(x.shape)}")
        out.append(s)
    return b.broadcast_in_dim(x, out, list(range(lead, len(out))))


@register(aten.permute.default, aten.permute_copy.default)
def permute(b: GraphBuilder, x: Value, dims: Sequence[int]) -> Value:
    if len(dims) != x.rank:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the "
                           f"length of the desired ordering of dimensions i.e. input.dim() = {x.rank} is not "
                           f"equal to len(dims) = {len(dims)}")
    perm = [canonical_dim(d, x.rank) for d in dims]
    if len(set(perm)) != len(perm):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return b.transpose(x, perm)


@register(aten.transpose.int, aten.transpose_copy.int)
def transpose(b: GraphBuilder, x: Value, dim0: int, dim1: int) -> Value:
    if x.rank == 0:
        canonical_dim(dim0, 0), canonical_dim(dim1, 0)
        return x
    d0, d1 = canonical_dim(dim0, x.rank), canonical_dim(dim1, x.rank)
    perm = list(range(x.rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.transpose(x, perm)


@register(aten.t.default, aten.t_copy.default)
def t(b: GraphBuilder, x: Value) -> Value:
    if x.rank > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.rank}D")
    return b.transpose(x, [1, 0]) if x.rank == 2 else x


@register(aten.numpy_T.default)
def numpy_t(b: GraphBuilder, x: Value) -> Value:
    return b.transpose(x, list(reversed(range(x.rank))))


def _squeeze(b: GraphBuilder, x: Value, dims: Sequence[int] | None) -> Value:
    if dims is None:
        drop = {d for d in range(x.rank) if x.shape[d] == 1}
    else:
        drop = {d for d in (canonical_dim(d, x.rank) for d in dims) if x.rank and x.shape[d] == 1}
    return b.reshape(x, [s for d, s in enumerate(x.shape) if d not in drop])


@register(aten.squeeze.default, aten.squeeze_copy.default)
def squeeze(b, x):
    return _squeeze(b, x, None)


@register(aten.squeeze.dim, aten.squeeze_copy.dim)
def squeeze_dim(b, x, dim):
    return _squeeze(b, x, [dim])


@register(aten.squeeze.dims, aten.squeeze_copy.dims)
def squeeze_dims(b, x, dim):
    return _squeeze(b, x, dim)


@register(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(b: GraphBuilder, x: Value, dim: int) -> Value:
    d = canonical_dim(dim, x.rank + 1)
    shape = list(x.shape)
    shape.insert(d, 1)
    return b.reshape(x, shape)


def slice_bounds(size: int, start: int | None, end: int | None, step: int) -> tuple[int, int, int]:
    """ATen's slice normalization: wrap negatives once, clamp to [0, size], empty if end < start."""
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end, (end - start + step - 1) // step


@register(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(b: GraphBuilder, x: Value, dim: int = 0, start: int | None = None, end: int | None = None,
           step: int = 1) -> Value:
    d = canonical_dim(dim, x.rank)
    s, e, _ = slice_bounds(x.shape[d], start, end, step)
    lo, hi, st = [0] * x.rank, list(x.shape), [1] * x.rank
    lo[d], hi[d], st[d] = s, e, step
    return b.slice(x, lo, hi, st)


@register(aten.select.int, aten.select_copy.int)
def select(b: GraphBuilder, x: Value, dim: int, index: int) -> Value:
    d = canonical_dim(dim, x.rank)
    n = x.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(x.shape)} at dimension {d}")
    index %= n
    lo, hi = [0] * x.rank, list(x.shape)
    lo[d], hi[d] = index, index + 1
    return b.reshape(b.slice(x, lo, hi), [s for i, s in enumerate(x.shape) if i != d])


@register(aten.narrow.default, aten.narrow_copy.default)
def narrow(b: GraphBuilder, x: Value, dim: int, start: int, length: int) -> Value:
    d = canonical_dim(dim, x.rank)
    n = x.shape[d]
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got {start})")
    if start < 0:
        start += n
    if length < 0 or start + length > n:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return slice_(b, x, d, start, start + length, 1)


@register(aten.narrow.Tensor)
def narrow_tensor(b: GraphBuilder, x: Value, dim: int, start: Value, length: int) -> Value:
    # A runtime start: dynamic_slice (which clamps rather than raising on a bad start).
    d = canonical_dim(dim, x.rank)
    n = x.shape[d]
    s = b.reshape(b.convert(start, torch.int64), [])
    s = b.select(b.compare("lt", s, i64(b, 0)), b.add(s, i64(b, n)), s)
    starts = [s if i == d else i64(b, 0) for i in range(x.rank)]
    sizes = list(x.shape)
    sizes[d] = length
    return b.dynamic_slice(x, starts, sizes)


def _diag_geometry(n1: int, n2: int, offset: int) -> tuple[int, int]:
    """(flat start, length) of a diagonal in a row-major [n1, n2] matrix; the step is n2 + 1."""
    if offset >= 0:
        return offset, max(min(n1, n2 - offset), 0)
    return -offset * n2, max(min(n1 + offset, n2), 0)


def _diag_flat(b: GraphBuilder, x: Value, d1: int, d2: int) -> tuple[Value, list[int]]:
    """x with d1, d2 moved last and flattened into one dim; also the permuted shape."""
    rest = [i for i in range(x.rank) if i not in (d1, d2)]
    xt = b.transpose(x, rest + [d1, d2])
    return b.reshape(xt, [x.shape[i] for i in rest] + [x.shape[d1] * x.shape[d2]]), [x.shape[i] for i in rest]


@register(aten.diagonal.default, aten.diagonal_copy.default)
def diagonal(b: GraphBuilder, x: Value, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Value:
    d1, d2 = canonical_dim(dim1, x.rank), canonical_dim(dim2, x.rank)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n1, n2 = x.shape[d1], x.shape[d2]
    start, length = _diag_geometry(n1, n2, offset)
    flat, rest = _diag_flat(b, x, d1, d2)
    # The diagonal is a strided slice of the flattened matrix: elements start + i * (n2 + 1).
    if length == 0:
        lo, hi = 0, 0
    else:
        lo, hi = start, start + (length - 1) * (n2 + 1) + 1
    r = len(rest)
    return b.slice(flat, [0] * r + [lo], rest + [hi], [1] * r + [n2 + 1])


@register(aten.unfold.default, aten.unfold_copy.default)
def unfold(b: GraphBuilder, x: Value, dimension: int, size: int, step: int) -> Value:
    d = canonical_dim(dimension, x.rank)
    n = x.shape[d] if x.rank else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if x.rank == 0:
        return b.reshape(x, [1])
    windows = (n - size) // step + 1
    # One gather along d with index w*step + k, laid out [windows, size] and flattened.
    pattern = b.add(affine_index(b, [windows, size], 0, 0, step), b.iota(torch.int64, [windows, size], 1))
    xt, _ = move_dim_last(b, x, d)
    g = take_along_axis(b, xt, xt.rank - 1, b.reshape(pattern, [windows * size]))
    g = b.reshape(g, list(xt.shape[:-1]) + [windows, size])
    # xt is x without d, then d; the windows go back to position d, the window dim last.
    perm = list(range(x.rank - 1))
    perm.insert(d, x.rank - 1)
    return b.transpose(g, perm + [x.rank])


def _split_sizes(b: GraphBuilder, x: Value, sizes: Sequence[int], dim: int) -> list[Value]:
    d = canonical_dim(dim, x.rank)
    if sum(sizes) != x.shape[d]:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {x.shape[d]} (input tensor's "
                           f"size at dimension {d}), but got split_sizes={list(sizes)}")
    out, pos = [], 0
    for s in sizes:
        out.append(slice_(b, x, d, pos, pos + s, 1))
        pos += s
    return out


@register(aten.split_with_sizes.default, aten.split_with_sizes_copy.default, aten.split.sizes)
def split_with_sizes(b, x, split_sizes, dim=0):
    return _split_sizes(b, x, list(split_sizes), dim)


@register(aten.split.Tensor, aten.split_copy.Tensor)
def split(b, x, split_size, dim=0):
    d = canonical_dim(dim, x.rank)
    n = x.shape[d]
    if split_size <= 0 and n > 0:
        raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
    if n == 0:
        return [x]
    sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
    return _split_sizes(b, x, sizes, d)


@register(aten.unbind.int, aten.unbind_copy.int)
def unbind(b, x, dim=0):
    d = canonical_dim(dim, x.rank)
    return [select(b, x, d, i) for i in range(x.shape[d])]


@register(aten.chunk.default)
def chunk(b, x, chunks, dim=0):
    if chunks <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0")
    d = canonical_dim(dim, x.rank)
    n = x.shape[d]
    size = (n + chunks - 1) // chunks
    if n == 0:  # ATen returns `chunks` empty pieces here
        return _split_sizes(b, x, [0] * chunks, d)
    return split(b, x, size, d)


@register(aten.tensor_split.sections)
def tensor_split_sections(b, x, sections, dim=0):
    if sections <= 0:
        raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
    d = canonical_dim(dim, x.rank)
    n = x.shape[d]
    q, r = divmod(n, sections)
    return _split_sizes(b, x, [q + 1] * r + [q] * (sections - r), d)


@register(aten.tensor_split.indices)
def tensor_split_indices(b, x, indices, dim=0):
    d = canonical_dim(dim, x.rank)
    n = x.shape[d]
    out, prev = [], 0
    for i in list(indices) + [n]:
        s, e, _ = slice_bounds(n, prev, i, 1)
        out.append(slice_(b, x, d, s, e, 1))
        prev = i
    return out


@register(aten.as_strided.default, aten.as_strided_copy.default)
def as_strided(b: GraphBuilder, x: Value, size: Sequence[int], stride: Sequence[int],
               storage_offset: int | None = None) -> Value:
    """Values of the strided window over x's elements in row-major order (x as the storage)."""
    flat_idx = _strided_index(b, x, size, stride, storage_offset)
    flat = b.reshape(x, [x.numel()])
    g = b.gather(flat, b.reshape(flat_idx, [numel(size)]), 0)
    return b.reshape(g, list(size))


def _strided_index(b: GraphBuilder, x: Value, size: Sequence[int], stride: Sequence[int],
                   storage_offset: int | None) -> Value:
    size, stride, off = list(size), list(stride), storage_offset or 0
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape")
    if numel(size) > 0:
        last = off + sum((s - 1) * st for s, st in zip(size, stride))
        if last >= x.numel() or off < 0:
            raise RuntimeError(f"setStorage: sizes {size}, strides {stride}, storage offset {off} require a storage "
                               f"of {last + 1} elements, out of bounds for storage of size {x.numel()}")
    idx = full_i64(b, off, size)
    for d, st in enumerate(stride):
        if size[d] > 1 and st != 0:
            idx = b.add(idx, affine_index(b, size, d, 0, st))
    return idx


@register(aten.as_strided_scatter.default)
def as_strided_scatter(b: GraphBuilder, x: Value, src: Value, size: Sequence[int], stride: Sequence[int],
                       storage_offset: int | None = None) -> Value:
    idx = _strided_index(b, x, size, stride, storage_offset)
    if tuple(src.shape) != tuple(size):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                           f"slice size = {list(size)}")
    n = numel(size)
    flat = b.reshape(x, [x.numel()])
    out = b.scatter(flat, b.reshape(idx, [n]), b.reshape(b.convert(src, x.dtype), [n]), 0)
    return b.reshape(out, x.shape)


# -- concatenation ------------------------------------------------------------------------------

@register(aten.cat.default)
def cat(b: GraphBuilder, tensors: list[Value], dim: int = 0) -> Value:
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    dtype = result_type(*tensors)
    # Legacy rule: 1-D empty tensors are skipped (but still take part in type promotion).
    parts = [t for t in tensors if not (t.rank == 1 and t.shape[0] == 0)]
    if not parts:
        return b.full(0, dtype, [0])
    ref = parts[0]
    d = canonical_dim(dim, ref.rank)
    if ref.rank == 0:
        raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
    for i, p in enumerate(parts):
        if p.rank != ref.rank:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.rank} and {p.rank}")
        for k in range(ref.rank):
            if k != d and p.shape[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref.shape[k]} but got size {p.shape[k]} for tensor number {i} in the list.")
    parts = [b.convert(p, dtype) for p in parts if p.shape[d] > 0] or [b.convert(ref, dtype)]
    return b.concatenate(parts, d)


@register(aten.stack.default)
def stack(b: GraphBuilder, tensors: list[Value], dim: int = 0) -> Value:
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t_ in enumerate(tensors):
        if t_.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at "
                               f"entry 0 and {list(t_.shape)} at entry {i}")
    d = canonical_dim(dim, tensors[0].rank + 1)
    return cat(b, [unsqueeze(b, t_, d) for t_ in tensors], d)


@register(aten.hstack.default)
def hstack(b, tensors):
    ts = [b.reshape(t_, [1]) if t_.rank == 0 else t_ for t_ in tensors]
    return cat(b, ts, 0 if ts[0].rank == 1 else 1)


@register(aten.vstack.default)
def vstack(b, tensors):
    return cat(b, [b.reshape(t_, [1, t_.numel()]) if t_.rank < 2 else t_ for t_ in tensors], 0)


# -- copies that move data ----------------------------------------------------------------------

@register(aten.flip.default)
def flip(b: GraphBuilder, x: Value, dims: Sequence[int]) -> Value:
    ds = [canonical_dim(d, x.rank) for d in dims]
    if len(set(ds)) != len(ds):
        raise RuntimeError("dims has duplicates")
    return b.reverse(x, sorted(d for d in ds if x.rank))


@register(aten.roll.default)
def roll(b: GraphBuilder, x: Value, shifts: Sequence[int], dims: Sequence[int] = ()) -> Value:
    shifts, dims = list(shifts), list(dims)
    if x.numel() == 0:  # CPU returns an empty tensor before checking the dims
        if len(shifts) != len(dims) and (dims or len(shifts) != 1):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
        return x
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"`shifts` required to be of size 1 when `dims` is empty, got {len(shifts)}")
        flat = roll(b, b.reshape(x, [x.numel()]), shifts, [0])
        return b.reshape(flat, x.shape)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    for s, dim in zip(shifts, dims):
        d = canonical_dim(dim, x.rank)
        n = x.shape[d]
        if n == 0:
            continue
        k = s % n
        if k:
            # out = cat(x[n-k:], x[:n-k])
            x = b.concatenate([slice_(b, x, d, n - k, n), slice_(b, x, d, 0, n - k)], d)
    return x


@register(aten.repeat.default)
def repeat(b: GraphBuilder, x: Value, repeats: Sequence[int]) -> Value:
    reps = list(repeats)
    if len(reps) < x.rank:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    shape = [1] * (len(reps) - x.rank) + list(x.shape)
    # Broadcast [s0, s1, ...] into [r0, s0, r1, s1, ...], then merge each (r, s) pair.
    big = [v for r, s in zip(reps, shape) for v in (r, s)]
    y = b.broadcast_in_dim(b.reshape(x, shape), big, list(range(1, 2 * len(shape), 2)))
    return b.reshape(y, [r * s for r, s in zip(reps, shape)])


@register(aten.tile.default)
def tile(b, x, dims):
    dims = list(dims)
    return repeat(b, x, [1] * (x.rank - len(dims)) + dims)


def _tri(b: GraphBuilder, x: Value, diagonal: int, upper: bool) -> Value:
    if x.rank < 2:
        raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions")
    r = x.rank
    d = b.sub(b.iota(torch.int64, x.shape, r - 1), b.iota(torch.int64, x.shape, r - 2))  # col - row
    k = full_i64(b, diagonal, x.shape)
    keep = b.compare("ge" if upper else "le", d, k)
    return b.select(keep, x, b.full(0, x.dtype, x.shape))


@register(aten.tril.default)
def tril(b, x, diagonal=0):
    return _tri(b, x, diagonal, False)


@register(aten.triu.default)
def triu(b, x, diagonal=0):
    return _tri(b, x, diagonal, True)


# -- padding ------------------------------------------------------------------------------------

def _pad_pairs(pad: Sequence[int], rank: int, name: str) -> tuple[list[int], list[int]]:
    """Torch's pad list (last dim first, (lo, hi) pairs) as per-dim lo/hi lists."""
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise RuntimeError(f"{name}: Length of pad must be even but instead it equals {len(pad)}"
                           if len(pad) % 2 else f"{name}: Length of pad should be no more than twice the number "
                                                f"of dimensions of the input. Pad length is {len(pad)} while the "
                                                f"input has {rank} dimensions.")
    lo, hi = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        lo[rank - 1 - i], hi[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return lo, hi


@register(aten.constant_pad_nd.default)
def constant_pad_nd(b: GraphBuilder, x: Value, pad: Sequence[int], value: Value | None = None) -> Value:
    lo, hi = _pad_pairs(pad, x.rank, "constant_pad_nd")
    for d in range(x.rank):
        if x.shape[d] + lo[d] + hi[d] < 0:
            raise RuntimeError(f"The input size {x.shape[d]}, plus negative padding {lo[d]} and {hi[d]} resulted "
                               f"in a negative output size, which is invalid. Check dimension {d} of your input.")
    v = b.constant(0, x.dtype) if value is None else b.convert(value, x.dtype)
    return b.pad(x, v, lo, hi)


def _pad_index(b: GraphBuilder, n: int, lo: int, hi: int, mode: str) -> Value:
    """1-D source index for each padded output position (reflect or replicate)."""
    m = n + lo + hi
    i = b.sub(b.iota(torch.int64, [m], 0), full_i64(b, lo, [m]))
    if mode == "replicate":
        return b.min(b.max(i, full_i64(b, 0, [m])), full_i64(b, n - 1, [m]))
    # reflect without repeating the edge: i -> |i|, then (n-1) - |(n-1) - i|
    top = full_i64(b, n - 1, [m])
    return b.sub(top, b.abs(b.sub(top, b.abs(i))))


def _pad_nd(b: GraphBuilder, x: Value, padding: Sequence[int], k: int, mode: str) -> Value:
    name = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{k}d"
    if x.rank not in (k + 1, k + 2):
        raise RuntimeError(f"{name}: Expected {k + 1}D or {k + 2}D (batch mode) tensor with possibly 0 batch size "
                           f"and other non-zero dimensions for input, but got: {list(x.shape)}")
    lo, hi = _pad_pairs(padding, x.rank, name)
    for d in range(x.rank - k, x.rank):
        n = x.shape[d]
        if mode == "reflect" and (lo[d] >= n or hi[d] >= n):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({lo[d]}, {hi[d]}) at dimension {d} of input {list(x.shape)}")
        if n == 0 and (lo[d] or hi[d]):
            raise RuntimeError(f"{name}: input tensor must have non-zero size at dimension {d}")
        if n + lo[d] + hi[d] < 1:
            raise RuntimeError(f"{name}: input ({list(x.shape)}) is too small; calculated output has size "
                               f"{n + lo[d] + hi[d]} at dimension {d}")
        if lo[d] or hi[d]:
            x = take_along_axis(b, x, d, _pad_index(b, n, lo[d], hi[d], mode))
    return x


def _pad_nd_backward(b: GraphBuilder, g: Value, x: Value, padding: Sequence[int], k: int, mode: str) -> Value:
    """Sum each padded position's gradient into its source: a scatter-add per padded dim."""
    lo, hi = _pad_pairs(padding, x.rank, "pad_backward")
    comp = torch.float32 if g.dtype in (torch.float16, torch.bfloat16) else g.dtype
    g = b.convert(g, comp)
    for d in range(x.rank - k, x.rank):
        if not (lo[d] or hi[d]):
            continue
        n = x.shape[d]
        idx = b.broadcast_in_dim(_pad_index(b, n, lo[d], hi[d], mode), g.shape, [d])
        target = list(g.shape)
        target[d] = n
        g = b.scatter(b.full(0, comp, target), idx, g, d, "add")
    return b.convert(g, x.dtype)


def _register_pads() -> None:
    for k in (1, 2, 3):
        for mode, prefix in (("reflect", "reflection"), ("replicate", "replication")):
            fwd = getattr(aten, f"{prefix}_pad{k}d").default
            bwd = getattr(aten, f"{prefix}_pad{k}d_backward").default
            register(fwd)(lambda b, x, padding, k=k, mode=mode: _pad_nd(b, x, padding, k, mode))
            register(bwd)(lambda b, g, x, padding, k=k, mode=mode: _pad_nd_backward(b, g, x, padding, k, mode))


_register_pads()


# -- scatters of views --------------------------------------------------------------------------

def _check_src(src: Value, shape: Sequence[int], what: str) -> None:
    if tuple(src.shape) != tuple(shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                           f"slice size = {list(shape)}")


@register(aten.slice_scatter.default)
def slice_scatter(b: GraphBuilder, x: Value, src: Value, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1) -> Value:
    d = canonical_dim(dim, x.rank)
    s, _, count = slice_bounds(x.shape[d], start, end, step)
    shape = list(x.shape)
    shape[d] = count
    _check_src(src, shape, "slice")
    src = b.convert(src, x.dtype)
    if count == 0:
        return x
    if step == 1:
        starts = [i64(b, s if i == d else 0) for i in range(x.rank)]
        return b.dynamic_update_slice(x, src, starts)
    return b.scatter(x, affine_index(b, shape, d, s, step), src, d)


@register(aten.select_scatter.default)
def select_scatter(b: GraphBuilder, x: Value, src: Value, dim: int, index: int) -> Value:
    d = canonical_dim(dim, x.rank)
    n = x.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(x.shape)} at dimension {d}")
    _check_src(src, [s for i, s in enumerate(x.shape) if i != d], "select")
    upd = unsqueeze(b, b.convert(src, x.dtype), d)
    starts = [i64(b, index % n if i == d else 0) for i in range(x.rank)]
    return b.dynamic_update_slice(x, upd, starts)


@register(aten.diagonal_scatter.default)
def diagonal_scatter(b: GraphBuilder, x: Value, src: Value, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Value:
    d1, d2 = canonical_dim(dim1, x.rank), canonical_dim(dim2, x.rank)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n1, n2 = x.shape[d1], x.shape[d2]
    start, length = _diag_geometry(n1, n2, offset)
    flat, rest = _diag_flat(b, x, d1, d2)
    _check_src(src, rest + [length], "diagonal")
    if length == 0:
        return x
    idx = affine_index(b, rest + [length], len(rest), start, n2 + 1)
    out = b.scatter(flat, idx, b.convert(src, x.dtype), len(rest))
    # undo the flatten and the move of d1, d2 to the end
    out = b.reshape(out, rest + [n1, n2])
    perm = [i for i in range(x.rank) if i not in (d1, d2)] + [d1, d2]
    return b.transpose(out, [perm.index(i) for i in range(x.rank)])
