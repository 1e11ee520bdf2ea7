"""The complex lowering table: ATen ops on complex64/complex128 tensors, in real arithmetic.

Every op called with a complex tensor (or asked for a complex dtype) is looked up here only
(apply.py routes it); an op missing here and without a decomposition raises NotImplementedError
naming the complex dtype. Each entry computes on the two real parts of its ``ComplexValue``s
(complex_value.py) through the real lowerings (``_call``), so broadcasting, type promotion
and shape checks are the real ops' own.

Three shapes of lowering cover most ops:
* partwise: ops that act on each part alone (views, concatenation, gathers, sums, negation):
  the real op applied to the real parts and to the imaginary parts;
* bilinear: products (mul, mm, bmm, dot): f(a, b) = f(ar, br) - f(ai, bi) + i (f(ar, bi) + f(ai, br)),
  one product per part when an operand is real;
* explicit formulas for the rest (div, exp, log, abs, angle, sgn, polar, ...).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import call as _call
from .complex_value import COMPLEX_OF, ComplexValue, complex_constant, from_pair, is_complex_dtype, real_dtype, to_pair
from .registry import COMPLEX_LOWERINGS, op_key, register

aten = torch.ops.aten
Arg = Value | ComplexValue


def register_complex(*ops) -> Callable:
    """Decorator: fn is the lowering of each op (a packet: every overload) when it sees complex values."""

    def deco(fn: Callable) -> Callable:
        for op in ops:
            overloads = ([getattr(op, n) for n in op.overloads()] if isinstance(op, torch._ops.OpOverloadPacket)
                         else [op])
            for o in overloads:
                COMPLEX_LOWERINGS[op_key(o)] = fn
        return fn

    return deco


def _zeros(b: GraphBuilder, like: Value) -> Value:
    return b.full(0, like.dtype, like.shape)


def as_complex(b: GraphBuilder, x: Arg) -> ComplexValue:
    """A real value as a complex one (imaginary part 0); integers and bools become float32."""
    if isinstance(x, ComplexValue):
        return x
    if not x.dtype.is_floating_point or x.dtype in (torch.float16, torch.bfloat16):
        x = b.convert(x, torch.float32 if x.dtype != torch.float64 else torch.float64)
    im = _zeros(b, x)
    im.wrapped = x.wrapped
    c = ComplexValue(x, im)
    c.wrapped = x.wrapped
    return c


def _convert(b: GraphBuilder, c: ComplexValue, dtype: torch.dtype) -> ComplexValue:
    part = real_dtype(dtype)
    return c if c.re.dtype == part else ComplexValue(b.convert(c.re, part), b.convert(c.im, part))


# -- partwise -------------------------------------------------------------------------------

def _part(b: GraphBuilder, a, which: str, promote_lists: bool):
    if isinstance(a, ComplexValue):
        return getattr(a, which)
    if isinstance(a, list) and promote_lists and any(isinstance(x, ComplexValue) for x in a):
        return [None if x is None else getattr(as_complex(b, x), which) for x in a]
    if is_complex_dtype(a):
        return real_dtype(a)
    return a


def _combine(re, im):
    if isinstance(re, Value):
        return ComplexValue(re, im)
    if isinstance(re, (list, tuple)):
        return type(re)(_combine(r, i) for r, i in zip(re, im))
    return re


def _partwise(op: torch._ops.OpOverload) -> Callable:
    def lower(b: GraphBuilder, *args):
        re = _call(b, op, *[_part(b, a, "re", True) for a in args])
        im = _call(b, op, *[_part(b, a, "im", True) for a in args])
        return _combine(re, im)

    return lower


def _partwise_data(op: torch._ops.OpOverload, data: tuple[int, ...]) -> Callable:
    """Partwise, with the arguments at `data` (the values an op stores) promoted to complex:
    index_put's values or scatter's src may be real while self is complex."""

    def lower(b: GraphBuilder, *args):
        args = [as_complex(b, a) if i in data and isinstance(a, Value) else a for i, a in enumerate(args)]
        re = _call(b, op, *[_part(b, a, "re", True) for a in args])
        im = _call(b, op, *[_part(b, a, "im", True) for a in args])
        return _combine(re, im)

    return lower


for _op, _data in ((aten.index_put.default, (0, 2)), (aten.scatter.src, (0, 3)), (aten.scatter.value, (0, 3)),
                   (aten.scatter_add.default, (0, 3)), (aten.masked_scatter.default, (0, 2)),
                   (aten.put.default, (0, 2)), (aten.index_add.default, (0, 3)), (aten.index_copy.default, (0, 3)),
                   (aten.index_fill.int_Scalar, (0, 3)), (aten.index_fill.int_Tensor, (0, 3)),
                   (aten.slice_scatter.default, (0, 1)), (aten.select_scatter.default, (0, 1)),
                   (aten.diagonal_scatter.default, (0, 1))):
    register_complex(_op)(_partwise_data(_op, _data))


# Ops that act on each part alone: views and copies, gathers and scatters of whole elements,
# concatenation, sums (linear). A list argument with complex members promotes its real ones.
_PARTWISE = [
    aten.clone.default, aten.alias.default, aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.expand.default, aten.slice.Tensor,
    aten.select.int, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default,
    aten.cat.default, aten.stack.default, aten.flip.default, aten.roll.default, aten.index_select.default,
    aten.narrow.default, aten.repeat.default, aten.diagonal.default, aten.index.Tensor, aten.gather.default,
    aten.expand_copy.default, aten.permute_copy.default, aten.view_copy.default, aten.slice_copy.Tensor,
    aten.select_copy.int, aten.unsqueeze_copy.default, aten.squeeze_copy.dims, aten.diagonal_copy.default,
    aten.sum.default, aten.sum.dim_IntList, aten.mean.default, aten.mean.dim, aten.cumsum.default,
    aten.neg.default, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default,
    aten.tril.default, aten.triu.default, aten.unfold.default,
    aten.diag_embed.default, aten.movedim.int, aten.flatten.using_ints, aten.contiguous.default,
    aten.lift_fresh_copy.default, aten.detach.default, aten.trace.default, torch.ops.prims.neg.default,
    aten.take.default,
]
for _op in _PARTWISE:
    register_complex(_op)(_partwise(_op))


@register_complex(aten.view_as_real.default)
def view_as_real(b: GraphBuilder, x: ComplexValue) -> Value:
    return to_pair(b, x)


@register(aten.view_as_complex.default)  # a real input: in both tables, as complex() and polar()
@register_complex(aten.view_as_complex.default)
def view_as_complex(b: GraphBuilder, x: Value) -> ComplexValue:
    return from_pair(b, x)


@register_complex(aten.real.default)
def real(b: GraphBuilder, x: Arg) -> Value:
    return x.re if isinstance(x, ComplexValue) else x


@register_complex(aten.imag.default)
def imag(b: GraphBuilder, x: ComplexValue) -> Value:
    return x.im


# -- construction and conversion ------------------------------------------------------------

# complex() and polar() take real tensors: entries in both tables.
@register(aten.complex.default)
@register_complex(aten.complex.default)
def complex_(b: GraphBuilder, re: Value, im: Value) -> ComplexValue:
    if re.dtype != im.dtype:
        raise RuntimeError(f"Expected object of scalar type {re.dtype} but got scalar type {im.dtype} for second argument")
    if re.dtype not in COMPLEX_OF:
        raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got {re.dtype} and {im.dtype}")
    shape = torch.broadcast_shapes(re.shape, im.shape)
    return ComplexValue(_call(b, aten.expand.default, re, list(shape)), _call(b, aten.expand.default, im, list(shape)))


@register(aten.polar.default)
@register_complex(aten.polar.default)
def polar(b: GraphBuilder, abs_: Value, angle: Value) -> ComplexValue:
    if abs_.dtype != angle.dtype:
        raise RuntimeError(f"Expected object of scalar type {abs_.dtype} but got scalar type {angle.dtype} for second argument")
    return ComplexValue(_call(b, aten.mul.Tensor, abs_, _call(b, aten.cos.default, angle)),
                        _call(b, aten.mul.Tensor, abs_, _call(b, aten.sin.default, angle)))


def _to_dtype(b: GraphBuilder, x: Arg, dtype: torch.dtype | None) -> Arg:
    if dtype is None or dtype == x.dtype:
        return x
    if is_complex_dtype(dtype):
        return _convert(b, as_complex(b, x), dtype)
    # complex -> real keeps the real part, as PyTorch does (it warns that the imaginary part is discarded)
    return b.convert(x.re if isinstance(x, ComplexValue) else x, dtype)


@register_complex(aten._to_copy.default)
def to_copy(b: GraphBuilder, x: Arg, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None) -> Arg:
    return _to_dtype(b, x, dtype)


@register_complex(aten.copy.default)
def copy(b: GraphBuilder, self: Arg, src: Arg, non_blocking: bool = False) -> Arg:
    v = _to_dtype(b, src, self.dtype)
    if isinstance(v, ComplexValue):
        return _combine(_call(b, aten.expand.default, v.re, list(self.shape)),
                        _call(b, aten.expand.default, v.im, list(self.shape)))
    return _call(b, aten.expand.default, v, list(self.shape))


def _fill_parts(b: GraphBuilder, self: Arg, value: Arg) -> ComplexValue:
    v = as_complex(b, value)
    part = real_dtype(self.dtype)
    return ComplexValue(b.broadcast_in_dim(b.convert(b.reshape(v.re, ()), part), self.shape, ()),
                        b.broadcast_in_dim(b.convert(b.reshape(v.im, ()), part), self.shape, ()))


@register_complex(aten.fill.Scalar, aten.fill.Tensor)
def fill(b: GraphBuilder, self: ComplexValue, value: Arg) -> ComplexValue:
    return _fill_parts(b, self, value)


@register_complex(aten.zero.default)
def zero(b: GraphBuilder, self: ComplexValue) -> ComplexValue:
    return ComplexValue(_zeros(b, self.re), _zeros(b, self.im))


@register_complex(aten.full.default)
def full(b: GraphBuilder, size, fill_value: Arg, dtype=None, layout=None, device=None, pin_memory=None) -> ComplexValue:
    v = as_complex(b, fill_value)
    dtype = dtype or COMPLEX_OF[v.re.dtype if not v.wrapped else torch.get_default_dtype()]
    part = real_dtype(dtype)
    return ComplexValue(b.broadcast_in_dim(b.convert(v.re, part), list(size), ()),
                        b.broadcast_in_dim(b.convert(v.im, part), list(size), ()))


@register_complex(aten.scalar_tensor.default)
def scalar_tensor(b: GraphBuilder, s: Arg, dtype=None, layout=None, device=None, pin_memory=None) -> ComplexValue:
    return full(b, [], s, dtype)


# -- arithmetic -----------------------------------------------------------------------------

def _check_real_alpha(alpha: Arg | None, name: str) -> None:
    if isinstance(alpha, ComplexValue):
        raise NotImplementedError(f"torch_tpu: {name} with a complex alpha is not implemented for the tpu device")


def _add(b: GraphBuilder, x: Arg, y: Arg, alpha: Arg | None, op: torch._ops.OpOverload) -> ComplexValue:
    _check_real_alpha(alpha, op_key(op))
    x, y = as_complex(b, x), as_complex(b, y)
    return ComplexValue(_call(b, op, x.re, y.re, alpha), _call(b, op, x.im, y.im, alpha))


@register_complex(aten.add.Tensor, aten.add.Scalar)
def add(b: GraphBuilder, x: Arg, y: Arg, alpha: Arg | None = None) -> ComplexValue:
    return _add(b, x, y, alpha, aten.add.Tensor)


@register_complex(aten.sub.Tensor, aten.sub.Scalar)
def sub(b: GraphBuilder, x: Arg, y: Arg, alpha: Arg | None = None) -> ComplexValue:
    return _add(b, x, y, alpha, aten.sub.Tensor)


@register_complex(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(b: GraphBuilder, x: Arg, y: Arg, alpha: Arg | None = None) -> ComplexValue:
    return _add(b, y, x, alpha, aten.sub.Tensor)


def bilinear(b: GraphBuilder, f: Callable[[Value, Value], Value], x: Arg, y: Arg) -> ComplexValue:
    """f extended to complex operands, for f linear in each argument (products)."""
    if not isinstance(y, ComplexValue):
        return ComplexValue(f(x.re, y), f(x.im, y))
    if not isinstance(x, ComplexValue):
        return ComplexValue(f(x, y.re), f(x, y.im))
    re = _call(b, aten.sub.Tensor, f(x.re, y.re), f(x.im, y.im))
    im = _call(b, aten.add.Tensor, f(x.re, y.im), f(x.im, y.re))
    return ComplexValue(re, im)


def _product(op: torch._ops.OpOverload) -> Callable:
    def lower(b: GraphBuilder, x: Arg, y: Arg) -> ComplexValue:
        return bilinear(b, lambda p, q: _call(b, op, p, q), x, y)

    return lower


for _op in (aten.mul.Tensor, aten.mm.default, aten.bmm.default, aten.dot.default, aten.mv.default,
            aten.outer.default, aten.matmul.default):
    register_complex(_op)(_product(_op))
register_complex(aten.mul.Scalar)(_product(aten.mul.Tensor))


def _abs2(b: GraphBuilder, x: ComplexValue) -> Value:
    return _call(b, aten.add.Tensor, _call(b, aten.mul.Tensor, x.re, x.re), _call(b, aten.mul.Tensor, x.im, x.im))


@register_complex(aten.div.Tensor, aten.div.Scalar)
def div(b: GraphBuilder, x: Arg, y: Arg) -> ComplexValue:
    if not isinstance(y, ComplexValue):
        x = as_complex(b, x)
        return ComplexValue(_call(b, aten.div.Tensor, x.re, y), _call(b, aten.div.Tensor, x.im, y))
    return bilinear(b, lambda p, q: _call(b, aten.mul.Tensor, p, q), x, reciprocal(b, y))


@register_complex(aten.reciprocal.default)
def reciprocal(b: GraphBuilder, x: ComplexValue) -> ComplexValue:
    # 1 / z = conj(z) / |z|^2, scaled by the larger part first so |z|^2 neither overflows nor
    # underflows (CPU's complex division scales the same way).
    scale = _call(b, aten.maximum.default, _call(b, aten.abs.default, x.re), _call(b, aten.abs.default, x.im))
    re, im = _call(b, aten.div.Tensor, x.re, scale), _call(b, aten.div.Tensor, x.im, scale)
    d = _call(b, aten.mul.Tensor, _abs2(b, ComplexValue(re, im)), scale)
    return ComplexValue(_call(b, aten.div.Tensor, re, d), _call(b, aten.neg.default, _call(b, aten.div.Tensor, im, d)))


@register_complex(aten.conj_physical.default, aten._conj_physical.default, aten._conj.default, aten.conj.default,
                  aten.resolve_conj.default)
def conj_physical(b: GraphBuilder, x: Arg) -> Arg:
    return ComplexValue(x.re, _call(b, aten.neg.default, x.im)) if isinstance(x, ComplexValue) else x


@register_complex(aten.abs.default)
def abs_(b: GraphBuilder, x: ComplexValue) -> Value:
    return _call(b, aten.hypot.default, x.re, x.im)


@register_complex(aten.angle.default)
def angle(b: GraphBuilder, x: ComplexValue) -> Value:
    return _call(b, aten.atan2.default, x.im, x.re)


@register_complex(aten.sgn.default)
def sgn(b: GraphBuilder, x: ComplexValue) -> ComplexValue:
    r = abs_(b, x)
    zero = _call(b, aten.eq.Scalar, r, 0)
    safe = _call(b, aten.where.self, zero, b.full(1, r.dtype, r.shape), r)
    return ComplexValue(*(_call(b, aten.where.self, zero, _zeros(b, r), _call(b, aten.div.Tensor, p, safe))
                          for p in (x.re, x.im)))


@register_complex(aten.exp.default)
def exp(b: GraphBuilder, x: ComplexValue) -> ComplexValue:
    m = _call(b, aten.exp.default, x.re)
    return ComplexValue(_call(b, aten.mul.Tensor, m, _call(b, aten.cos.default, x.im)),
                        _call(b, aten.mul.Tensor, m, _call(b, aten.sin.default, x.im)))


@register_complex(aten.log.default)
def log(b: GraphBuilder, x: ComplexValue) -> ComplexValue:
    return ComplexValue(_call(b, aten.log.default, abs_(b, x)), angle(b, x))


# -- elementary functions (z = a + ib) -------------------------------------------------------

prims = torch.ops.prims


def _unary(*names: str) -> Callable:
    """Registers fn for aten::name and prims::name (decompositions reach the prims)."""
    ops = [getattr(aten, n).default for n in names] + [getattr(prims, n).default for n in names if hasattr(prims, n)]
    return register_complex(*ops)


def _r(b: GraphBuilder, name: str, *args) -> Value:
    """A real elementwise op by name (aten::name.default, or .Tensor for binary ones)."""
    packet = getattr(aten, name)
    return _call(b, packet.Tensor if "Tensor" in packet.overloads() else packet.default, *args)


def _separable(b: GraphBuilder, z: ComplexValue, re: tuple[str, str], im: tuple[str, str],
               im_sign: float = 1.0) -> ComplexValue:
    """f(a) g(b) + i s h(a) k(b) for z = a + ib, with re = (f, g), im = (h, k), s = im_sign:
    the form of sin, cos, sinh and cosh of a complex argument."""
    def term(fns: tuple[str, str]) -> Value:
        return _r(b, "mul", _r(b, fns[0], z.re), _r(b, fns[1], z.im))

    i = term(im)
    return ComplexValue(term(re), i if im_sign > 0 else _r(b, "neg", i))


@_unary("sin")
def sin(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return _separable(b, z, ("sin", "cosh"), ("cos", "sinh"))


@_unary("cos")
def cos(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return _separable(b, z, ("cos", "cosh"), ("sin", "sinh"), -1.0)


@_unary("sinh")
def sinh(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return _separable(b, z, ("sinh", "cos"), ("cosh", "sin"))


@_unary("cosh")
def cosh(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return _separable(b, z, ("cosh", "cos"), ("sinh", "sin"))


@_unary("tanh")
def tanh(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    # (sinh 2a + i sin 2b) / (cosh 2a + cos 2b); for |a| > 20 that is inf / inf, and the value
    # is sign(a) + 0i to float64 precision.
    a2, b2 = _r(b, "mul", z.re, 2.0), _r(b, "mul", z.im, 2.0)
    d = _r(b, "add", _r(b, "cosh", a2), _r(b, "cos", b2))
    big = _r(b, "gt", _r(b, "abs", z.re), 20.0)
    re = _call(b, aten.where.self, big, _r(b, "sign", z.re), _r(b, "div", _r(b, "sinh", a2), d))
    im = _call(b, aten.where.self, big, _zeros(b, z.im), _r(b, "div", _r(b, "sin", b2), d))
    return ComplexValue(re, im)


@_unary("tan")
def tan(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    t = tanh(b, ComplexValue(_r(b, "neg", z.im), z.re))  # tan z = -i tanh(iz)
    return ComplexValue(t.im, _r(b, "neg", t.re))


@_unary("sqrt")
def sqrt(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    # t = sqrt((|a| + |z|) / 2) is computed without cancellation; the other part is |b| / 2t.
    t = _r(b, "sqrt", _r(b, "mul", _r(b, "add", _r(b, "abs", z.re), abs_(b, z)), 0.5))
    safe_t = _call(b, aten.where.self, _r(b, "eq", t, 0.0), b.full(1, t.dtype, t.shape), t)
    other = _r(b, "div", _r(b, "abs", z.im), _r(b, "mul", safe_t, 2.0))
    other = _call(b, aten.where.self, _r(b, "eq", t, 0.0), _zeros(b, t), other)
    nonneg = _r(b, "ge", z.re, 0.0)
    re = _call(b, aten.where.self, nonneg, t, other)
    im = _call(b, aten.copysign.Tensor, _call(b, aten.where.self, nonneg, other, t), z.im)
    return ComplexValue(re, im)


@_unary("rsqrt")
def rsqrt(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return reciprocal(b, sqrt(b, z))


@_unary("log1p")
def log1p(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    # log|1 + z| = log1p(2a + a^2 + b^2) / 2 keeps small z's precision.
    s = _r(b, "add", _r(b, "mul", z.re, 2.0), _abs2(b, z))
    return ComplexValue(_r(b, "mul", _r(b, "log1p", s), 0.5), _call(b, aten.atan2.default, z.im, _r(b, "add", z.re, 1.0)))


@_unary("expm1")
def expm1(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    # e^a cos b - 1 = expm1(a) cos b - 2 sin^2(b / 2), without cancellation near 0
    h = _r(b, "sin", _r(b, "mul", z.im, 0.5))
    re = _r(b, "sub", _r(b, "mul", _r(b, "expm1", z.re), _r(b, "cos", z.im)), _r(b, "mul", _r(b, "mul", h, h), 2.0))
    return ComplexValue(re, _r(b, "mul", _r(b, "exp", z.re), _r(b, "sin", z.im)))


def _scale(b: GraphBuilder, z: ComplexValue, k: float) -> ComplexValue:
    return ComplexValue(_r(b, "mul", z.re, k), _r(b, "mul", z.im, k))


@_unary("exp2")
def exp2(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return exp(b, _scale(b, z, 0.6931471805599453))


@_unary("log2")
def log2(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return _scale(b, log(b, z), 1.4426950408889634)


@_unary("log10")
def log10(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return _scale(b, log(b, z), 0.4342944819032518)


def _times_i(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return ComplexValue(_r(b, "neg", z.im), z.re)


def _times_minus_i(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return ComplexValue(z.im, _r(b, "neg", z.re))


def _add_c(b: GraphBuilder, x: ComplexValue, y: ComplexValue) -> ComplexValue:
    return ComplexValue(_r(b, "add", x.re, y.re), _r(b, "add", x.im, y.im))


def _plus_real(b: GraphBuilder, z: ComplexValue, k: float) -> ComplexValue:
    return ComplexValue(_r(b, "add", z.re, k), z.im)


def _mul_c(b: GraphBuilder, x: ComplexValue, y: ComplexValue) -> ComplexValue:
    return bilinear(b, lambda p, q: _r(b, "mul", p, q), x, y)


@_unary("asinh")
def asinh(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    # log(z + sqrt(z^2 + 1)), evaluated at |re z| (no cancellation) and mirrored: asinh is odd
    neg = _r(b, "lt", z.re, 0.0)
    flip = lambda v: _call(b, aten.where.self, neg, _r(b, "neg", v), v)  # noqa: E731
    w = ComplexValue(flip(z.re), flip(z.im))
    r = log(b, _add_c(b, w, sqrt(b, _plus_real(b, _mul_c(b, w, w), 1.0))))
    return ComplexValue(flip(r.re), flip(r.im))


@_unary("asin")
def asin(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return _times_minus_i(b, asinh(b, _times_i(b, z)))  # asin z = -i asinh(iz)


@_unary("acos")
def acos(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    a = asin(b, z)  # pi/2 - asin z
    return ComplexValue(_r(b, "rsub", a.re, 1.5707963267948966), _r(b, "neg", a.im))


@_unary("acosh")
def acosh(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    # log(z + sqrt(z + 1) sqrt(z - 1)): the branch cut of PyTorch and C++ (re >= 0)
    return log(b, _add_c(b, z, _mul_c(b, sqrt(b, _plus_real(b, z, 1.0)), sqrt(b, _plus_real(b, z, -1.0)))))


@_unary("atanh")
def atanh(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    # re = log1p(4a / ((1 - a)^2 + b^2)) / 4, im = atan2(2b, (1 - a)(1 + a) - b^2) / 2: the
    # parts of (log(1 + z) - log(1 - z)) / 2 without its cancellations, at |re z| (atanh is odd)
    neg = _r(b, "lt", z.re, 0.0)
    flip = lambda v: _call(b, aten.where.self, neg, _r(b, "neg", v), v)  # noqa: E731
    z = ComplexValue(flip(z.re), flip(z.im))
    a, bb = z.re, _r(b, "mul", z.im, z.im)
    one_minus = _r(b, "rsub", a, 1.0)
    d = _r(b, "add", _r(b, "mul", one_minus, one_minus), bb)
    re = _r(b, "mul", _r(b, "log1p", _r(b, "div", _r(b, "mul", a, 4.0), d)), 0.25)
    x = _r(b, "sub", _r(b, "mul", one_minus, _r(b, "add", a, 1.0)), bb)
    im = _r(b, "mul", _call(b, aten.atan2.default, _r(b, "mul", z.im, 2.0), x), 0.5)
    return ComplexValue(flip(re), flip(im))


@_unary("atan")
def atan(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    return _times_minus_i(b, atanh(b, _times_i(b, z)))  # atan z = -i atanh(iz)


@register_complex(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar, prims.pow.default)
def pow_(b: GraphBuilder, x: Arg, y: Arg) -> ComplexValue:
    # z ** 2 (common in norms) as a product: exp(2 log z) rounds worse than CPU
    if not isinstance(y, ComplexValue) and y.const == 2:
        return _call(b, aten.mul.Tensor, x, x)
    x = as_complex(b, x)
    return exp(b, bilinear(b, lambda p, q: _r(b, "mul", p, q), y, log(b, x)))


@register_complex(aten.var.correction, prims.var.default)
def var(b: GraphBuilder, x: ComplexValue, dims=None, correction=None, *rest) -> Value:
    # The variance of a complex tensor is the sum of its parts' variances (real).
    keepdim = bool(rest[0]) if rest and isinstance(rest[0], bool) else False
    return _r(b, "add", _call(b, aten.var.correction, x.re, dims, correction=correction, keepdim=keepdim),
              _call(b, aten.var.correction, x.im, dims, correction=correction, keepdim=keepdim))


@register_complex(aten.std.correction)
def std(b: GraphBuilder, x: ComplexValue, dims=None, correction=None, keepdim: bool = False) -> Value:
    return _r(b, "sqrt", var(b, x, dims, correction, keepdim))


@register_complex(aten.var_mean.correction)
def var_mean(b: GraphBuilder, x: ComplexValue, dims=None, correction=None, keepdim: bool = False):
    mean = _partwise(aten.mean.dim)(b, x, dims, keepdim) if dims is not None else \
        _partwise(aten.mean.default)(b, x)
    if dims is None and keepdim:
        mean = _combine(*(_call(b, aten.reshape.default, p, [1] * x.rank) for p in (mean.re, mean.im)))
    return var(b, x, dims, correction, keepdim), mean


@register_complex(aten.std_mean.correction)
def std_mean(b: GraphBuilder, x: ComplexValue, dims=None, correction=None, keepdim: bool = False):
    v, mean = var_mean(b, x, dims, correction, keepdim)
    return _r(b, "sqrt", v), mean


@_unary("sigmoid")
def sigmoid(b: GraphBuilder, z: ComplexValue) -> ComplexValue:
    e = exp(b, ComplexValue(_r(b, "neg", z.re), _r(b, "neg", z.im)))
    return reciprocal(b, ComplexValue(_r(b, "add", e.re, 1.0), e.im))


def _nonzero(b: GraphBuilder, x: Arg) -> Value:
    if isinstance(x, ComplexValue):
        return _call(b, aten.logical_or.default, _r(b, "ne", x.re, 0.0), _r(b, "ne", x.im, 0.0))
    return x


def _logical(op: torch._ops.OpOverload) -> Callable:
    def lower(b: GraphBuilder, *args):
        return _call(b, op, *[_nonzero(b, a) for a in args])

    return lower


for _op in (aten.logical_and.default, aten.logical_or.default, aten.logical_xor.default, aten.logical_not.default):
    register_complex(_op)(_logical(_op))


@register_complex(aten.normal_.default)
def normal_(b: GraphBuilder, x: ComplexValue, mean=0.0, std=1.0, generator=None) -> ComplexValue:
    # As ATen: both parts drawn from N(mean, (std / sqrt(2))^2), one draw over view_as_real.
    pair = _call(b, aten.normal_functional.default, to_pair(b, x), mean, _r(b, "mul", std, 0.7071067811865476))
    return from_pair(b, pair)


@register_complex(aten.eq.Tensor, aten.eq.Scalar)
def eq(b: GraphBuilder, x: Arg, y: Arg) -> Value:
    x, y = as_complex(b, x), as_complex(b, y)
    return _call(b, aten.logical_and.default, _call(b, aten.eq.Tensor, x.re, y.re), _call(b, aten.eq.Tensor, x.im, y.im))


@register_complex(aten.ne.Tensor, aten.ne.Scalar)
def ne(b: GraphBuilder, x: Arg, y: Arg) -> Value:
    return _call(b, aten.logical_not.default, eq(b, x, y))


@register_complex(aten.isnan.default)
def isnan(b: GraphBuilder, x: ComplexValue) -> Value:
    return _call(b, aten.logical_or.default, _call(b, aten.isnan.default, x.re), _call(b, aten.isnan.default, x.im))


@register_complex(aten.where.self)
def where(b: GraphBuilder, cond: Value, x: Arg, y: Arg) -> ComplexValue:
    x, y = as_complex(b, x), as_complex(b, y)
    return ComplexValue(_call(b, aten.where.self, cond, x.re, y.re), _call(b, aten.where.self, cond, x.im, y.im))


@register_complex(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(b: GraphBuilder, x: ComplexValue, mask: Value, value: Arg) -> ComplexValue:
    v = as_complex(b, value)
    return ComplexValue(_call(b, aten.masked_fill.Tensor, x.re, mask, b.reshape(v.re, ())),
                        _call(b, aten.masked_fill.Tensor, x.im, mask, b.reshape(v.im, ())))


@register_complex(aten.constant_pad_nd.default)
def constant_pad_nd(b: GraphBuilder, x: ComplexValue, pad, value: Arg = 0) -> ComplexValue:
    v = as_complex(b, value) if isinstance(value, (Value, ComplexValue)) else None
    re = _call(b, aten.constant_pad_nd.default, x.re, pad, v.re if v is not None else value)
    im = _call(b, aten.constant_pad_nd.default, x.im, pad, v.im if v is not None else 0)
    return ComplexValue(re, im)


__all__ = ["ComplexValue", "as_complex", "bilinear", "complex_constant", "register_complex"]
