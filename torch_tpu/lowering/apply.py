"""Applying the lowering table to one op: lookup, mutating-op handling and decompositions.

``apply_lowering`` is the one entry used by the dispatcher bridge (strict/debug eager), by the
decomposition tracer below, and by the reference harness (lowering/testing.py), so every mode
sees the same IR for the same op.

Lookup order for an op: (1) a lowering registered for the exact overload; (2) for a mutating
op, its functional variant (``add_``/``add.out`` -> ``add.Tensor``), whose results are then
written into the mutated arguments; (3) a decomposition from ``torch._decomp``, traced on meta
tensors into the same builder (scalars are then baked into the program); else
NotImplementedError naming the op and dtypes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..ir.builder import GraphBuilder, Value
from .complex_value import ComplexValue, complex_args, complex_constant
from .registry import COMPLEX_LOWERINGS, lookup, op_key


class NeedsBakedScalars(Exception):
    """Raised when a lowering needs concrete scalar values; the caller re-lowers with them baked."""


# Ops that update arguments in place although their schema does not annotate it (ATen's
# native_batch_norm updates running_mean/running_var in training mode): op key -> argument
# indices. Their lowerings return new values for these after the results (None: unchanged).
UNANNOTATED_MUTATIONS: dict[str, tuple[int, ...]] = {"aten::native_batch_norm": (3, 4)}


def _is_write(arg) -> bool:
    return arg.alias_info is not None and arg.alias_info.is_write


def _is_scalar_type(t) -> bool:
    s = str(t)
    return s in ("Scalar", "float", "Optional[Scalar]", "Optional[float]", "number", "Optional[number]")


@functools.cache
def functional_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The out-of-place overload with the same non-out arguments (None if there is none)."""
    schema = op._schema
    name = schema.name.split("::")[1]
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    want = [(a.name, str(a.type)) for a in schema.arguments if not (_is_write(a) and a.kwarg_only)]
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    for overload in packet.overloads():
        cand = getattr(packet, overload)
        cs = cand._schema
        if cs.is_mutable:
            continue
        if [(a.name, str(a.type)) for a in cs.arguments] == want:
            return cand
    # Factory ops: arange.start_out <-> arange.start_step(..., dtype, layout, device, pin_memory).
    for overload in packet.overloads():
        cand = getattr(packet, overload)
        cs = cand._schema
        if cs.is_mutable:
            continue
        args = [(a.name, str(a.type)) for a in cs.arguments]
        if args[:len(want)] == want and all(a.name in _FACTORY_KWARGS for a in cs.arguments[len(want):]):
            return cand
    return None


_FACTORY_KWARGS = ("dtype", "layout", "device", "pin_memory")


def _dtypes_of(args: Sequence) -> str:
    seen = []
    for a in args:
        for v in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(v, (Value, ComplexValue)) and not v.wrapped and v.dtype not in seen:
                seen.append(v.dtype)
    return ", ".join(str(d).removeprefix("torch.") for d in seen) or "no tensor inputs"


def not_implemented(op: torch._ops.OpOverload, args: Sequence) -> NotImplementedError:
    return NotImplementedError(
        f"torch_tpu: '{op_key(op)}' is not implemented for the tpu device (dtypes: {_dtypes_of(args)}). "
        "Set TORCH_TPU_FALLBACK=cpu (or torch_tpu.set_fallback('cpu')) to run it on the CPU instead.")


def _is_number_for_tensor(x, schema_type) -> bool:
    """A Python number where the schema takes a Tensor (PyTorch wraps it as a 0-d tensor)."""
    return isinstance(x, (bool, int, float, complex)) and str(schema_type) in ("Tensor", "Optional[Tensor]")


def _as_value(b: GraphBuilder, x, schema_type) -> Value | None:
    """Python numbers passed for Scalar/float arguments become wrapped constants."""
    if x is None or isinstance(x, (Value, ComplexValue)):
        return x
    if isinstance(x, complex):
        return complex_constant(b, x, torch.complex128, wrapped=True)
    if isinstance(x, bool):
        v = b.constant(x, torch.bool)
    elif isinstance(x, int):
        v = b.constant(x, torch.int64)
    elif isinstance(x, float):
        v = b.constant(x, torch.float64)
    else:
        raise TypeError(f"unsupported scalar {x!r}")
    v.wrapped = True
    v.const = x
    return v


def apply_lowering(b: GraphBuilder, op: torch._ops.OpOverload, args: list) -> tuple[list, list]:
    """Lower op with schema-ordered args into b.

    Returns (returns, mutations): one entry per schema return (a Value, a list of Values, or
    ("arg", i) for a return aliasing argument i) and (arg_index, new value) pairs for the
    mutated arguments.
    """
    schema = op._schema
    args = [(_as_value(b, a, arg.type) if _is_scalar_type(arg.type) or _is_number_for_tensor(a, arg.type) else a)
            for a, arg in zip(args, schema.arguments)]
    mut = [i for i, a in enumerate(schema.arguments) if _is_write(a)]
    mut += UNANNOTATED_MUTATIONS.get(op_key(op), ())
    # A complex value (or dtype) selects the complex table: real lowerings never see one.
    fn = COMPLEX_LOWERINGS.get(op_key(op)) if complex_args(args) else lookup(op)
    if fn is not None:
        out = fn(b, *args)
    elif mut:
        func = functional_variant(op)
        if func is None:
            raise not_implemented(op, args)
        names = [a.name for a in schema.arguments]
        out_dtype = next((args[i].dtype for i in mut if isinstance(args[i], (Value, ComplexValue))), None)
        fargs = [args[names.index(a.name)] if a.name in names else (out_dtype if a.name == "dtype" else None)
                 for a in func._schema.arguments]
        rets, _ = apply_lowering(b, func, fargs)
        out = rets
    elif complex_args(args):
        # A decomposition reaching an op without a complex lowering names that op (prims::cosh);
        # the user called this one.
        try:
            out = trace_decomposition(b, op, args)
        except NotImplementedError as e:
            raise not_implemented(op, args) from e
    else:
        out = trace_decomposition(b, op, args)
    if not isinstance(out, (tuple, list)) or (len(schema.returns) == 1 and str(schema.returns[0].type) == "List[Tensor]"
                                               and (not out or isinstance(out[0], (Value, ComplexValue)))):
        out = [out]
    out = list(out)

    returns, mutations = [], []
    alias_sets = {}
    for i in mut:
        for s in (schema.arguments[i].alias_info.before_set if schema.arguments[i].alias_info else ()):
            alias_sets[s] = i
    k = 0
    for r in schema.returns:
        if r.alias_info is not None and r.alias_info.is_write:
            returns.append(("arg", alias_sets[next(iter(r.alias_info.before_set))]))
        else:
            returns.append(out[k])
            k += 1
    new_vals = out[k:]
    if mut and len(new_vals) != len(mut):
        raise RuntimeError(f"torch_tpu: lowering of {op_key(op)} returned {len(out)} values; expected "
                           f"{k} results plus {len(mut)} mutated arguments")
    for i, nv in zip(mut, new_vals):
        if nv is None:
            continue
        target = args[i]
        if isinstance(target, list):
            for t, v in zip(target, nv):
                _check_write(op, schema.arguments[i], t, v)
        else:
            _check_write(op, schema.arguments[i], target, nv)
        mutations.append((i, nv))
    return returns, mutations


def call(b: GraphBuilder, op: torch._ops.OpOverload, *args, **kwargs):
    """The result(s) of an op through the lowering table, for lowerings written in other ops.
    Positional args are in schema order, keyword-only ones included (as lowerings receive
    them); keyword args by name; the rest take their defaults."""
    schema = op._schema.arguments
    full = [args[i] if i < len(args) else kwargs[a.name] if a.name in kwargs
            else a.default_value if a.has_default_value() else None for i, a in enumerate(schema)]
    returns, _ = apply_lowering(b, op, full)
    return returns[0] if len(returns) == 1 else returns


def _check_write(op, arg, target: Value | None, v: Value) -> None:
    if target is None or v is None:
        return
    if v.dtype != target.dtype and not torch.can_cast(v.dtype, target.dtype):
        raise RuntimeError(f"result type {_tname(v.dtype)} can't be cast to the desired output type {_tname(target.dtype)}")
    if v.shape != target.shape and not arg.kwarg_only:
        raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast shape {list(v.shape)}")


def _tname(d: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
            torch.uint8: "Byte", torch.bool: "Bool"}.get(d, str(d))


# -- decompositions ---------------------------------------------------------------------------

@functools.cache
def _core_decompositions() -> dict:
    from torch._decomp import core_aten_decompositions

    return dict(core_aten_decompositions())


def decomposition_for(op: torch._ops.OpOverload):
    """Prefer decompositions into core ATen ops (lowered directly) over ones into prims."""
    from torch._decomp import decomposition_table

    from .decompositions import EXTRA_DECOMPOSITIONS

    fn = _core_decompositions().get(op) or decomposition_table.get(op) or EXTRA_DECOMPOSITIONS.get(op)
    if fn is None and _has_composite_kernel(op):
        fn = functools.partial(op.decompose)
    return fn


def _has_composite_kernel(op: torch._ops.OpOverload) -> bool:
    try:
        return op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)
    except RuntimeError:  # a Python-only op the dispatcher does not know (prims)
        return False


def normalize_args(schema, args: Sequence, kwargs: dict) -> list:
    """Schema-ordered positional list with defaults filled in."""
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        elif a.has_default_value():
            out.append(a.default_value)
        else:
            out.append(None)
    return out


# Ops a decomposition may call that read a tensor's metadata only (grid_sampler's x.device).
_METADATA_QUERIES = {torch.ops.prim.device.default}


class _Tracer(TorchDispatchMode):
    """Lowers every ATen op a decomposition calls on meta tensors into the builder."""

    def __init__(self, b: GraphBuilder, env: dict[int, Value]):
        super().__init__()
        self.b = b
        self.env = env

    def _value(self, x):
        if isinstance(x, torch.Tensor):
            v = self.env.get(id(x))
            if v is None:
                if x.device.type == "meta":
                    raise RuntimeError("torch_tpu: decomposition read a tensor it did not create")
                raise NeedsBakedScalars()
            return v
        if isinstance(x, (list, tuple)):
            return [self._value(y) for y in x]
        return x

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        meta_out = func(*args, **kwargs)
        if func in _METADATA_QUERIES:
            return meta_out  # answered from the meta tensor: nothing to compute
        full = normalize_args(func._schema, args, kwargs)
        vals = [self._value(a) for a in full]
        returns, mutations = apply_lowering(self.b, func, vals)
        for i, nv in mutations:
            src = full[i]
            if isinstance(src, (list, tuple)):
                for t, v in zip(src, nv):
                    self.env[id(t)] = v
            else:
                self.env[id(src)] = nv
        # One entry per schema return: a single Tensor[] return (broadcast_tensors, split) is one
        # entry holding a list, not one entry per tensor.
        outs = list(meta_out) if len(func._schema.returns) > 1 else [meta_out]
        for o, r in zip(outs, returns):
            if isinstance(r, tuple) and r and r[0] == "arg":
                continue
            if isinstance(o, torch.Tensor):
                self.env[id(o)] = r
            elif isinstance(o, (list, tuple)):
                for oo, rr in zip(o, r):
                    self.env[id(oo)] = rr
        return meta_out


def trace_decomposition(b: GraphBuilder, op: torch._ops.OpOverload, args: list):
    decomp = decomposition_for(op)
    if decomp is None:
        raise not_implemented(op, args)
    env: dict[int, Value] = {}
    keep = []

    def to_meta(x):
        if isinstance(x, (Value, ComplexValue)):
            if x.wrapped:
                c = getattr(x, "const", None)
                if c is None:
                    raise NeedsBakedScalars()
                return c
            t = torch.empty(x.shape, dtype=x.dtype, device="meta")
            env[id(t)] = x
            keep.append(t)
            return t
        if isinstance(x, list):
            return [to_meta(y) for y in x]
        return x

    margs = [to_meta(a) for a in args]
    names = [a.name for a in op._schema.arguments]
    pos = [m for m, a in zip(margs, op._schema.arguments) if not a.kwarg_only]
    kw = {n: m for n, m, a in zip(names, margs, op._schema.arguments) if a.kwarg_only}
    with _Tracer(b, env):
        out = decomp(*pos, **kw)

    def to_value(o):
        if isinstance(o, torch.Tensor):
            v = env.get(id(o))
            if v is None:
                raise RuntimeError(f"torch_tpu: decomposition of {op_key(op)} returned an untraced tensor")
            return v
        if isinstance(o, (list, tuple)):
            return [to_value(x) for x in o]
        return o

    res = to_value(out)
    return tuple(res) if isinstance(out, tuple) else res
