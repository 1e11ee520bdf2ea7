"""Complex tensors inside a lowering: a pair of real values.

Design: the IR and both runtimes are real-only (StableHLO has complex element types, our host
kernels and most of our op set do not). A complex64/complex128 tensor therefore crosses a
program's boundary as its ``view_as_real`` (csrc/exec/dispatch.cpp ``tensor_binding``: a
float32/float64 tensor with a trailing dim of 2), and inside a lowering it is a
``ComplexValue``: its real and imaginary parts as two real ``Value``s of the tensor's shape.
Planar parts, not an interleaved pair, so each part reuses every real lowering unchanged
(broadcasting, type promotion, reductions, products, views). An op that sees a complex value
is looked up in the complex table only (lowering/complex_ops.py), so a real lowering never
computes on a complex tensor by mistake.
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value

COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}
REAL_OF = {c: r for r, c in COMPLEX_OF.items()}


class ComplexValue:
    """A complex tensor as two real Values of equal dtype and shape."""

    __slots__ = ("re", "im", "id", "wrapped", "const")

    def __init__(self, re: Value, im: Value):
        if re.dtype != im.dtype or re.shape != im.shape:
            raise RuntimeError(f"torch_tpu: complex parts differ: {re} and {im}")
        if re.dtype not in COMPLEX_OF:
            raise TypeError(f"torch_tpu: complex values need float32 or float64 parts, got {re.dtype}")
        self.re = re
        self.im = im
        self.id: int | None = None  # the parameter node of a program input (its binding)
        self.wrapped = False  # True for a Python complex number
        self.const: complex | None = None

    @property
    def dtype(self) -> torch.dtype:
        return COMPLEX_OF[self.re.dtype]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.re.shape

    @property
    def rank(self) -> int:
        return len(self.re.shape)

    def numel(self) -> int:
        return self.re.numel()

    def __repr__(self) -> str:
        return f"complex({self.re!r}, {self.im!r})"


def is_complex_dtype(d) -> bool:
    return isinstance(d, torch.dtype) and d.is_complex


def real_dtype(d: torch.dtype) -> torch.dtype:
    """float32 for complex64, float64 for complex128."""
    if d not in REAL_OF:
        raise TypeError(f"torch_tpu: dtype {d} is not supported on the tpu device (complex64 and complex128 are)")
    return REAL_OF[d]


def from_pair(b: GraphBuilder, pair: Value) -> ComplexValue:
    """The ComplexValue of a view_as_real value (shape [..., 2])."""
    shape = pair.shape[:-1]
    n = len(shape)
    re = b.reshape(b.slice(pair, [0] * (n + 1), list(shape) + [1]), shape)
    im = b.reshape(b.slice(pair, [0] * n + [1], list(shape) + [2]), shape)
    return ComplexValue(re, im)


def to_pair(b: GraphBuilder, c: ComplexValue) -> Value:
    """view_as_real of c: the parts stacked along a new trailing dim."""
    shape = tuple(c.shape) + (1,)
    return b.concatenate([b.reshape(c.re, shape), b.reshape(c.im, shape)], len(c.shape))


def complex_constant(b: GraphBuilder, value: complex, dtype: torch.dtype, wrapped: bool) -> ComplexValue:
    """A 0-d complex constant (a baked-in Python complex or CPU complex scalar)."""
    part = real_dtype(dtype)
    c = ComplexValue(b.constant(value.real, part), b.constant(value.imag, part))
    c.re.wrapped = c.im.wrapped = wrapped
    c.wrapped = wrapped
    c.const = complex(value)
    return c


def complex_args(args) -> bool:
    """True when a call must use the complex table: a complex value, or a complex dtype asked for."""
    for a in args:
        if isinstance(a, ComplexValue) or is_complex_dtype(a):
            return True
        if isinstance(a, (list, tuple)) and any(isinstance(x, ComplexValue) for x in a):
            return True
    return False
