"""The graph IR, as lowerings build it: a small, StableHLO-shaped op set.

Design: a lowering turns one ATen op (or one FX graph) into a list of typed nodes with
static shapes. This module is the single executable specification of that IR:

* ``GraphBuilder`` records nodes and infers each result's dtype and shape (the checks here
  are the constraints listed in docs/ir.md; the C++ verifier re-checks them).
* With ``reference=True`` every ``Value`` also carries ``data``, a CPU tensor computed with
  plain PyTorch ops: the reference semantics the C++ host runtime (and the StableHLO
  emitter) must reproduce. Lowerings are unit-tested against it without any C++ build.
* ``serialize()`` produces the flat node list the C++ core deserializes into its ``Graph``.

Nodes are tuples ``(op_id, operand_ids, scalar_type_code, shape, iattrs, fattrs)``; the op
ids are positions in ``OPS``, which mirrors the C++ ``OpKind`` enum (a test checks both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

# Order is the C++ OpKind enum order: append only, and update csrc/ir/ops.h with it.
OPS: tuple[str, ...] = (
    # leaves
    "parameter", "constant", "iota", "rng_uniform", "rng_normal",
    # unary elementwise
    "neg", "abs", "sign", "floor", "ceil", "round_even", "trunc",
    "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "cbrt",
    "sin", "cos", "tan", "tanh", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "logistic", "erf", "erfinv", "lgamma", "digamma", "not", "is_finite",
    # binary elementwise
    "add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2",
    "and", "or", "xor", "shl", "shr_arith", "shr_logical",
    # other elementwise
    "compare", "select", "convert",
    # data movement
    "broadcast_in_dim", "reshape", "transpose", "slice", "dynamic_slice", "dynamic_update_slice",
    "concatenate", "pad", "reverse", "gather", "scatter",
    # reductions and scans
    "reduce", "reduce_window", "scan",
    # contractions
    "dot_general", "convolution",
    # sorting
    "sort",
    # linear algebra
    "cholesky", "triangular_solve",
)
OP_ID: dict[str, int] = {name: i for i, name in enumerate(OPS)}

UNARY_FLOAT = (
    "floor", "ceil", "round_even", "trunc", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt",
    "cbrt", "sin", "cos", "tan", "tanh", "asin", "acos", "atan", "sinh", "cosh", "asinh",
    "acosh", "atanh", "logistic", "erf", "erfinv", "lgamma", "digamma",
)
UNARY_NUMERIC = ("neg", "abs", "sign")
BINARY_NUMERIC = ("add", "sub", "mul", "div", "rem", "pow", "max", "min")
BINARY_FLOAT = ("atan2",)
BINARY_LOGICAL = ("and", "or", "xor")
BINARY_SHIFT = ("shl", "shr_arith", "shr_logical")

COMPARE_DIRECTIONS = ("eq", "ne", "lt", "le", "gt", "ge")
REDUCE_KINDS = ("sum", "prod", "max", "min", "and", "or", "argmax", "argmin")
WINDOW_KINDS = ("sum", "max", "min")
SCAN_KINDS = ("sum", "prod", "max", "min")
SCATTER_MODES = ("replace", "add", "mul", "max", "min")

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool,)

# c10::ScalarType codes, the dtype encoding shared with C++.
SCALAR_TYPE_CODE: dict[torch.dtype, int] = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.bool: 11, torch.bfloat16: 15,
}
DTYPE_FROM_CODE: dict[int, torch.dtype] = {v: k for k, v in SCALAR_TYPE_CODE.items()}

# Reserved parameter bindings for the program's random-number state (see rng_uniform).
RNG_SEED_BINDING = -1
RNG_OFFSET_BINDING = -2


class IRError(RuntimeError):
    """A lowering built an ill-typed node (a bug in the lowering, not in user input)."""


def _check(cond: bool, op: str, msg: str) -> None:
    if not cond:
        raise IRError(f"ir.{op}: {msg}")


class Value:
    """One SSA value of a graph: its node id, dtype and static shape (and data in reference mode)."""

    __slots__ = ("id", "dtype", "shape", "data", "wrapped", "const", "splat")

    def __init__(self, id: int, dtype: torch.dtype, shape: tuple[int, ...], data: torch.Tensor | None = None):
        self.id = id
        self.dtype = dtype
        self.shape = shape
        self.data = data
        self.wrapped = False  # True for a Python number passed where PyTorch takes a Tensor
        self.const: float | int | bool | None = None  # the value of a constant node, else None
        self.splat: float | int | bool | None = None  # every element equals this constant (folding)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"%{self.id}:{str(self.dtype).removeprefix('torch.')}{list(self.shape)}"


def _mulhilo32(a: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) 32-bit halves of a*b for uint32 values held in int64, without overflow."""
    t1 = a * (b & 0xFFFF)
    t2 = a * (b >> 16)
    low_sum = t1 + ((t2 & 0xFFFF) << 16)
    return (t2 >> 16) + (low_sum >> 32), low_sum & 0xFFFFFFFF


def philox4x32(counter: torch.Tensor, seed: int) -> list[torch.Tensor]:
    """Philox4x32-10 of 64-bit counters (int64 tensor) under a 64-bit key; four uint32 words in int64."""
    mask = 0xFFFFFFFF
    c = [counter & mask, (counter >> 32) & mask, torch.zeros_like(counter), torch.zeros_like(counter)]
    k0, k1 = seed & mask, (seed >> 32) & mask
    for _ in range(10):
        hi0, lo0 = _mulhilo32(c[0], 0xD2511F53)
        hi1, lo1 = _mulhilo32(c[2], 0xCD9E8D57)
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = (k0 + 0x9E3779B9) & mask
        k1 = (k1 + 0xBB67AE85) & mask
    return c


def _identity(kind: str, dtype: torch.dtype) -> float | int | bool:
    if kind in ("sum", "or"):
        return False if dtype == torch.bool else 0
    if kind in ("prod", "and"):
        return True if dtype == torch.bool else 1
    if dtype.is_floating_point:
        return -math.inf if kind == "max" else math.inf
    if dtype == torch.bool:
        return kind == "min"
    info = torch.iinfo(dtype)
    return info.min if kind == "max" else info.max


class GraphBuilder:
    """Records IR nodes; in reference mode also evaluates them on CPU tensors."""

    def __init__(self, reference: bool = False) -> None:
        self.reference = reference
        self.nodes: list[tuple] = []
        self.values: list[Value] = []
        self.rng_counters = 0  # Philox counters this graph consumes (the generator advances by it)
        self._rng_state: tuple[Value, Value] | None = None
        self.reference_seed = 0
        self.reference_offset = 0

    # -- recording -------------------------------------------------------------------------
    def _emit(self, op: str, operands: Sequence[Value], dtype: torch.dtype, shape: Sequence[int],
              iattrs: Sequence[int] = (), fattrs: Sequence[float] = (),
              data: torch.Tensor | None = None) -> Value:
        shape = tuple(int(s) for s in shape)
        _check(all(s >= 0 for s in shape), op, f"negative dimension in {shape}")
        v = Value(len(self.nodes), dtype, shape)
        if self.reference:
            _check(data is not None, op, "reference evaluation missing")
            data = data.to(dtype) if data.dtype != dtype else data
            _check(tuple(data.shape) == shape, op, f"reference shape {tuple(data.shape)} != inferred {shape}")
            v.data = data.contiguous()
        self.nodes.append((OP_ID[op], tuple(o.id for o in operands), SCALAR_TYPE_CODE[dtype], shape,
                           tuple(int(i) for i in iattrs), tuple(float(f) for f in fattrs)))
        self.values.append(v)
        return v

    def serialize(self) -> list[tuple]:
        """The node list in the wire format csrc/ir/serialize.cpp reads."""
        return list(self.nodes)

    def _ref(self, fn):
        return fn() if self.reference else None

    # -- leaves ----------------------------------------------------------------------------
    def parameter(self, binding: int, dtype: torch.dtype, shape: Sequence[int],
                  data: torch.Tensor | None = None) -> Value:
        """A program input: binding >= 0 is the runtime binding slot, <0 the reserved RNG slots."""
        _check(dtype in DTYPES, "parameter", f"unsupported dtype {dtype}")
        return self._emit("parameter", (), dtype, shape, (binding,), (),
                          self._ref(lambda: data.reshape(tuple(shape))))

    def constant(self, value: float | int | bool, dtype: torch.dtype) -> Value:
        """A 0-d constant (baked into the program)."""
        _check(dtype in DTYPES, "constant", f"unsupported dtype {dtype}")
        if dtype.is_floating_point:
            v = self._emit("constant", (), dtype, (), (), (float(value),),
                           self._ref(lambda: torch.tensor(float(value), dtype=dtype)))
        else:
            v = self._emit("constant", (), dtype, (), (int(value),), (),
                           self._ref(lambda: torch.tensor(int(value)).to(dtype)))
        v.const = value
        return v

    def full(self, value: float | int | bool, dtype: torch.dtype, shape: Sequence[int]) -> Value:
        return self.broadcast_in_dim(self.constant(value, dtype), shape, ())

    def iota(self, dtype: torch.dtype, shape: Sequence[int], dim: int) -> Value:
        """out[i_0, ..., i_n] = i_dim."""
        shape = tuple(shape)
        _check(0 <= dim < len(shape), "iota", f"dim {dim} out of range for rank {len(shape)}")

        def ref():
            r = torch.arange(shape[dim], dtype=torch.int64).to(dtype)
            view = [1] * len(shape)
            view[dim] = shape[dim]
            return r.reshape(view).expand(shape)
        return self._emit("iota", (), dtype, shape, (dim,), (), self._ref(ref))

    def _rng_inputs(self, numel: int) -> tuple[Value, Value, int]:
        if self._rng_state is None:
            seed = self.parameter(RNG_SEED_BINDING, torch.int64, (), self._ref(lambda: torch.tensor(self.reference_seed)))
            off = self.parameter(RNG_OFFSET_BINDING, torch.int64, (), self._ref(lambda: torch.tensor(self.reference_offset)))
            self._rng_state = (seed, off)
        seed, off = self._rng_state
        first = self.rng_counters
        self.rng_counters += numel
        return seed, (off if first == 0 else self.add(off, self.constant(first, torch.int64))), first

    def _philox_words(self, seed: Value, off: Value, shape: tuple[int, ...]) -> list[torch.Tensor]:
        counters = int(off.data) + torch.arange(math.prod(shape), dtype=torch.int64)
        return [w.reshape(shape) for w in philox4x32(counters, int(seed.data))]

    def rng_uniform(self, dtype: torch.dtype, shape: Sequence[int]) -> Value:
        """Uniform [0, 1): element i uses Philox4x32-10(key=seed, counter=offset+i), word 0 (and 1).

        float32: (w0 >> 8) * 2^-24; float16: (w0 >> 21) * 2^-11; bfloat16: (w0 >> 24) * 2^-8;
        float64: (w0 * 2^21 + (w1 >> 11)) * 2^-53. Every result is exact in its dtype, so < 1.
        """
        shape = tuple(shape)
        _check(dtype in FLOAT_DTYPES, "rng_uniform", f"needs a float dtype, got {dtype}")
        seed, off, _ = self._rng_inputs(math.prod(shape))

        def ref():
            w = self._philox_words(seed, off, shape)
            if dtype == torch.float64:
                return (w[0] * 2**21 + (w[1] >> 11)).double() * 2.0**-53
            bits = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}[dtype]
            return ((w[0] >> (32 - bits)).double() * 2.0**-bits).to(dtype)
        return self._emit("rng_uniform", (seed, off), dtype, shape, (), (), self._ref(ref))

    def rng_normal(self, dtype: torch.dtype, shape: Sequence[int]) -> Value:
        """Standard normal via Box-Muller in float64: u1=(w0+1)*2^-32, u2=w1*2^-32,
        z = sqrt(-2 ln u1) * cos(2 pi u2), then converted to dtype."""
        shape = tuple(shape)
        _check(dtype in FLOAT_DTYPES, "rng_normal", f"needs a float dtype, got {dtype}")
        seed, off, _ = self._rng_inputs(math.prod(shape))

        def ref():
            w = self._philox_words(seed, off, shape)
            u1 = (w[0].double() + 1.0) * 2.0**-32
            u2 = w[1].double() * 2.0**-32
            return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)).to(dtype)
        return self._emit("rng_normal", (seed, off), dtype, shape, (), (), self._ref(ref))

    # -- elementwise -----------------------------------------------------------------------
    def unary(self, op: str, x: Value) -> Value:
        if op in UNARY_FLOAT:
            _check(x.dtype.is_floating_point, op, f"needs a float operand, got {x.dtype}")
        elif op in UNARY_NUMERIC:
            _check(x.dtype != torch.bool, op, "needs a numeric operand, got bool")
        elif op == "not":
            _check(not x.dtype.is_floating_point, op, f"needs a bool or integer operand, got {x.dtype}")
        elif op == "is_finite":
            _check(x.dtype.is_floating_point, op, f"needs a float operand, got {x.dtype}")
        else:
            raise IRError(f"ir.unary: unknown op {op}")
        out_dtype = torch.bool if op == "is_finite" else x.dtype
        return self._emit(op, (x,), out_dtype, x.shape, (), (), self._ref(lambda: _UNARY_REF[op](x.data)))

    def pow(self, x: Value, y: Value, scalar_exponent: bool = False) -> Value:
        """x ** y. scalar_exponent: y is a Python number (aten pow.Tensor_Scalar), so the runtime
        may take ATen's scalar-exponent recipes (x^2 = x*x, x^-1 = 1/x, ...; CPU's bits for that
        overload); otherwise pow is the general function, as ATen's pow.Tensor_Tensor."""
        return self.binary("pow", x, y, (1,) if scalar_exponent else ())

    def binary(self, op: str, x: Value, y: Value, iattrs: tuple[int, ...] = ()) -> Value:
        _check(x.shape == y.shape, op, f"shapes differ: {x.shape} vs {y.shape}")
        _check(x.dtype == y.dtype, op, f"dtypes differ: {x.dtype} vs {y.dtype}")
        if op in BINARY_NUMERIC:
            _check(x.dtype != torch.bool, op, "needs numeric operands, got bool")
        elif op in BINARY_FLOAT:
            _check(x.dtype.is_floating_point, op, f"needs float operands, got {x.dtype}")
        elif op in BINARY_LOGICAL:
            _check(not x.dtype.is_floating_point, op, f"needs bool or integer operands, got {x.dtype}")
        elif op in BINARY_SHIFT:
            _check(x.dtype in INT_DTYPES, op, f"needs integer operands, got {x.dtype}")
        else:
            raise IRError(f"ir.binary: unknown op {op}")
        # Exact identities only (x*1, x/1): x+0 is not exact for -0.0, so it is not folded.
        if op in ("mul", "div") and _is_one(y) and x.dtype.is_floating_point:
            return x
        if op == "mul" and _is_one(x) and y.dtype.is_floating_point:
            return y
        _check(not iattrs or (op == "pow" and iattrs == (1,)), op, f"unexpected attributes {iattrs}")
        return self._emit(op, (x, y), x.dtype, x.shape, iattrs, (), self._ref(lambda: _binary_ref(op, x.data, y.data)))

    def compare(self, direction: str, x: Value, y: Value) -> Value:
        _check(x.shape == y.shape and x.dtype == y.dtype, "compare", f"operands differ: {x} vs {y}")
        d = COMPARE_DIRECTIONS.index(direction)
        fn = (torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge)[d]
        return self._emit("compare", (x, y), torch.bool, x.shape, (d,), (), self._ref(lambda: fn(x.data, y.data)))

    def select(self, pred: Value, on_true: Value, on_false: Value) -> Value:
        _check(pred.dtype == torch.bool, "select", f"predicate must be bool, got {pred.dtype}")
        _check(pred.shape == on_true.shape == on_false.shape, "select",
               f"shapes differ: {pred.shape}, {on_true.shape}, {on_false.shape}")
        _check(on_true.dtype == on_false.dtype, "select", f"dtypes differ: {on_true.dtype} vs {on_false.dtype}")
        return self._emit("select", (pred, on_true, on_false), on_true.dtype, on_true.shape, (), (),
                          self._ref(lambda: torch.where(pred.data, on_true.data, on_false.data)))

    def convert(self, x: Value, dtype: torch.dtype) -> Value:
        """Element type conversion with torch's .to(dtype) semantics (float->int truncates)."""
        if x.dtype == dtype:
            return x
        _check(dtype in DTYPES, "convert", f"unsupported dtype {dtype}")
        if x.const is not None and x.rank == 0:  # fold: a converted constant is a constant
            value = torch.tensor(x.const).to(x.dtype).to(dtype).item()
            if not (isinstance(value, float) and math.isnan(value)):
                return self.constant(value, dtype)
        return self._emit("convert", (x,), dtype, x.shape, (), (), self._ref(lambda: x.data.to(dtype)))

    def size_count(self, n: int, dtype: torch.dtype) -> Value:
        """The number n, derived from tensor sizes (a mean's element count), as a 0-d `dtype`
        value: an int64 constant converted, never folded, so that lowering reuse across sizes
        and padded buckets see the size in it (a float constant would hide it)."""
        c = self.constant(n, torch.int64)
        if dtype == torch.int64:
            return c
        return self._emit("convert", (c,), dtype, (), (), (), self._ref(lambda: c.data.to(dtype)))

    # -- data movement ---------------------------------------------------------------------
    def broadcast_in_dim(self, x: Value, shape: Sequence[int], dims: Sequence[int]) -> Value:
        """out[i] = x[j] where j_k = i_{dims[k]} (or 0 where x's dim k has size 1)."""
        shape, dims = tuple(shape), tuple(dims)
        _check(len(dims) == x.rank, "broadcast_in_dim", f"{len(dims)} dims for rank {x.rank}")
        _check(all(b > a for a, b in zip(dims, dims[1:])), "broadcast_in_dim", f"dims {dims} not increasing")
        for k, d in enumerate(dims):
            _check(0 <= d < len(shape) and x.shape[k] in (1, shape[d]), "broadcast_in_dim",
                   f"operand dim {k} (size {x.shape[k]}) does not fit result dim {d} of {shape}")
        if x.shape == shape and dims == tuple(range(len(shape))):
            return x

        def ref():
            view = [1] * len(shape)
            for k, d in enumerate(dims):
                view[d] = x.shape[k]
            return x.data.reshape(view).expand(shape)
        v = self._emit("broadcast_in_dim", (x,), x.dtype, shape, dims, (), self._ref(ref))
        v.splat = x.const if x.const is not None else x.splat
        return v

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(shape)
        _check(math.prod(shape) == x.numel(), "reshape", f"{x.shape} -> {shape} changes the element count")
        if shape == x.shape:
            return x
        return self._emit("reshape", (x,), x.dtype, shape, (), (), self._ref(lambda: x.data.reshape(shape)))

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        """out.shape[i] = x.shape[perm[i]]."""
        perm = tuple(perm)
        _check(sorted(perm) == list(range(x.rank)), "transpose", f"{perm} is not a permutation of rank {x.rank}")
        if perm == tuple(range(x.rank)):
            return x
        return self._emit("transpose", (x,), x.dtype, tuple(x.shape[p] for p in perm), perm, (),
                          self._ref(lambda: x.data.permute(perm)))

    def slice(self, x: Value, start: Sequence[int], limit: Sequence[int], stride: Sequence[int] | None = None) -> Value:
        start, limit = tuple(start), tuple(limit)
        stride = tuple(stride) if stride is not None else (1,) * x.rank
        _check(len(start) == len(limit) == len(stride) == x.rank, "slice", "attribute lengths must equal rank")
        for d in range(x.rank):
            _check(0 <= start[d] <= limit[d] <= x.shape[d] and stride[d] > 0, "slice",
                   f"dim {d}: start {start[d]}, limit {limit[d]}, stride {stride[d]} invalid for size {x.shape[d]}")
        shape = tuple((l - s + st - 1) // st for s, l, st in zip(start, limit, stride))
        if shape == x.shape:
            return x

        def ref():
            return x.data[tuple(slice(s, l, st) for s, l, st in zip(start, limit, stride))]
        return self._emit("slice", (x,), x.dtype, shape, start + limit + stride, (), self._ref(ref))

    def dynamic_slice(self, x: Value, starts: Sequence[Value], sizes: Sequence[int]) -> Value:
        """Slice of `sizes` at runtime `starts` (0-d int64), each clamped to [0, dim - size]."""
        sizes = tuple(sizes)
        _check(len(starts) == len(sizes) == x.rank, "dynamic_slice", "one start and size per dim")
        _check(all(s.rank == 0 and s.dtype == torch.int64 for s in starts), "dynamic_slice", "starts must be 0-d int64")
        _check(all(0 <= z <= n for z, n in zip(sizes, x.shape)), "dynamic_slice", f"sizes {sizes} exceed {x.shape}")

        def ref():
            idx = tuple(slice(b, b + z) for b, z in
                        ((min(max(int(s.data), 0), n - z), z) for s, z, n in zip(starts, sizes, x.shape)))
            return x.data[idx]
        return self._emit("dynamic_slice", (x, *starts), x.dtype, sizes, sizes, (), self._ref(ref))

    def dynamic_update_slice(self, x: Value, update: Value, starts: Sequence[Value]) -> Value:
        _check(update.dtype == x.dtype and update.rank == x.rank == len(starts), "dynamic_update_slice",
               f"operand {x}, update {update}, {len(starts)} starts")
        _check(all(u <= n for u, n in zip(update.shape, x.shape)), "dynamic_update_slice", "update larger than operand")

        def ref():
            out = x.data.clone()
            idx = tuple(slice(b, b + u) for b, u in
                        ((min(max(int(s.data), 0), n - u), u) for s, u, n in zip(starts, update.shape, x.shape)))
            out[idx] = update.data
            return out
        return self._emit("dynamic_update_slice", (x, update, *starts), x.dtype, x.shape, (), (), self._ref(ref))

    def concatenate(self, xs: Sequence[Value], dim: int) -> Value:
        xs = list(xs)
        _check(len(xs) > 0, "concatenate", "needs at least one operand")
        r = xs[0].rank
        _check(0 <= dim < r, "concatenate", f"dim {dim} out of range for rank {r}")
        for x in xs:
            _check(x.dtype == xs[0].dtype and x.rank == r and all(
                x.shape[d] == xs[0].shape[d] for d in range(r) if d != dim), "concatenate", f"mismatched {x} vs {xs[0]}")
        if len(xs) == 1:
            return xs[0]
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        return self._emit("concatenate", xs, xs[0].dtype, shape, (dim,), (),
                          self._ref(lambda: torch.cat([x.data for x in xs], dim)))

    def pad(self, x: Value, value: Value, lo: Sequence[int], hi: Sequence[int], interior: Sequence[int] | None = None) -> Value:
        """Edge padding lo/hi (negative crops) and interior padding between elements, filled with value (0-d)."""
        lo, hi = tuple(lo), tuple(hi)
        interior = tuple(interior) if interior is not None else (0,) * x.rank
        _check(len(lo) == len(hi) == len(interior) == x.rank, "pad", "attribute lengths must equal rank")
        _check(value.rank == 0 and value.dtype == x.dtype, "pad", f"padding value must be 0-d {x.dtype}")
        _check(all(i >= 0 for i in interior), "pad", "interior padding must be >= 0")
        shape = []
        for d in range(x.rank):
            n = x.shape[d]
            size = lo[d] + hi[d] + n + max(n - 1, 0) * interior[d]
            _check(size >= 0, "pad", f"dim {d} would have negative size")
            shape.append(size)

        def ref():
            t = x.data
            for d in range(x.rank):
                if interior[d] and t.shape[d] > 1:
                    n = t.shape[d]
                    big = list(t.shape)
                    big[d] = n + (n - 1) * interior[d]
                    out = value.data.expand(big).clone()
                    idx = [slice(None)] * t.dim()
                    idx[d] = slice(None, None, interior[d] + 1)
                    out[tuple(idx)] = t
                    t = out
            for d in range(x.rank):
                if lo[d] < 0:
                    t = t.narrow(d, -lo[d], t.shape[d] + lo[d])
                if hi[d] < 0:
                    t = t.narrow(d, 0, t.shape[d] + hi[d])
                parts = []
                if lo[d] > 0:
                    s = list(t.shape); s[d] = lo[d]
                    parts.append(value.data.expand(s))
                parts.append(t)
                if hi[d] > 0:
                    s = list(t.shape); s[d] = hi[d]
                    parts.append(value.data.expand(s))
                t = torch.cat(parts, d) if len(parts) > 1 else t
            return t
        return self._emit("pad", (x, value), x.dtype, shape, lo + hi + interior, (), self._ref(ref))

    def reverse(self, x: Value, dims: Sequence[int]) -> Value:
        dims = tuple(dims)
        _check(all(0 <= d < x.rank for d in dims), "reverse", f"dims {dims} out of range")
        if not dims:
            return x
        return self._emit("reverse", (x,), x.dtype, x.shape, dims, (), self._ref(lambda: torch.flip(x.data, dims)))

    def gather(self, x: Value, index: Value, axis: int, runtime_error: bool = False) -> Value:
        """torch.gather: out[p] = x[p with p[axis] := index[p]]; index has x's rank and int64 type.

        An index outside [0, x.shape[axis]) is an error on the host runtime: IndexError (what
        indexing raises), or RuntimeError with runtime_error (what torch.gather raises)."""
        _check(index.dtype == torch.int64 and index.rank == x.rank, "gather", f"index {index} must be int64 of rank {x.rank}")
        _check(0 <= axis < max(x.rank, 1), "gather", f"axis {axis} out of range")
        _check(all(index.shape[d] <= x.shape[d] for d in range(x.rank) if d != axis), "gather",
               f"index {index.shape} larger than operand {x.shape} outside axis {axis}")
        return self._emit("gather", (x, index), x.dtype, index.shape, (axis, 1) if runtime_error else (axis,), (),
                          self._ref(lambda: torch.gather(x.data, axis, index.data)))

    def scatter(self, x: Value, index: Value, updates: Value, axis: int, mode: str = "replace",
                runtime_error: bool = False) -> Value:
        """torch.scatter / scatter_reduce(include_self=True): x with updates combined at index along axis.

        An out-of-range index raises IndexError on the host runtime, or RuntimeError with
        runtime_error (torch.scatter's type)."""
        _check(index.dtype == torch.int64 and index.shape == updates.shape and index.rank == x.rank, "scatter",
               f"index {index} / updates {updates} must match and have operand rank {x.rank}")
        _check(updates.dtype == x.dtype, "scatter", f"updates dtype {updates.dtype} != operand {x.dtype}")
        _check(all(index.shape[d] <= x.shape[d] for d in range(x.rank) if d != axis), "scatter",
               f"index {index.shape} larger than operand {x.shape} outside axis {axis}")
        m = SCATTER_MODES.index(mode)

        def ref():
            if mode == "replace":
                return x.data.scatter(axis, index.data, updates.data)
            red = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[mode]
            return x.data.scatter_reduce(axis, index.data, updates.data, red, include_self=True)
        iattrs = (axis, m, 1) if runtime_error else (axis, m)
        return self._emit("scatter", (x, index, updates), x.dtype, x.shape, iattrs, (), self._ref(ref))

    # -- reductions ------------------------------------------------------------------------
    def reduce(self, x: Value, kind: str, dims: Sequence[int]) -> Value:
        """Reduce over dims (removed from the shape). Float sums accumulate in at least float32.

        argmax/argmin take exactly one dim and give int64: first index of the extreme, NaN counting
        as the maximum (torch semantics). An empty reduction gives the identity of kind."""
        dims = tuple(sorted(set(dims)))
        k = REDUCE_KINDS.index(kind)
        _check(all(0 <= d < x.rank for d in dims), "reduce", f"dims {dims} out of range for rank {x.rank}")
        if kind in ("and", "or"):
            _check(x.dtype == torch.bool, "reduce", f"{kind} needs bool, got {x.dtype}")
        elif kind in ("sum", "prod"):
            _check(x.dtype != torch.bool, "reduce", f"{kind} needs a numeric operand")
        if kind in ("argmax", "argmin"):
            _check(len(dims) == 1 and x.shape[dims[0]] > 0, "reduce", f"{kind} needs one non-empty dim")
        shape = tuple(s for d, s in enumerate(x.shape) if d not in dims)
        out_dtype = torch.int64 if kind in ("argmax", "argmin") else x.dtype

        def ref():
            t = x.data
            if not dims:
                return t.clone()
            if kind in ("argmax", "argmin"):
                return (torch.argmax if kind == "argmax" else torch.argmin)(t, dims[0])
            if any(x.shape[d] == 0 for d in dims):
                return torch.full(shape, _identity(kind, x.dtype), dtype=x.dtype)
            if kind == "sum":
                return t.sum(dims, dtype=t.dtype)
            if kind == "prod":
                for d in reversed(dims):
                    t = t.prod(d, dtype=t.dtype)
                return t
            if kind == "max":
                return t.amax(dims)
            if kind == "min":
                return t.amin(dims)
            return (t.all if kind == "and" else t.any)(dims) if len(dims) == 1 else \
                (t.all() if kind == "and" else t.any()) if len(dims) == t.dim() else _reduce_logical(t, kind, dims)
        return self._emit("reduce", (x,), out_dtype, shape, (k, *dims), (), self._ref(ref))

    def reduce_window(self, x: Value, kind: str, window: Sequence[int], strides: Sequence[int],
                      pad_lo: Sequence[int], pad_hi: Sequence[int], dilation: Sequence[int] | None = None) -> Value:
        """Sliding-window reduction; padding is filled with kind's identity (0, -inf, +inf)."""
        r = x.rank
        window, strides, pad_lo, pad_hi = tuple(window), tuple(strides), tuple(pad_lo), tuple(pad_hi)
        dilation = tuple(dilation) if dilation is not None else (1,) * r
        _check(len(window) == len(strides) == len(pad_lo) == len(pad_hi) == len(dilation) == r,
               "reduce_window", "attribute lengths must equal rank")
        _check(x.dtype != torch.bool, "reduce_window", "needs a numeric operand")
        k = WINDOW_KINDS.index(kind)
        shape = []
        for d in range(r):
            span = (window[d] - 1) * dilation[d] + 1
            padded = x.shape[d] + pad_lo[d] + pad_hi[d]
            _check(window[d] >= 1 and strides[d] >= 1 and dilation[d] >= 1 and pad_lo[d] >= 0 and pad_hi[d] >= 0,
                   "reduce_window", f"dim {d}: invalid window/stride/padding")
            shape.append(0 if padded < span else (padded - span) // strides[d] + 1)

        def ref():
            t = torch.nn.functional.pad(x.data, [p for d in reversed(range(r)) for p in (pad_lo[d], pad_hi[d])],
                                        value=_identity(kind, x.dtype)) if r else x.data
            for d in range(r):
                span = (window[d] - 1) * dilation[d] + 1
                if t.shape[d] < span:
                    s = list(t.shape)
                    s[d] = 0
                    t = t.new_empty(s + [window[q] for q in range(d)] + [window[d]])
                    continue
                t = t.unfold(d, span, strides[d])[..., ::dilation[d]]
            wdims = tuple(range(r, 2 * r))
            if t.numel() == 0:
                return torch.empty(shape, dtype=x.dtype)
            return {"sum": lambda: t.sum(wdims, dtype=t.dtype), "max": lambda: t.amax(wdims),
                    "min": lambda: t.amin(wdims)}[kind]()
        return self._emit("reduce_window", (x,), x.dtype, shape,
                          (k, *window, *strides, *pad_lo, *pad_hi, *dilation), (), self._ref(ref))

    def scan(self, x: Value, kind: str, dim: int, reverse: bool = False) -> Value:
        """Inclusive prefix scan along dim (cumsum/cumprod/cummax/cummin values)."""
        _check(0 <= dim < max(x.rank, 1), "scan", f"dim {dim} out of range")
        _check(x.dtype != torch.bool, "scan", "needs a numeric operand")
        k = SCAN_KINDS.index(kind)

        def ref():
            t = x.data.flip(dim) if reverse else x.data
            if x.rank == 0:
                out = t.clone()
            elif kind == "sum":
                out = t.cumsum(dim, dtype=t.dtype)
            elif kind == "prod":
                out = t.cumprod(dim, dtype=t.dtype)
            else:
                out = (t.cummax if kind == "max" else t.cummin)(dim).values
            return out.flip(dim) if reverse else out
        return self._emit("scan", (x,), x.dtype, x.shape, (k, dim, int(reverse)), (), self._ref(ref))

    # -- contractions ----------------------------------------------------------------------
    def dot_general(self, lhs: Value, rhs: Value, lhs_batch: Sequence[int], rhs_batch: Sequence[int],
                    lhs_contract: Sequence[int], rhs_contract: Sequence[int]) -> Value:
        """StableHLO dot_general: result dims are batch, lhs free, rhs free (in operand order)."""
        lb, rb, lc, rc = map(tuple, (lhs_batch, rhs_batch, lhs_contract, rhs_contract))
        _check(lhs.dtype == rhs.dtype and lhs.dtype != torch.bool, "dot_general", f"operands {lhs} and {rhs}")
        _check(len(lb) == len(rb) and len(lc) == len(rc), "dot_general", "dimension list lengths differ")
        _check(all(lhs.shape[a] == rhs.shape[b] for a, b in zip(lb + lc, rb + rc)), "dot_general",
               f"batch/contracting sizes differ: {lhs.shape} vs {rhs.shape}")
        lf = [d for d in range(lhs.rank) if d not in lb + lc]
        rf = [d for d in range(rhs.rank) if d not in rb + rc]
        shape = [lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lf] + [rhs.shape[d] for d in rf]

        def ref():
            a = lhs.data.permute(*lb, *lf, *lc)
            b = rhs.data.permute(*rb, *rc, *rf)
            bs = [lhs.shape[d] for d in lb]
            m = math.prod(lhs.shape[d] for d in lf)
            k = math.prod(lhs.shape[d] for d in lc)
            n = math.prod(rhs.shape[d] for d in rf)
            a = a.reshape(math.prod(bs), m, k)
            b = b.reshape(math.prod(bs), k, n)
            if lhs.dtype.is_floating_point:
                out = torch.bmm(a, b)
            else:  # integer bmm is not implemented on CPU: exact int64 multiply-sum
                out = (a.long().unsqueeze(-1) * b.long().unsqueeze(1)).sum(2).to(lhs.dtype)
            return out.reshape(shape)
        return self._emit("dot_general", (lhs, rhs), lhs.dtype, shape,
                          (len(lb), *lb, *rb, len(lc), *lc, *rc), (), self._ref(ref))

    def convolution(self, lhs: Value, rhs: Value, strides: Sequence[int], pad_lo: Sequence[int],
                    pad_hi: Sequence[int], lhs_dilation: Sequence[int], rhs_dilation: Sequence[int],
                    groups: int = 1) -> Value:
        """N-d convolution (cross-correlation). lhs [N, C, *sp], rhs [O, C/groups, *k], out [N, O, *sp'].

        lhs_dilation inserts (d-1) zeros between input elements (transposed convolution);
        padding may be negative (crops)."""
        nsp = lhs.rank - 2
        strides, pad_lo, pad_hi = tuple(strides), tuple(pad_lo), tuple(pad_hi)
        lhs_dilation, rhs_dilation = tuple(lhs_dilation), tuple(rhs_dilation)
        _check(nsp >= 1 and rhs.rank == lhs.rank, "convolution", f"ranks {lhs.rank}, {rhs.rank}")
        _check(lhs.dtype == rhs.dtype and lhs.dtype.is_floating_point, "convolution", f"needs float operands")
        _check(all(len(a) == nsp for a in (strides, pad_lo, pad_hi, lhs_dilation, rhs_dilation)), "convolution",
               "attribute lengths must equal the spatial rank")
        _check(groups >= 1 and lhs.shape[1] == rhs.shape[1] * groups and rhs.shape[0] % groups == 0, "convolution",
               f"channels: input {lhs.shape[1]}, weight {rhs.shape}, groups {groups}")
        sp = []
        for d in range(nsp):
            n = lhs.shape[2 + d]
            dil_in = n + max(n - 1, 0) * (lhs_dilation[d] - 1) + pad_lo[d] + pad_hi[d]
            span = (rhs.shape[2 + d] - 1) * rhs_dilation[d] + 1
            _check(dil_in >= span, "convolution", f"spatial dim {d}: input {dil_in} smaller than kernel span {span}")
            sp.append((dil_in - span) // strides[d] + 1)
        shape = (lhs.shape[0], rhs.shape[0], *sp)

        def ref():
            t = lhs.data
            for d in range(nsp):
                if lhs_dilation[d] > 1 and t.shape[2 + d] > 1:
                    n = t.shape[2 + d]
                    s = list(t.shape)
                    s[2 + d] = n + (n - 1) * (lhs_dilation[d] - 1)
                    z = t.new_zeros(s)
                    idx = [slice(None)] * t.dim()
                    idx[2 + d] = slice(None, None, lhs_dilation[d])
                    z[tuple(idx)] = t
                    t = z
            pads = [p for d in reversed(range(nsp)) for p in (pad_lo[d], pad_hi[d])]
            t = torch.nn.functional.pad(t, pads)
            conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[nsp - 1]
            if lhs.dtype in (torch.float16, torch.bfloat16):
                return conv(t.float(), rhs.data.float(), None, strides, 0, rhs_dilation, groups).to(lhs.dtype)
            return conv(t, rhs.data, None, strides, 0, rhs_dilation, groups)
        return self._emit("convolution", (lhs, rhs), lhs.dtype, shape,
                          (nsp, *strides, *pad_lo, *pad_hi, *lhs_dilation, *rhs_dilation, groups), (), self._ref(ref))

    # -- sorting ---------------------------------------------------------------------------
    def sort(self, x: Value, dim: int, descending: bool = False, stable: bool = True) -> Value:
        """int64 permutation that sorts x along dim (argsort); NaN sorts as the largest value.
        Ties keep their original order (the result is always stable)."""
        _check(0 <= dim < max(x.rank, 1), "sort", f"dim {dim} out of range")

        def ref():
            if x.rank == 0:
                return torch.zeros((), dtype=torch.int64)
            return torch.sort(x.data, dim=dim, descending=descending, stable=True).indices
        return self._emit("sort", (x,), torch.int64, x.shape, (dim, int(descending), 1), (), self._ref(ref))

    # -- linear algebra -----------------------------------------------------------------------
    def cholesky(self, a: Value, lower: bool = True) -> Value:
        """Cholesky factor of each [..., n, n] matrix (float32/float64), read from its `lower`
        (else upper) triangle as a symmetric matrix. The factor's other triangle is zero. For a
        matrix whose leading minor of order k is not positive-definite, columns (rows, upper)
        k - 1 onward are NaN (the host runtime; PJRT plugins return what they compute)."""
        _check(a.rank >= 2 and a.shape[-1] == a.shape[-2], "cholesky", f"needs square matrices, got {a}")
        _check(a.dtype in (torch.float32, torch.float64), "cholesky", f"needs float32 or float64, got {a.dtype}")

        def ref():
            t = a.data
            sym = t.tril() + t.tril(-1).mT if lower else t.triu() + t.triu(1).mT
            factor, info = torch.linalg.cholesky_ex(sym, upper=not lower)
            bad = (info.unsqueeze(-1) > 0) & (torch.arange(t.shape[-1]) >= (info - 1).unsqueeze(-1))
            return factor.masked_fill(bad.unsqueeze(-2) if lower else bad.unsqueeze(-1), math.nan)
        return self._emit("cholesky", (a,), a.dtype, a.shape, (int(lower),), (), self._ref(ref))

    def triangular_solve(self, a: Value, b: Value, left_side: bool, lower: bool, unit_diagonal: bool = False,
                         transpose_a: bool = False) -> Value:
        """x with op(a) @ x = b (left_side) or x @ op(a) = b, op(a) = a or a^T; a [..., n, n]
        reads only its `lower` (else upper) triangle, and not its diagonal when unit_diagonal;
        b [..., n, k] (left) or [..., k, n], with a's batch dims and dtype (float32/float64)."""
        r = a.rank
        _check(r >= 2 and a.shape[-1] == a.shape[-2] and b.rank == r, "triangular_solve", f"operands {a}, {b}")
        _check(a.dtype == b.dtype and a.dtype in (torch.float32, torch.float64), "triangular_solve",
               f"needs float32 or float64 operands of one dtype, got {a.dtype}, {b.dtype}")
        _check(a.shape[:-2] == b.shape[:-2] and b.shape[-2 if left_side else -1] == a.shape[-1],
               "triangular_solve", f"b {b} does not match a {a}")

        def ref():
            t = a.data.tril() if lower else a.data.triu()
            m = t.mT if transpose_a else t
            return torch.linalg.solve_triangular(m, b.data, upper=transpose_a == lower, left=left_side,
                                                 unitriangular=unit_diagonal)
        return self._emit("triangular_solve", (a, b), b.dtype, b.shape,
                          (int(left_side), int(lower), int(unit_diagonal), int(transpose_a)), (), self._ref(ref))

    # -- convenience wrappers for lowerings ------------------------------------------------
    def __getattr__(self, name: str):
        if name in _UNARY_REF:
            return lambda x: self.unary(name, x)
        if name in BINARY_NUMERIC + BINARY_FLOAT + BINARY_LOGICAL + BINARY_SHIFT:
            return lambda x, y: self.binary(name, x, y)
        raise AttributeError(name)


def _is_one(v: Value) -> bool:
    c = v.const if v.const is not None else v.splat
    return c is not None and not isinstance(c, bool) and c == 1


def _reduce_logical(t: torch.Tensor, kind: str, dims: tuple[int, ...]) -> torch.Tensor:
    for d in reversed(dims):
        t = t.all(d) if kind == "and" else t.any(d)
    return t


def _round_even(t: torch.Tensor) -> torch.Tensor:
    return torch.round(t)


_UNARY_REF = {
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil,
    "round_even": _round_even, "trunc": torch.trunc, "exp": torch.exp, "expm1": torch.expm1,
    "log": torch.log, "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "cbrt": lambda t: torch.sign(t) * torch.abs(t).pow(1.0 / 3.0),
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "asin": torch.asin,
    "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh,
    "acosh": torch.acosh, "atanh": torch.atanh, "logistic": torch.sigmoid, "erf": torch.erf,
    "erfinv": torch.erfinv, "lgamma": torch.lgamma, "digamma": torch.digamma,
    "not": lambda t: torch.logical_not(t) if t.dtype == torch.bool else torch.bitwise_not(t),
    "is_finite": torch.isfinite,
}


def _binary_ref(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    integer = not a.dtype.is_floating_point
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        if integer:  # truncating; x/0 raises ZeroDivisionError, MIN / -1 wraps to MIN (docs/ir.md)
            m1 = (b == -1) & a.dtype.is_signed  # uint8's 255 compares equal to -1
            q = torch.div(a, torch.where(m1, torch.ones_like(b), b), rounding_mode="trunc")
            return torch.where(m1, torch.neg(a), q)
        return a / b
    if op == "rem":
        if integer:  # MIN % -1 is 0 (CPU's integer division would trap there)
            m1 = (b == -1) & a.dtype.is_signed
            return torch.where(m1, torch.zeros_like(a), torch.fmod(a, torch.where(m1, torch.ones_like(b), b)))
        return torch.fmod(a, b)
    if op == "pow":
        return torch.pow(a, b)
    if op == "max":
        return torch.maximum(a, b)
    if op == "min":
        return torch.minimum(a, b)
    if op == "atan2":
        return torch.atan2(a, b)
    if op == "and":
        return a & b
    if op == "or":
        return a | b
    if op == "xor":
        return a ^ b
    if op == "shl":
        return torch.bitwise_left_shift(a, b)
    if op == "shr_arith":
        return torch.bitwise_right_shift(a, b)
    if op == "shr_logical":
        bits = torch.iinfo(a.dtype).bits
        mask = (1 << bits) - 1
        ua = a.long() & mask
        return torch.where((b < 0) | (b >= bits), torch.zeros_like(a), (ua >> b.long().clamp(0, bits - 1)).to(a.dtype))
    raise IRError(f"unknown binary op {op}")
