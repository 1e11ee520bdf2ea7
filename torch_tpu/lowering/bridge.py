"""Entry point the C++ dispatcher calls on a program-cache miss (never on a hit).

The C++ boxed kernel describes each schema argument of the ATen call:
  ("T", binding, scalar_type_code, shape)         a tpu tensor (program input `binding`)
  ("S", binding, scalar_type_code, wrapped, value, special)
                                                  a runtime scalar (Scalar/float arg, 0-d CPU tensor);
                                                  special: the key specialized its value (0 or 1),
                                                  so it is lowered as a constant
  [desc | None, ...]                               a tensor list
  anything else                                    the Python value (baked into the key)
and gets back ``(nodes, outputs, returns, rng_counters, baked)``:
  nodes    GraphBuilder.serialize()
  outputs  [(node_id, target)]: target >= 0 writes the tensor of that binding (converting the
           dtype, resizing an out= tensor whose size differs), -1 allocates the next new tensor
  returns  one entry per schema return: int k (new tensor k), ("b", binding) (an argument
           returned as is), None (an undefined tensor), or a list of those (Tensor[] returns)
  baked    True when scalars had to be baked in (the caller then keys on their values)
"""

from __future__ import annotations

import functools

import torch

from ..ir.builder import DTYPE_FROM_CODE, GraphBuilder, Value
from .apply import NeedsBakedScalars, apply_lowering
from .registry import BAKE_SCALARS, op_key

try:  # Dynamo's frame hook (a C function: importing it does not import torch._dynamo)
    from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
except ImportError:  # a torch build without Dynamo
    _set_eval_frame = None

_SCALAR_TYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
                 torch.float64, torch.complex32, torch.complex64, torch.complex128, torch.bool, torch.qint8,
                 torch.quint8, torch.qint32, torch.bfloat16]


@functools.cache
def resolve_op(qualname: str, overload: str) -> torch._ops.OpOverload:
    ns, name = qualname.split("::")
    packet = getattr(getattr(torch.ops, ns), name)
    return getattr(packet, overload or "default")


def _materialize(b: GraphBuilder, desc, arg, bake: bool, bindings: dict[int, int]):
    if isinstance(desc, tuple) and desc and desc[0] == "T":
        _, binding, code, shape = desc
        v = b.parameter(binding, DTYPE_FROM_CODE[code], shape)
        bindings[v.id] = binding
        return v
    if isinstance(desc, tuple) and desc and desc[0] == "S":
        _, binding, code, wrapped, value, special = desc
        dtype = DTYPE_FROM_CODE[code]
        v = b.constant(value, dtype) if bake or special else b.parameter(binding, dtype, ())
        v.wrapped = bool(wrapped)
        return v
    if isinstance(desc, list) and any(isinstance(d, tuple) for d in desc):
        return [None if d is None else _materialize(b, d, arg, bake, bindings) for d in desc]
    t = str(arg.real_type)  # .type shows ScalarType as int
    if isinstance(desc, int) and "ScalarType" in t:
        return _SCALAR_TYPES[desc]
    return desc


def lower_from_dispatch(qualname: str, overload: str, descs: list) -> tuple:
    # An eager op can miss the cache inside a torch.compile'd function (after a graph break),
    # where Dynamo's frame hook is set: without this, Dynamo would trace and compile the
    # lowering functions themselves as user code (torch.compiler.disable, done directly).
    prior = _set_eval_frame(None) if _set_eval_frame is not None else None
    try:
        return _lower_op(qualname, overload, descs)
    finally:
        if _set_eval_frame is not None:
            _set_eval_frame(prior)


def _lower_op(qualname: str, overload: str, descs: list) -> tuple:
    op = resolve_op(qualname, overload)
    bake = op_key(op) in BAKE_SCALARS
    try:
        return _lower(op, descs, bake)
    except NeedsBakedScalars:
        if bake:
            raise
        return _lower(op, descs, True)


def _lower(op: torch._ops.OpOverload, descs: list, bake: bool) -> tuple:
    b = GraphBuilder()
    schema = op._schema
    bindings: dict[int, int] = {}  # parameter node id -> binding
    args = [_materialize(b, d, a, bake, bindings) for d, a in zip(descs, schema.arguments)]
    returns, mutations = apply_lowering(b, op, args)

    outputs: list[tuple[int, int]] = []
    new_count = 0

    def new_tensor(v: Value) -> int:
        nonlocal new_count
        if not isinstance(v, Value):
            raise NotImplementedError(f"torch_tpu: {op_key(op)} returns a non-tensor value ({type(v).__name__})")
        outputs.append((v.id, -1))
        new_count += 1
        return new_count - 1

    def binding_of(x: Value) -> int:
        return bindings[x.id]

    codes = []
    for r in returns:
        if isinstance(r, tuple) and r and r[0] == "arg":
            a = args[r[1]]
            codes.append([("b", binding_of(x)) for x in a] if isinstance(a, list) else ("b", binding_of(a)))
        elif isinstance(r, list):
            codes.append([new_tensor(v) for v in r])
        elif r is None:  # e.g. a backward result disabled by output_mask: an undefined tensor
            codes.append(None)
        else:
            codes.append(new_tensor(r))
    for i, nv in mutations:
        target = args[i]
        if isinstance(target, list):
            for t, v in zip(target, nv):
                if t is not None and v is not None:
                    outputs.append((v.id, binding_of(t)))
        else:
            outputs.append((nv.id, binding_of(target)))
    return b.serialize(), outputs, codes, b.rng_counters, bake
