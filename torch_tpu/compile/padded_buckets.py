"""Padded buckets: one program per bucket of sizes for a learned dynamic-shape graph.

A graph learned across sizes (graph_templates) knows, for every integer of its lowered IR, how
it depends on the size s. This module builds the graph at a bucket size B >= s whose results,
for every s in the bucket, equal the graph's at s in their first fit(s) elements (design and
census: docs/notes/padded-buckets.md):

- every dimension whose size depends on s holds fit(B) elements, of which the first fit(s) are
  valid; a reshape that merges such a dimension with others keeps the factors, so an element
  is valid when each factor's digit of its index is below that factor's valid length;
- the valid lengths are computed in the program from the bases at s (s and the traced
  functions of it), passed as extra int64 scalar inputs: one executable serves every s of the
  bucket;
- whatever mixes elements along a padded dimension sees the padding masked: reductions read
  their identity there, contractions read 0 (a select, so garbage or NaN in the padding cannot
  leak in), scatter-adds add 0 at index 0, dynamic_update_slice writes back what was there;
- ops whose results would depend on the padding another way (a slice starting at an offset that
  depends on s, sorts, windows, random numbers, position values along a merged dimension, ...)
  reject the bucket with the reason, and the graph keeps exact programs per size.

Padded inputs and results cross the program boundary in their compact layout at s (valid
elements first, row-major): an input is bound as the first N_B elements of its storage and the
program rebuilds the padded layout from them; a result is compacted in the program and
returned as a contiguous view at s of its N_B-element storage, which the next padded graph
binds as it is (run_padded). Nothing outside the bucket program depends on s but views.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import _C
from ..ir.builder import OP_ID, OPS, REDUCE_KINDS, SCALAR_TYPE_CODE, SCATTER_MODES, _identity
from ..lowering.core import contiguous_strides
from .graph_templates import _apply
from .lower_graph import LoweredGraph

_Fit = tuple  # ((basis index, a), ...), c): sum(a * basis(s)) + c
_Factor = tuple  # (elements at B, valid length fit or None when all are valid)

_ELEMENTWISE = frozenset(OPS[OP_ID["neg"]:OP_ID["convert"] + 1])
_INT64 = SCALAR_TYPE_CODE[torch.int64]
_BOOL = SCALAR_TYPE_CODE[torch.bool]
_DTYPE = {v: k for k, v in SCALAR_TYPE_CODE.items()}
_MAX_ROWS = 64  # compaction by row moves up to this many rows; more take one gather


class Rejected(Exception):
    """The graph cannot run padded; the message says which op and why."""


@dataclass
class PaddedGraph:
    graph: LoweredGraph  # at the bucket size, with the bases as extra trailing int64 inputs
    bucket: int
    num_bases: int
    # input index -> per dim the factors (elements at B, valid length fit or None): inputs
    # bound as their first prod(shape at B) elements, in their row-major layout at s (the
    # program gathers the padded layout from them)
    padded_inputs: dict[int, list[tuple]]
    input_shapes: dict[int, tuple[int, ...]]
    # return index -> [(dim, valid length fit)]: results narrowed to their valid elements
    narrow: dict[int, list[tuple[int, _Fit]]]
    # return index -> per dim its factors: padded results the program compacts (their valid
    # elements first, row-major at s), returned as a contiguous view of those
    compact: dict[int, list[tuple]]
    # return index -> (input index, the "v" entry with its fits): views of padded inputs,
    # taken on the caller's tensor at s
    input_views: dict[int, tuple]
    # return index -> (the "w" entry, its fits): views, at s, of a compacted result
    base_views: dict[int, tuple]
    consts: dict[int, _Fit]  # return index -> the size it is (an int the graph returns)
    passed: dict[int, int]  # return index -> the padded input it returns


def _value(fit: _Fit, at: tuple[int, ...]) -> int:
    terms, c = fit
    return sum(a * at[k] for k, a in terms) + c


def _plain(dim: tuple) -> bool:
    return all(f[1] is None for f in dim)


def _uniform(dim: tuple) -> bool:
    """A padded dim that a broadcast made: its elements do not differ by position, so it takes
    the layout of whatever it meets (a merged [b * s] dim, say)."""
    return len(dim) == 1 and len(dim[0]) == 3


class _Emitter:
    """Rebuilds the node list with masks; new nodes are raw wire tuples."""

    def __init__(self, num_inputs: int, num_bases: int) -> None:
        self.nodes: list[tuple] = []
        self.bases = [self.add("parameter", (), _INT64, (), (num_inputs + k,)) for k in range(num_bases)]
        self.fit_cache: dict[_Fit, int] = {}

    def add(self, op: str, operands: tuple, dtype: int, shape: tuple, iattrs: tuple = (), fattrs: tuple = ()) -> int:
        self.nodes.append((OP_ID[op], tuple(operands), dtype, tuple(shape), tuple(iattrs), tuple(fattrs)))
        return len(self.nodes) - 1

    def const(self, value, dtype: int) -> int:
        if _DTYPE[dtype].is_floating_point:
            return self.add("constant", (), dtype, (), (), (float(value),))
        return self.add("constant", (), dtype, (), (int(value),))

    def fit(self, fit: _Fit) -> int:
        """A 0-d int64 node holding fit at the run's s."""
        node = self.fit_cache.get(fit)
        if node is None:
            terms, c = fit
            node = self.const(c, _INT64)
            for k, a in terms:
                term = self.bases[k] if a == 1 else self.add("mul", (self.bases[k], self.const(a, _INT64)), _INT64, ())
                node = self.add("add", (node, term), _INT64, ())
            self.fit_cache[fit] = node
        return node

    def broadcast(self, scalar: int, dtype: int, shape: tuple) -> int:
        return self.add("broadcast_in_dim", (scalar,), dtype, shape, ()) if shape else scalar

    def mask(self, validity: list[tuple], shape: tuple, dims: list[int] | None = None) -> int | None:
        """A bool node of `shape`: whether each element is valid along `dims` (all by default);
        None when every element is."""
        out = None
        for d in (range(len(shape)) if dims is None else dims):
            factors = validity[d]
            if _plain(factors):
                continue
            idx = self.add("iota", (), _INT64, shape, (d,))
            stride = 1
            for n, fit, *_ in reversed(factors):
                if fit is not None:
                    digit = idx
                    if stride > 1:
                        digit = self.add("div", (digit, self.broadcast(self.const(stride, _INT64), _INT64, shape)),
                                         _INT64, shape)
                    if stride * n < shape[d]:
                        digit = self.add("rem", (digit, self.broadcast(self.const(n, _INT64), _INT64, shape)),
                                         _INT64, shape)
                    ok = self.add("compare", (digit, self.broadcast(self.fit(fit), _INT64, shape)), _BOOL, shape,
                                  (2,))  # lt
                    out = ok if out is None else self.add("and", (out, ok), _BOOL, shape)
                stride *= n
        return out

    def layout(self, factors: list[tuple]) -> tuple[int, int]:
        """(index, valid) over the factor shape at B: each element's position in the row-major
        layout of the valid factors at s, and whether it is valid (both int64/bool nodes of
        the factor shape)."""
        shape = tuple(f[0] for f in factors)
        sizes = [self.fit(f[1]) if f[1] is not None else self.const(f[0], _INT64) for f in factors]
        index = valid = stride = None
        for k in reversed(range(len(factors))):
            digit = self.add("iota", (), _INT64, shape, (k,))
            if factors[k][1] is not None:
                ok = self.add("compare", (digit, self.broadcast(sizes[k], _INT64, shape)), _BOOL, shape, (2,))  # lt
                valid = ok if valid is None else self.add("and", (valid, ok), _BOOL, shape)
            if stride is not None:
                digit = self.add("mul", (digit, self.broadcast(stride, _INT64, shape)), _INT64, shape)
            index = digit if index is None else self.add("add", (index, digit), _INT64, shape)
            stride = sizes[k] if stride is None else self.add("mul", (stride, sizes[k]), _INT64, ())
        if valid is not None:
            index = self.add("select", (valid, index, self.broadcast(self.const(0, _INT64), _INT64, shape)),
                             _INT64, shape)
        return index, valid

    def rows(self, factors: list[tuple]) -> tuple[int, int, int] | None:
        """(rows, row length at B, the padded factor's index) when one factor is padded and at
        most _MAX_ROWS rows lie outside it: the layouts then differ by whole rows, which move
        with dynamic slices at run-time offsets (no per-element index arithmetic)."""
        padded = [k for k, f in enumerate(factors) if f[1] is not None]
        if len(padded) != 1:
            return None
        k = padded[0]
        rows = math.prod(f[0] for f in factors[:k])
        return (rows, math.prod(f[0] for f in factors[k:]), k) if rows <= _MAX_ROWS else None

    def row_offset(self, factors: list[tuple], k: int, row: int) -> int:
        """Where row `row` starts in the layout at s: row * fit(s) * (elements after factor k)."""
        inner = math.prod(f[0] for f in factors[k + 1:])
        return self.add("mul", (self.fit(factors[k][1]), self.const(row * inner, _INT64)), _INT64, ())

    def uncompact(self, flat: int, dtype: int, factors: list[tuple], shape_b: tuple) -> int:
        """The padded value of shape_b from a flat [N_B] input holding its valid elements first,
        row-major at s; padded positions read other real values (masked downstream)."""
        total = math.prod(f[0] for f in factors)
        rows = self.rows(factors)
        if rows is not None:  # row o of the padded layout is the B-long run from o's offset at s
            n, length, k = rows
            parts = [self.add("reshape", (self.add("dynamic_slice", (flat, self.row_offset(factors, k, o)), dtype,
                                                   (length,), (length,)),), dtype, (1, length)) for o in range(n)]
            whole = parts[0] if n == 1 else self.add("concatenate", tuple(parts), dtype, (n, length), (0,))
            return self.add("reshape", (whole,), dtype, shape_b)
        index, _ = self.layout(factors)
        index = self.add("reshape", (index,), _INT64, (total,))
        return self.add("reshape", (self.add("gather", (flat, index), dtype, (total,), (0,)),), dtype, shape_b)

    def compact(self, x: int, dtype: int, factors: list[tuple]) -> int:
        """x (the factor shape at B) as a flat [N_B] value with its valid elements first,
        row-major at s: element j reads the padded position of the j-th valid element."""
        total = math.prod(f[0] for f in factors)
        rows = self.rows(factors)
        if rows is not None:  # each padded row written whole at its offset at s, in order:
            n, length, k = rows  # row o + 1 overwrites row o's padding
            grid = self.add("reshape", (x,), dtype, (n, length))
            zero = self.const(0, _INT64)
            flat = self.broadcast(self.const(0, dtype), dtype, (total,))
            for o in range(n):
                row = self.add("reshape", (self.add("dynamic_slice", (grid, self.const(o, _INT64), zero), dtype,
                                                    (1, length), (1, length)),), dtype, (length,))
                flat = self.add("dynamic_update_slice", (flat, row, self.row_offset(factors, k, o)), dtype, (total,))
            return flat
        j = self.add("iota", (), _INT64, (total,), (0,))
        one = self.const(1, _INT64)  # a factor valid for 0 elements divides as 1 (nothing is valid)
        sizes = [self.add("max", (self.fit(f[1]), one), _INT64, ()) if f[1] is not None else
                 self.const(f[0], _INT64) for f in factors]
        source = None
        rest = j
        bstride = 1
        for k in reversed(range(len(factors))):
            size = self.broadcast(sizes[k], _INT64, (total,))
            digit = self.add("rem", (rest, size), _INT64, (total,))
            rest = self.add("div", (rest, size), _INT64, (total,))
            if bstride > 1:
                digit = self.add("mul", (digit, self.broadcast(self.const(bstride, _INT64), _INT64, (total,))),
                                 _INT64, (total,))
            source = digit if source is None else self.add("add", (source, digit), _INT64, (total,))
            bstride *= factors[k][0]
        inside = self.add("compare", (rest, self.broadcast(self.const(0, _INT64), _INT64, (total,))), _BOOL,
                          (total,), (0,))  # eq: j below the number of valid elements
        for f in factors:  # and none of them is 0
            if f[1] is not None:
                some = self.add("compare", (self.fit(f[1]), self.const(0, _INT64)), _BOOL, (), (4,))  # gt
                inside = self.add("and", (inside, self.broadcast(some, _BOOL, (total,))), _BOOL, (total,))
        source = self.add("select", (inside, source, self.broadcast(self.const(0, _INT64), _INT64, (total,))),
                          _INT64, (total,))
        flat = self.add("reshape", (x,), dtype, (total,))
        return self.add("gather", (flat, source), dtype, (total,), (0,))

    def masked(self, x: int, dtype: int, shape: tuple, mask: int | None, fill) -> int:
        if mask is None:
            return x
        return self.add("select", (mask, x, self.broadcast(self.const(fill, dtype), dtype, shape)), dtype, shape)


def _input_dim(size_b: int, fit: _Fit, at_bucket: tuple[int, ...]) -> tuple:
    """How a padded input dim is laid out: ``a*s`` (a > 1) as [a, s] padded to [a, B], so a
    reshape to [a, s] inside the graph finds it (the flattened [batch * s] a forward returns);
    else its first fit(s) elements."""
    terms, c = fit
    if c == 0 and len(terms) == 1 and terms[0][0] == 0 and terms[0][1] > 1:
        a = terms[0][1]
        return ((a, None), (size_b // a, ((((0, 1),), 0))))
    return ((size_b, fit),)


def _merge(name: str, a: list[tuple], b: list[tuple]) -> list[tuple]:
    """Validity of an elementwise result from two operands' (each dim: the padded one)."""
    out = []
    for da, db in zip(a, b):
        if _plain(da) or (_uniform(da) and not _plain(db)):
            out.append(db)
        elif _plain(db) or da == db or _uniform(db):
            out.append(da)
        else:
            raise Rejected(f"{name}: operands padded differently ({da} vs {db})")
    return out


def _reshape(name: str, src: list[tuple], shape: tuple) -> list[tuple]:
    """Regroups the operand's factors (major to minor) into the result's dims; a padded factor
    may not be split."""
    factors = [f[:2] for dim in src for f in dim if f[0] != 1]
    out: list[tuple] = []
    k = 0
    for size in shape:
        group: list[_Factor] = []
        prod = 1
        while prod < size:
            if k >= len(factors):
                raise Rejected(f"{name}: sizes do not regroup ({src} -> {shape})")
            n, fit = factors[k]
            if prod * n <= size and size % (prod * n) == 0:
                group.append((n, fit))
                prod *= n
                k += 1
            elif fit is None and n % (size // prod) == 0:  # split an all-valid factor
                part = size // prod
                group.append((part, None))
                factors[k] = (n // part, None)
                prod = size
            else:
                raise Rejected(f"{name}: splits a padded dimension")
        out.append(tuple(group) if group else ((1, None),))
    if any(n != 1 for n, _ in factors[k:]):
        raise Rejected(f"{name}: sizes do not regroup")
    return out


def pad_graph(graph: tuple, trie: dict, at_bucket: tuple[int, ...], num_bases: int, bucket: int) -> PaddedGraph:
    """The learned graph (graph_templates._Template: fields and trie) at a bucket, masked.

    Raises Rejected when an op of the graph cannot run padded."""
    nodes, outputs, returns, rng_counters, num_inputs, ops, host_outputs = graph
    if rng_counters and trie.get(3) is not None:
        raise Rejected("random numbers whose count depends on the size")
    if host_outputs:
        raise Rejected("host-computed outputs")
    node_fits: dict = trie.get(0, {})
    em = _Emitter(num_inputs, num_bases)
    new_id: list[int] = []
    valid: list[list[tuple]] = []
    shapes: list[tuple] = []
    padded_inputs: dict[int, list[tuple]] = {}
    input_shapes: dict[int, tuple[int, ...]] = {}

    def at_b(fit_or_int) -> int:
        return _value(fit_or_int, at_bucket) if isinstance(fit_or_int, tuple) else fit_or_int

    for i, node in enumerate(nodes):
        op_id, operands, dtype, shape, iattrs, fattrs = node
        op = OPS[op_id]
        fits = node_fits.get(i, {})
        shape_fits = fits.get(3, {}) if isinstance(fits, dict) else {}
        iattr_fits = fits.get(4, {}) if isinstance(fits, dict) else {}
        shape_b = tuple(at_b(shape_fits[d]) if d in shape_fits else s for d, s in enumerate(shape))
        iattrs_b = tuple(at_b(iattr_fits[p]) if p in iattr_fits else v for p, v in enumerate(iattrs))
        own = [((shape_b[d], shape_fits[d]),) if d in shape_fits else ((shape_b[d], None),) for d in range(len(shape))]
        ops_new = [new_id[o] for o in operands]
        vin = [valid[o] for o in operands]
        name = f"{op} (node {i})"
        v: list[tuple] = own
        if op == "parameter":
            binding = iattrs[0]
            if shape_fits:
                if binding < 0:
                    raise Rejected(f"{name}: random state with a size-dependent shape")
                v = [_input_dim(shape_b[d], shape_fits[d], at_bucket) if d in shape_fits else own[d]
                     for d in range(len(shape))]
                padded_inputs[binding] = v
                input_shapes[binding] = shape_b
                factors = [f[:2] for dim in v for f in dim]
                flat = em.add(op, (), dtype, (math.prod(shape_b),), iattrs)
                nid = em.uncompact(flat, dtype, factors, shape_b)
            else:
                nid = em.add(op, (), dtype, shape_b, iattrs)
        elif op == "constant":
            if iattr_fits:  # an integer that depends on s: computed from the bases at run time
                value = em.fit(iattr_fits[0])
                nid = value if dtype == _INT64 else em.add("convert", (value,), dtype, ())
            else:
                nid = em.add(op, (), dtype, shape_b, iattrs, fattrs)
        elif op in ("iota", "rng_uniform", "rng_normal"):
            if op != "iota" and shape_fits:
                raise Rejected(f"{name}: random numbers over a padded dimension")
            # Positions count along the iota's dim; along the others its values are the same.
            v = [own[d] if d == iattrs[0] or _plain(own[d]) else ((own[d][0][0], own[d][0][1], True),)
                 for d in range(len(shape))]
            nid = em.add(op, (), dtype, shape_b, iattrs_b, fattrs)
        elif op in _ELEMENTWISE:
            v = vin[0]
            for other in vin[1:]:
                v = _merge(name, v, other)
            nid = em.add(op, tuple(ops_new), dtype, shape_b, iattrs_b, fattrs)
        elif op == "broadcast_in_dim":
            # New dims, and size-1 dims broadcast to a padded size, hold one value throughout.
            v = [((n, f, True),) if f is not None else ((n, f),) for ((n, f),) in own]
            for k, d in enumerate(iattrs):
                if not _plain(vin[0][k]):
                    v[d] = vin[0][k]
            nid = em.add(op, tuple(ops_new), dtype, shape_b, iattrs_b)
        elif op == "reshape":
            v = _reshape(name, vin[0], shape_b)
            nid = em.add(op, tuple(ops_new), dtype, shape_b)
        elif op == "transpose":
            v = [vin[0][p] for p in iattrs]
            nid = em.add(op, tuple(ops_new), dtype, shape_b, iattrs_b)
        elif op == "slice":
            r = len(shape)
            v = list(own)
            for d in range(r):
                src = vin[0][d]
                if _plain(src):
                    continue
                moved = d in iattr_fits or 2 * r + d in iattr_fits
                if len(src) > 1:  # a merged padded dimension: only whole
                    if iattrs_b[d] != 0 or iattrs_b[r + d] != shapes[operands[0]][d] or iattrs[2 * r + d] != 1:
                        raise Rejected(f"{name}: a part of a merged padded dimension")
                    v[d] = src
                elif moved or iattrs[2 * r + d] != 1 or d not in shape_fits:
                    raise Rejected(f"{name}: a slice of a padded dimension at an offset that depends on the "
                                   "size, with a stride, or of a fixed length")
            nid = em.add(op, tuple(ops_new), dtype, shape_b, iattrs_b)
        elif op == "pad":
            r = len(shape)
            v = list(own)
            fill_dims = []
            for d in range(r):
                src = vin[0][d]
                if _plain(src):
                    if d in shape_fits:
                        raise Rejected(f"{name}: pads a dimension to a size that depends on the size")
                    continue
                if len(src) > 1 or iattrs[d] != 0 or d in iattr_fits or iattrs[2 * r + d] != 0:
                    raise Rejected(f"{name}: pads a padded dimension before its end")
                fill_dims.append((d, src[0][1]))
            nid = em.add(op, tuple(ops_new), dtype, shape_b, iattrs_b)
            if fill_dims:
                # The pad value goes right after the valid elements, where the unpadded run has it.
                mv = [((shape_b[d], None),) for d in range(r)]
                for d, fit in fill_dims:
                    mv[d] = ((shape_b[d], fit),)
                keep = em.mask(mv, shape_b)
                nid = em.add("select", (keep, nid, em.broadcast(ops_new[1], dtype, shape_b)), dtype, shape_b)
        elif op == "concatenate":
            dim = iattrs[0]
            v = list(vin[0])
            for other in vin[1:]:
                v = _merge(name, v, other)  # (the concatenated dim is set below)
            if any(not _plain(x[dim]) for x in vin[:-1]):
                raise Rejected(f"{name}: concatenates after a padded part")
            last = vin[-1][dim]
            if _plain(last):
                v[dim] = own[dim] if _plain(own[dim]) else ((shape_b[dim], None),)
            elif len(last) > 1:
                raise Rejected(f"{name}: concatenates a merged padded dimension")
            else:
                before = sum(shapes[o][dim] for o in operands[:-1])
                terms, c = last[0][1]
                v[dim] = ((shape_b[dim], (terms, c + before)),)
            nid = em.add(op, tuple(ops_new), dtype, shape_b, iattrs_b)
        elif op == "gather":
            axis = iattrs[0]
            src, index = vin
            v = []
            for d in range(len(shape)):
                if d == axis or _plain(src[d]):
                    v.append(index[d])
                elif shapes[operands[0]][d] == shapes[operands[1]][d]:
                    v.append(_merge(name, [src[d]], [index[d]])[0])
                else:
                    raise Rejected(f"{name}: indices cover part of a padded dimension")
            nid = em.add(op, tuple(ops_new), dtype, shape_b, iattrs_b)
        elif op == "scatter":
            x, index, upd = ops_new
            mode = SCATTER_MODES[iattrs[1]]
            mask = em.mask(vin[2], shapes[operands[2]])
            if mask is not None:
                if mode == "replace":
                    raise Rejected(f"{name}: a replacing scatter of padded updates")
                ushape = shapes[operands[2]]
                fill = {"add": 0, "mul": 1}.get(mode)
                if fill is None:
                    fill = _identity(mode, _DTYPE[dtype])
                upd = em.masked(upd, dtype, ushape, mask, fill)
                index = em.masked(index, nodes[operands[1]][2], ushape, mask, 0)
            v = vin[0]
            nid = em.add(op, (x, index, upd), dtype, shape_b, iattrs_b)
        elif op == "reduce":
            kind = REDUCE_KINDS[iattrs[0]]
            dims = list(iattrs[1:])
            src = vin[0]
            padded = [d for d in dims if not _plain(src[d])]
            x = ops_new[0]
            if padded:
                if kind in ("argmax", "argmin"):
                    if any(len(src[d]) > 1 for d in padded):
                        raise Rejected(f"{name}: {kind} over a merged padded dimension")
                    fill = _identity("max" if kind == "argmax" else "min", _DTYPE[nodes[operands[0]][2]])
                else:
                    fill = _identity(kind, _DTYPE[nodes[operands[0]][2]])
                xs = shapes[operands[0]]
                x = em.masked(x, nodes[operands[0]][2], xs, em.mask(src, xs, padded), fill)
            v = [src[d] for d in range(len(src)) if d not in dims]
            nid = em.add(op, (x,), dtype, shape_b, iattrs_b)
        elif op == "dot_general":
            nb = iattrs[0]
            lb, rb = list(iattrs[1:1 + nb]), list(iattrs[1 + nb:1 + 2 * nb])
            nc = iattrs[1 + 2 * nb]
            lc, rc = list(iattrs[2 + 2 * nb:2 + 2 * nb + nc]), list(iattrs[2 + 2 * nb + nc:2 + 2 * nb + 2 * nc])
            lv, rv = vin
            lhs, rhs = ops_new
            lpad = [d for d in lc if not _plain(lv[d])]
            rpad = [d for d in rc if not _plain(rv[d])]
            if lpad or rpad:
                ls, rs = shapes[operands[0]], shapes[operands[1]]
                # Both sides masked along every contracting dim either side pads.
                lmask_v, rmask_v = list(lv), list(rv)
                for a, b in zip(lc, rc):
                    pa, pb = lv[a], rv[b]
                    if not _plain(pa) and not _plain(pb) and pa != pb:
                        raise Rejected(f"{name}: contracting dims padded differently")
                    lmask_v[a] = rmask_v[b] = pa if not _plain(pa) else pb
                lhs = em.masked(lhs, dtype, ls, em.mask(lmask_v, ls, lc), 0)
                rhs = em.masked(rhs, dtype, rs, em.mask(rmask_v, rs, rc), 0)
            lf = [d for d in range(len(lv)) if d not in lb + lc]
            rf = [d for d in range(len(rv)) if d not in rb + rc]
            v = [_merge(name, [lv[a]], [rv[b]])[0] for a, b in zip(lb, rb)] + [lv[d] for d in lf] + [rv[d] for d in rf]
            nid = em.add(op, (lhs, rhs), dtype, shape_b, iattrs_b)
        elif op == "dynamic_update_slice":
            x, upd, *starts = ops_new
            ushape = shapes[operands[1]]
            mask = em.mask(vin[1], ushape)
            if mask is not None:  # write back what the padding would overwrite
                old = em.add("dynamic_slice", (x, *starts), dtype, ushape, ushape)
                upd = em.add("select", (mask, upd, old), dtype, ushape)
            v = vin[0]
            nid = em.add(op, (x, upd, *starts), dtype, shape_b, iattrs_b)
        else:
            touched = shape_fits or iattr_fits or any(not _plain(d) for vv in vin for d in vv)
            if touched:
                raise Rejected(f"{name}: not supported over a padded dimension")
            nid = em.add(op, tuple(ops_new), dtype, shape_b, iattrs_b, fattrs)
        new_id.append(nid)
        valid.append(v)
        shapes.append(shape_b)

    new_outputs = []
    for out in outputs:
        node, target = out[0], out[1]
        if target >= 0 and (target in padded_inputs or any(not _plain(d) for d in valid[node])):
            raise Rejected(f"an in-place update of a padded input (input {target})")
        new_outputs.append((new_id[node], *out[1:]))
    news = [o[0] for o in outputs if o[1] < 0]
    ret_fits: dict = trie.get(2, {})
    new_returns = []
    narrow: dict[int, list[tuple[int, _Fit]]] = {}
    compact: dict[int, list[tuple]] = {}
    input_views: dict[int, tuple] = {}
    consts: dict[int, _Fit] = {}
    passed: dict[int, int] = {}
    extra_outputs: list[tuple] = []
    base_views: dict[int, tuple] = {}
    compacted_at: dict[int, int] = {}

    def compacted(node: int) -> int:
        """The new-output index of node's compacted value (added once)."""
        if node not in compacted_at:
            factors = [f[:2] for d in valid[node] for f in d]
            extra_outputs.append((em.compact(new_id[node], nodes[node][2], factors), -1))
            compacted_at[node] = len(news) + len(extra_outputs) - 1
        return compacted_at[node]

    for k, r in enumerate(returns):
        fits = ret_fits.get(k)
        if r[0] == "i" and r[1] in padded_inputs:
            passed[k] = r[1]  # the graph returns its input: the caller's, not the padded copy
            cut = []
        elif r[0] == "n" and not all(_plain(d) for d in valid[news[r[1]]]):
            # Compacted in the program: the caller gets a contiguous tensor at s whose storage
            # holds N_B elements, which a padded graph it reaches next binds without a copy.
            dims = valid[news[r[1]]]
            compact[k] = [tuple(f[:2] for f in d) for d in dims]
            r = ("n", compacted(news[r[1]]))
            cut = []
        elif r[0] == "w" and not all(_plain(d) for d in valid[news[r[1]]]) and _contiguous_at_b(r, fits, at_bucket):
            # A view of a padded result that is contiguous at every size: the same view, at s,
            # of the compacted result (what the exact program returns).
            base_views[k] = (r, fits or {})
            r = ("n", compacted(news[r[1]]))
            cut = []
        elif r[0] == "v" and r[1] in padded_inputs:
            input_views[k] = (r[1], r, fits or {})  # taken on the caller's tensor, at s
            r = ("c", None)
            cut = []
        elif r[0] in ("v", "w") and (fits or (r[0] == "w" and not all(_plain(d) for d in valid[news[r[1]]]))):
            r = _apply(r, fits or {}, at_bucket)
            base = valid[news[r[1]]] if r[0] == "w" else padded_inputs.get(r[1]) or []
            cut = _view_cut(r, (fits or {}).get(2, {}), base)
        elif r[0] == "c" and set(fits or {}) == {1}:
            consts[k] = fits[1]  # a size the graph returns (for its backward): set per run
            cut = []
        elif fits:
            raise Rejected(f"a returned {r[0]!r} entry whose integers depend on the size")
        else:
            cut = []
        if cut:
            narrow[k] = cut
        new_returns.append(r)
    lg = LoweredGraph(em.nodes, new_outputs + extra_outputs, new_returns, rng_counters, num_inputs + num_bases,
                      list(ops), [])
    return PaddedGraph(lg, bucket, num_bases, padded_inputs, input_shapes, narrow, compact, input_views,
                       base_views, consts, passed)


def _contiguous_at_b(r: tuple, fits: dict | None, at_bucket: tuple[int, ...]) -> bool:
    """Whether a "w" return's base is contiguous at the bucket (and so, fitted, at every size)."""
    rb = _apply(r, fits or {}, at_bucket)
    return list(rb[6]) == contiguous_strides(list(rb[5]))


def _view_cut(r: tuple, size_fits: dict, base: list[tuple]) -> list[tuple[int, _Fit]]:
    """The dims to narrow of a returned view (at the bucket) of a padded tensor: each padded dim
    of the base must be one dim of the view, whole, with the same valid length."""
    _, _, sizes, strides, _, base_sizes, base_strides = r
    cut = []
    for e, factors in enumerate(base):
        if _plain(factors):
            continue
        if len(factors) > 1:
            raise Rejected("a returned view of a merged padded dimension")
        fit = factors[0][1]
        d = next((d for d in range(len(sizes)) if strides[d] == base_strides[e] and sizes[d] == base_sizes[e]
                  and size_fits.get(d) == fit), None)
        if d is None:
            raise Rejected("a returned view that does not keep a padded dimension whole")
        cut.append((d, fit))
    return cut


def _bind(x: torch.Tensor, total: int) -> torch.Tensor:
    """x's elements, row-major, as the first of `total`: a view of its storage where that holds
    them (a padded graph's compacted result), else a padded copy made on the host side of the
    device (not a device program: on PJRT a program per size is an XLA compile per size), queued
    behind x's producer so the caller does not wait for the device."""
    x = x.contiguous()
    room = x.untyped_storage().nbytes() // x.element_size() - x.storage_offset()
    if room >= total:
        return x.as_strided((total,), (1,), x.storage_offset())
    return _C._padded_flat_copy(x, total)


def run_padded(pg: PaddedGraph, run, args: list, constants: list, at_s: tuple[int, ...]) -> list:
    """run (the padded program's) on args bound at the bucket, the graph's constants and the
    bases at s; results at s."""
    given = args
    args = list(args)
    for i, shape in pg.input_shapes.items():
        args[i] = _bind(args[i], math.prod(shape))
    outs = run([*args, *constants, *at_s[:pg.num_bases]])
    for k, dims in pg.narrow.items():
        t = outs[k]
        for d, fit in dims:
            t = t.narrow(d, 0, _value(fit, at_s))
        outs[k] = t
    for k, fit in pg.consts.items():
        outs[k] = _value(fit, at_s)
    for k, i in pg.passed.items():
        outs[k] = given[i]
    for k, dims in pg.compact.items():
        sizes = [math.prod(n if fit is None else _value(fit, at_s) for n, fit in dim) for dim in dims]
        outs[k] = outs[k].as_strided(sizes, contiguous_strides(sizes), 0)
    for k, (r, fits) in pg.base_views.items():
        _, _, sizes, strides, offset, *_ = _apply(r, fits, at_s)
        outs[k] = outs[k].as_strided(sizes, strides, offset)
    for k, (i, r, fits) in pg.input_views.items():
        _, _, sizes, strides, offset, *_ = _apply(r, fits, at_s)
        outs[k] = given[i].as_strided(sizes, strides, given[i].storage_offset() + offset)
    return outs


def check(padded: list, exact: list, s: int, bucket: int) -> None:
    """Raise if a padded run's results differ from the exact program's at size s (verification).
    Float results may differ in rounding: the padded contractions and sums add in other blocks."""
    for k, (a, b) in enumerate(zip(padded, exact, strict=True)):
        if isinstance(a, torch.Tensor):
            try:
                torch.testing.assert_close(a.cpu(), b.cpu(), rtol=1e-4, atol=1e-5)
            except AssertionError as e:
                raise RuntimeError(f"torch_tpu internal error: result {k} of a graph run padded to {bucket} differs "
                                   f"from its exact program at size {s}; TORCH_TPU_COMPILE_BUCKETS=off avoids it "
                                   f"(please report): {e}") from None
        elif a != b:
            raise RuntimeError(f"torch_tpu internal error: result {k} of a graph run padded to {bucket} is {a}, "
                               f"its exact program's at size {s} {b}")


def bucket_for(s: int, buckets: list[int]) -> int | None:
    """The smallest bucket holding s, or None past the largest."""
    return next((b for b in buckets if b >= s), None)


def pow2_buckets(lo: int = 16, hi: int = 1 << 20) -> list[int]:
    """Powers of two from lo."""
    return [1 << k for k in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]


def default_buckets(lo: int = 16, hi: int = 1 << 20, fine_from: int = 128) -> list[int]:
    """Powers of two from lo, and from fine_from on also the midway 1.5x steps (192, 384, ...):
    any run of sizes up to N compiles O(log N) programs (8 for 16..512), and past fine_from,
    where the tokens' work outweighs a program's fixed cost, padding adds less than half
    instead of nearly doubling."""
    out = []
    for b in pow2_buckets(lo, hi):
        if b > fine_from and b // 2 >= lo:
            out.append(b * 3 // 4)
        out.append(b)
    return out


_UNSET = object()
_buckets: object = _UNSET  # list of sizes, None (exact sizes), or unset (read the variable)
_generation = 0  # bumped by set_buckets: graphs drop the runs they chose under earlier buckets


def _parse(text: str) -> list[int] | None:
    text = text.strip().lower()
    if text == "auto":
        return default_buckets() if _C._runtime_name() == "pjrt" else None
    if text in ("off", "0", ""):
        return None
    if text == "on":
        return default_buckets()
    if text == "pow2":
        return pow2_buckets()
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"TORCH_TPU_COMPILE_BUCKETS={text!r}: expected auto, on, off, pow2 or comma-separated sizes") \
            from None
    if not sizes or sizes[0] < 1:
        raise ValueError(f"TORCH_TPU_COMPILE_BUCKETS={text!r}: sizes must be positive")
    return sizes


def set_buckets(buckets: list[int] | str | None) -> None:
    """Run dynamic-shape compiled graphs padded to these sizes: a list of sizes, ``"auto"``
    (default_buckets() on PJRT, exact sizes on the host runtime), ``"on"`` (default_buckets()
    on every runtime), ``"pow2"`` (powers of two from 16), or None for exact sizes. TORCH_TPU_COMPILE_BUCKETS sets the start value."""
    global _buckets, _generation
    _buckets = _parse(buckets) if isinstance(buckets, str) else (sorted(buckets) if buckets else None)
    _generation += 1


def generation() -> int:
    """How many times set_buckets was called: a size a graph ran before runs as the buckets now
    in effect say (padded, or its exact program) once this changes."""
    return _generation


def buckets() -> list[int] | None:
    """The bucket sizes in effect, or None when graphs run at exact sizes."""
    global _buckets
    if _buckets is _UNSET:
        from ..config import get

        _buckets = _parse(get("TORCH_TPU_COMPILE_BUCKETS"))
    return _buckets  # type: ignore[return-value]
