"""Entry point the C++ dispatcher calls on a program-cache miss (never on a hit).

The C++ boxed kernel describes each schema argument of the ATen call:
  ("T", binding, scalar_type_code, shape, bits)   a tpu tensor (program input `binding`); bits:
                                                  1 conjugate view, 2 negative view (PyTorch's
                                                  lazy conj()/neg bits, applied here), 4
                                                  contiguous (only for ops keyed on it:
                                                  lowering.layout); a complex tensor is bound as
                                                  its view_as_real
  ("S", binding, scalar_type_code, wrapped, value, special)
                                                  a runtime scalar (Scalar/float arg, 0-d CPU tensor);
                                                  special: the key specialized its value (0 or 1),
                                                  so it is lowered as a constant
  [desc | None, ...]                               a tensor list
  anything else                                    the Python value (baked into the key)
and gets back ``(nodes, outputs, returns, rng_counters, baked)``:
  nodes    GraphBuilder.serialize()
  outputs  [(node_id, target[, dtype_code])]: target >= 0 writes the tensor of that binding
           (converting the dtype, resizing an out= tensor whose size differs), -1 allocates the
           next new tensor; dtype_code marks a complex new tensor (the node is its view_as_real)
  returns  one entry per schema return: ("n", k) (new tensor k), ("i", binding) (an argument
           returned as is), ("c", None) (an undefined tensor), or ("l", [those]) (Tensor[])
  baked    True when scalars had to be baked in (the caller then keys on their values)
outputs and returns are the output plan that compiled graphs hand over too, read by one parser
(csrc/exec/output_plan.h has the whole format).
"""

from __future__ import annotations

import functools

import torch

from ..ir.builder import DTYPE_FROM_CODE, GraphBuilder, Value
from .apply import NeedsBakedScalars, apply_lowering
from . import layout, shape_templates
from .complex_value import ComplexValue, complex_constant, from_pair, real_dtype, to_pair
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


_CONJ, _NEG, _CONTIGUOUS = 1, 2, 4


def _math_bits(b: GraphBuilder, v: Value | ComplexValue, bits: int) -> Value | ComplexValue:
    """The value a conj()/neg view stands for; both are involutions, so also the value to store
    through such a view."""
    if isinstance(v, ComplexValue):
        re, im = v.re, v.im
        if bits & _NEG:
            re = b.unary("neg", re)
        if bool(bits & _CONJ) != bool(bits & _NEG):
            im = b.unary("neg", im)
        return ComplexValue(re, im)
    return b.unary("neg", v) if bits & _NEG else v


def _materialize(b: GraphBuilder, desc, arg, bake: bool, bindings: dict[int, int], bits_of: dict[int, int]):
    if isinstance(desc, tuple) and desc and desc[0] == "T":
        _, binding, code, shape, bits = desc
        dtype = _SCALAR_TYPES[code]
        if dtype.is_complex:  # bound as its view_as_real (csrc/exec/dispatch.cpp tensor_binding)
            v = from_pair(b, b.parameter(binding, real_dtype(dtype), tuple(shape) + (2,)))
        else:
            v = b.parameter(binding, dtype, shape)
        if bits & (_CONJ | _NEG):
            v = _math_bits(b, v, bits)
        if bits & _CONTIGUOUS:
            layout.mark_contiguous(v)
        bindings[id(v)] = binding
        bits_of[binding] = bits & (_CONJ | _NEG)
        return v
    if isinstance(desc, tuple) and desc and desc[0] == "S":
        _, binding, code, wrapped, value, special = desc
        dtype = _SCALAR_TYPES[code]
        if dtype.is_complex:  # complex scalars are always baked (the key holds their value)
            return complex_constant(b, value, dtype, bool(wrapped))
        v = b.constant(value, dtype) if bake or special else b.parameter(binding, dtype, ())
        v.wrapped = bool(wrapped)
        return v
    if isinstance(desc, list) and any(isinstance(d, tuple) for d in desc):
        return [None if d is None else _materialize(b, d, arg, bake, bindings, bits_of) for d in desc]
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
    sig = shape_templates.signature(qualname, overload, descs)
    reused = shape_templates.lookup(*sig) if sig is not None else None
    if reused is not None and not shape_templates.verifying():
        return reused
    op = resolve_op(qualname, overload)
    bake = op_key(op) in BAKE_SCALARS
    try:
        result = _lower(op, descs, bake)
    except NeedsBakedScalars:
        if bake:
            raise
        result = _lower(op, descs, True)
    if reused is not None:
        shape_templates.check(qualname, overload, descs, reused, result)
    elif sig is not None:
        shape_templates.observe(*sig, result)
    return result


def _lower(op: torch._ops.OpOverload, descs: list, bake: bool) -> tuple:
    layout.reset()
    b = GraphBuilder()
    schema = op._schema
    bindings: dict[int, int] = {}  # id() of an argument's value -> its binding
    bits_of: dict[int, int] = {}  # binding -> conj/neg bits
    args = [_materialize(b, d, a, bake, bindings, bits_of) for d, a in zip(descs, schema.arguments)]
    returns, mutations = apply_lowering(b, op, args)

    outputs: list[tuple[int, ...]] = []
    new_count = 0

    def new_tensor(v: Value | ComplexValue) -> int:
        nonlocal new_count
        if isinstance(v, ComplexValue):
            outputs.append((to_pair(b, v).id, -1, _SCALAR_TYPES.index(v.dtype)))
        elif isinstance(v, Value):
            outputs.append((v.id, -1))
        else:
            raise NotImplementedError(f"torch_tpu: {op_key(op)} returns a non-tensor value ({type(v).__name__})")
        new_count += 1
        return new_count - 1

    def binding_of(x: Value | ComplexValue) -> int:
        return bindings[id(x)]

    def write(target: Value | ComplexValue, v: Value | ComplexValue) -> None:
        binding = binding_of(target)
        if isinstance(target, ComplexValue):
            if not isinstance(v, ComplexValue):
                re = b.convert(v, real_dtype(target.dtype))
                v = ComplexValue(re, b.full(0, re.dtype, re.shape))
            v = to_pair(b, _math_bits(b, v, bits_of[binding]))
        elif bits_of[binding]:
            v = _math_bits(b, v, bits_of[binding])
        outputs.append((v.id, binding))

    codes = []
    for r in returns:
        if isinstance(r, tuple) and r and r[0] == "arg":
            a = args[r[1]]
            codes.append(("l", [("i", binding_of(x)) for x in a]) if isinstance(a, list) else ("i", binding_of(a)))
        elif isinstance(r, list):
            codes.append(("l", [("n", new_tensor(v)) for v in r]))
        elif r is None:  # e.g. a backward result disabled by output_mask: an undefined tensor
            codes.append(("c", None))
        else:
            codes.append(("n", new_tensor(r)))
    for i, nv in mutations:
        target = args[i]
        if isinstance(target, list):
            for t, v in zip(target, nv):
                if t is not None and v is not None:
                    write(t, v)
        else:
            write(target, nv)
    return b.serialize(), outputs, codes, b.rng_counters, bake
