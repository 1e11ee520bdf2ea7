"""Lowerings: matrix products (mm, bmm, addmm, baddbmm, addbmm, addmv, mv, dot, vdot, _addmm_activation).

Every contraction becomes one ``dot_general``. ``torch.matmul`` and ``F.linear`` are composite in
PyTorch and reach dispatch as views plus mm/bmm/addmm/dot/mv, and outer/ger decompose to mul,
so these ops cover them.

Half types are contracted in float32 on converted operands and rounded once at the end, which
is what the CPU kernels do (they accumulate in float32), so results match CPU closely. The
``add*`` variants fold beta/alpha in the same float32 computation before the single rounding.
``beta`` and ``alpha`` are runtime scalars: ``beta == 0`` must ignore ``self`` (NaN/inf in self do
not propagate, as in BLAS), which is a runtime ``select`` rather than a Python branch.
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .core import broadcast_to, opmath
from .registry import register

aten = torch.ops.aten


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise RuntimeError(msg)


def _check_same_dtype(a: Value, b_: Value, what: str = "") -> None:
    _check(a.dtype == b_.dtype,
           f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b_.dtype}{what}")
    _check(a.dtype != torch.bool, f"\"{'addmm_impl_cpu_'}\" not implemented for 'Bool'")


def contract(b: GraphBuilder, lhs: Value, rhs: Value, lhs_batch: list[int], rhs_batch: list[int],
             lhs_contract: list[int], rhs_contract: list[int], keep_opmath: bool = False) -> Value:
    """dot_general in the op-math dtype (float32 for half types); rounds back unless keep_opmath."""
    comp = opmath(lhs.dtype)
    out = b.dot_general(b.convert(lhs, comp), b.convert(rhs, comp), lhs_batch, rhs_batch,
                        lhs_contract, rhs_contract)
    return out if keep_opmath else b.convert(out, lhs.dtype)


def _scaled(b: GraphBuilder, s: Value, x: Value) -> Value:
    """s * x with the runtime scalar s converted to x's dtype (ints truncate, as Scalar.to<int>)."""
    return b.mul(b.broadcast_in_dim(b.convert(s, x.dtype), x.shape, ()), x)


def _add_scaled(b: GraphBuilder, self: Value, prod: Value, beta: Value, alpha: Value, out_dtype: torch.dtype) -> Value:
    """beta * self + alpha * prod (prod already in op-math dtype), self broadcast to prod's shape.

    beta == 0 drops self entirely (CPU/BLAS semantics), so a select guards the product."""
    comp = prod.dtype
    s = broadcast_to(b, b.convert(self, comp), prod.shape)
    if beta.const is not None and beta.const == 1:
        term = s
    else:
        bs = b.broadcast_in_dim(b.convert(beta, comp), prod.shape, ())
        zero = b.full(0, comp, prod.shape)
        if comp == torch.bool:
            term = s
        else:
            is_zero = b.compare("eq", bs, zero)
            term = b.select(is_zero, zero, b.mul(bs, s))
    p = prod if alpha.const is not None and alpha.const == 1 else _scaled(b, alpha, prod)
    return b.convert(b.add(term, p), out_dtype)


def _check_empty_product_beta(self: Value, k: int, beta: Value) -> None:
    """With an empty contraction (k == 0) CPU's addmm/baddbmm/addbmm compute ``beta * self`` as a
    scalar multiply whose result type must cast back to self's: an integer self with a float beta
    (or a bool self with a number) raises. A runtime beta's value is unknown here, so a float
    0.0 raises too, where CPU returns zeros."""
    if k != 0 or beta.const == 0:
        return
    def category(d: torch.dtype) -> int:
        return 2 if d.is_floating_point or d.is_complex else 0 if d == torch.bool else 1
    if category(beta.dtype) > category(self.dtype):
        from .elementwise import _tname  # elementwise does not import linalg
        promoted = torch.get_default_dtype() if category(beta.dtype) == 2 else torch.int64
        raise RuntimeError(f"result type {_tname(promoted)} can't be cast to the desired output type {_tname(self.dtype)}")


@register(aten.mm.default)
def mm(b: GraphBuilder, x: Value, y: Value) -> Value:
    _check(x.rank == 2, "self must be a matrix")
    _check(y.rank == 2, "mat2 must be a matrix")
    _check(x.shape[1] == y.shape[0], f"mat1 and mat2 shapes cannot be multiplied "
           f"({x.shape[0]}x{x.shape[1]} and {y.shape[0]}x{y.shape[1]})")
    _check_same_dtype(x, y)
    return contract(b, x, y, [], [], [1], [0])


@register(aten.bmm.default)
def bmm(b: GraphBuilder, x: Value, y: Value) -> Value:
    _check(x.rank == 3, "batch1 must be a 3D tensor")
    _check(y.rank == 3, "batch2 must be a 3D tensor")
    _check(x.shape[0] == y.shape[0] and x.shape[2] == y.shape[1],
           f"Expected size for first two dimensions of batch2 tensor to be: [{x.shape[0]}, {x.shape[2]}] "
           f"but got: [{y.shape[0]}, {y.shape[1]}].")
    _check_same_dtype(x, y)
    return contract(b, x, y, [0], [0], [2], [1])


@register(aten.addmm.default)
def addmm(b: GraphBuilder, self: Value, m1: Value, m2: Value, beta: Value, alpha: Value) -> Value:
    _check(m1.rank == 2 and m2.rank == 2, "mat1 and mat2 must be matrices")
    _check(m1.shape[1] == m2.shape[0], f"mat1 and mat2 shapes cannot be multiplied "
           f"({m1.shape[0]}x{m1.shape[1]} and {m2.shape[0]}x{m2.shape[1]})")
    _check_same_dtype(m1, m2)
    _check(self.dtype == m1.dtype, f"self and mat2 must have the same dtype, but got {self.dtype} and {m1.dtype}")
    _check_empty_product_beta(self, m1.shape[1], beta)
    prod = contract(b, m1, m2, [], [], [1], [0], keep_opmath=True)
    return _add_scaled(b, self, prod, beta, alpha, m1.dtype)


@register(aten._addmm_activation.default)
def addmm_activation(b: GraphBuilder, self: Value, m1: Value, m2: Value, beta: Value, alpha: Value,
                     use_gelu: bool) -> Value:
    _check(m1.dtype.is_floating_point, "_addmm_activation needs floating-point operands")
    prod = contract(b, m1, m2, [], [], [1], [0], keep_opmath=True)
    # CPU adds in op-math, rounds to the result dtype, then applies the activation in place.
    y = b.convert(_add_scaled(b, self, prod, beta, alpha, m1.dtype), opmath(m1.dtype))
    if use_gelu:  # exact (erf) GELU, the default approximation of at::gelu_
        half = b.full(0.5, y.dtype, y.shape)
        inv_sqrt2 = b.full(1.0 / math.sqrt(2.0), y.dtype, y.shape)
        one = b.full(1.0, y.dtype, y.shape)
        y = b.mul(b.mul(y, half), b.add(one, b.erf(b.mul(y, inv_sqrt2))))
    else:  # max propagates NaN, like relu (clamp_min) on CPU
        y = b.max(y, b.full(0, y.dtype, y.shape))
    return b.convert(y, m1.dtype)


@register(aten.baddbmm.default)
def baddbmm(b: GraphBuilder, self: Value, b1: Value, b2: Value, beta: Value, alpha: Value) -> Value:
    _check(b1.rank == 3 and b2.rank == 3, "batch1 and batch2 must be 3D tensors")
    _check(b1.shape[0] == b2.shape[0] and b1.shape[2] == b2.shape[1],
           f"Expected size for first two dimensions of batch2 tensor to be: [{b1.shape[0]}, {b1.shape[2]}] "
           f"but got: [{b2.shape[0]}, {b2.shape[1]}].")
    _check_same_dtype(b1, b2)
    _check(self.dtype == b1.dtype, f"Input dtypes must be the same, got: input {self.dtype}, batch1: {b1.dtype}")
    _check_empty_product_beta(self, b1.shape[2], beta)
    prod = contract(b, b1, b2, [0], [0], [2], [1], keep_opmath=True)
    return _add_scaled(b, self, prod, beta, alpha, b1.dtype)


@register(aten.addbmm.default)
def addbmm(b: GraphBuilder, self: Value, b1: Value, b2: Value, beta: Value, alpha: Value) -> Value:
    _check(b1.rank == 3 and b2.rank == 3, "batch1 and batch2 must be 3D tensors")
    _check(b1.shape[0] == b2.shape[0] and b1.shape[2] == b2.shape[1],
           f"batch1 and batch2 shapes cannot be multiplied ({b1.shape} and {b2.shape})")
    _check_same_dtype(b1, b2)
    _check_empty_product_beta(self, b1.shape[0] * b1.shape[2], beta)
    # The sum over the batch is one more contracting dimension.
    prod = contract(b, b1, b2, [], [], [0, 2], [0, 1], keep_opmath=True)
    return _add_scaled(b, self, prod, beta, alpha, b1.dtype)


@register(aten.addmv.default)
def addmv(b: GraphBuilder, self: Value, mat: Value, vec: Value, beta: Value, alpha: Value) -> Value:
    _check(mat.rank == 2 and vec.rank == 1, f"vector + matrix @ vector expected, got {self.rank}, {mat.rank}, {vec.rank}")
    _check(mat.shape[1] == vec.shape[0], f"size mismatch, got input ({mat.shape[0]}), mat ({mat.shape[0]}x{mat.shape[1]}), vec ({vec.shape[0]})")
    _check_same_dtype(mat, vec)
    prod = contract(b, mat, vec, [], [], [1], [0], keep_opmath=True)
    return _add_scaled(b, self, prod, beta, alpha, mat.dtype)


@register(aten.mv.default)
def mv(b: GraphBuilder, mat: Value, vec: Value) -> Value:
    _check(mat.rank == 2 and vec.rank == 1, f"vector + matrix @ vector expected, got 1, {mat.rank}, {vec.rank}")
    _check(mat.shape[1] == vec.shape[0], f"size mismatch, got input ({mat.shape[0]}), mat ({mat.shape[0]}x{mat.shape[1]}), vec ({vec.shape[0]})")
    _check_same_dtype(mat, vec)
    return contract(b, mat, vec, [], [], [1], [0])


@register(aten.dot.default, aten.vdot.default)
def dot(b: GraphBuilder, x: Value, y: Value) -> Value:
    # vdot conjugates its first operand; for the real dtypes the IR has, it is dot.
    _check(x.rank == 1 and y.rank == 1, f"1D tensors expected, but got {x.rank}D and {y.rank}D tensors")
    _check(x.shape == y.shape, f"inconsistent tensor size, expected tensor [{x.shape[0]}] and src [{y.shape[0]}] "
           "to have the same number of elements, but got different numbers of elements")
    _check(x.dtype == y.dtype, f"dot : expected both vectors to have same dtype, but found {x.dtype} and {y.dtype}")
    return contract(b, x, y, [], [], [0], [0])
