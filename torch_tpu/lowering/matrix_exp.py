"""Lowerings: the matrix exponential (linalg.matrix_exp, torch.matrix_exp) of real float matrices.

Design: scaling and squaring, as CPU's kernel, with every data-dependent choice turned into
tensor arithmetic because the graph cannot branch. exp(A) = exp(A / 2^s)^(2^s): per matrix, the
exponent s = max(0, ceil(log2(|A|_1 / theta))) is computed as a tensor from the 1-norm, A is
scaled by 2^-s (an exact power of two, built from s's bits, so the scaling adds no rounding), a
fixed degree-18 Taylor polynomial approximates exp of the scaled matrix (|A / 2^s|_1 <= theta,
where its truncation error is below the dtype's unit roundoff), and then MAX_SQUARINGS squarings
are unrolled, each kept (torch.where per batch element) only while that matrix still needs it.
CPU picks a polynomial degree per norm; using its largest one (18) everywhere differs from it
only by rounding, and theta is CPU's bound for that degree, so both scale alike. The polynomial
is evaluated by Paterson-Stockmeyer (A^2..A^5, then Horner in A^5): 7 matrix products, no
solve, so unlike a Pade approximant it needs no LU (lowering/lu.py caps the order) and works on
any order.

Range: the static squarings cover 1-norms up to theta * 2^MAX_SQUARINGS (~2e19 in float64,
~6e19 in float32); float16 and bfloat16 inputs (computed in float32, as CPU's accumulation)
need at most log2(n * max / theta) squarings, so all their finite inputs are covered with fewer.
Beyond the range, and for inputs holding inf or NaN, the result is NaN (CPU also gives NaN for
non-finite inputs): a matrix that large cannot be scaled far enough, and its exponential is
then in general rounding noise even on CPU (|A| eps >> 1). Graph cost: 7 + MAX_SQUARINGS
batched matrix products.

The backward needs no lowering of its own: ATen's matrix_exp backward is exp of the 2n x 2n
block matrix [[A^T, G], [0, A^T]], which lowers through this same function. Complex inputs have
no lowering (a NotImplementedError naming aten::linalg_matrix_exp).
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from . import core
from .apply import _tname, call
from .nn import check
from .registry import register

aten = torch.ops.aten

# Static cap on the squarings unrolled into the program (see the module docstring for the range).
MAX_SQUARINGS = 64

# Taylor degree of the approximant and the largest 1-norm it is applied to, per compute dtype:
# CPU's bounds for its degree-18 approximant (truncation error below the unit roundoff).
DEGREE = 18
THETA = {torch.float32: 3.010066362817634, torch.float64: 1.090863719290036}

# Paterson-Stockmeyer block size for DEGREE: A^2..A^5 plus 3 Horner steps in A^5.
_BLOCK = 5


def _matmul(b: GraphBuilder, x: Value, y: Value) -> Value:
    return call(b, aten.matmul.default, x, y)


def _eye(b: GraphBuilder, shape: list[int], dtype: torch.dtype) -> Value:
    """Identity matrices broadcast over the batch: [..., n, n]."""
    return call(b, aten.expand.default, call(b, aten.eye.default, shape[-1], dtype=dtype), shape)


def _taylor(b: GraphBuilder, a: Value) -> Value:
    """sum_{k <= DEGREE} A^k / k! by Paterson-Stockmeyer: sum_j (A^p)^j B_j with
    B_j = sum_{i < p} A^i / (j p + i)!, Horner in A^p (p = _BLOCK)."""
    shape, dtype = list(a.shape), a.dtype
    powers = [_eye(b, shape, dtype), a]
    for _ in range(2, _BLOCK + 1):
        powers.append(_matmul(b, powers[-1], a))
    top = powers.pop()  # A^p, the Horner variable

    def block(j: int) -> Value:
        acc = None
        for i in range(_BLOCK):
            k = j * _BLOCK + i
            if k > DEGREE:
                break
            term = call(b, aten.mul.Tensor, powers[i], 1.0 / math.factorial(k))
            acc = term if acc is None else call(b, aten.add.Tensor, acc, term)
        return acc

    result = block(DEGREE // _BLOCK)
    for j in range(DEGREE // _BLOCK - 1, -1, -1):
        result = call(b, aten.add.Tensor, block(j), _matmul(b, top, result))
    return result


def _max_squarings(dtype: torch.dtype, n: int, theta: float) -> int:
    """Squarings the program unrolls: MAX_SQUARINGS, or fewer where the input dtype's range bounds
    the 1-norm (every finite float16 matrix has |A|_1 <= n * 65504)."""
    bound = math.ceil(math.log2(max(n, 1)) + math.log2(torch.finfo(dtype).max) - math.log2(theta))
    return max(0, min(MAX_SQUARINGS, bound))


def _pow2_neg(b: GraphBuilder, s: Value, bits: int, dtype: torch.dtype) -> Value:
    """2^-s for int64 s in [0, 2^bits), exactly: the product of 2^-(2^j) over s's set bits."""
    scale = b.full(1.0, dtype, list(s.shape))
    for j in range(bits):
        on = call(b, aten.ne.Scalar, call(b, aten.bitwise_and.Scalar, s, 1 << j), 0)
        scale = call(b, aten.where.self, on, call(b, aten.mul.Tensor, scale, 2.0 ** -(1 << j)), scale)
    return scale


def matrix_exp(b: GraphBuilder, a: Value) -> Value:
    """exp(A) for a real float [..., n, n] matrix (computed in float32 for half types)."""
    out_dtype = a.dtype
    dtype = core.opmath(out_dtype)
    *batch, n, _ = a.shape
    if n == 0 or math.prod(batch) == 0:
        return b.full(0.0, out_dtype, list(a.shape))
    x = b.convert(a, dtype) if dtype != out_dtype else a
    theta = THETA[dtype]
    steps = _max_squarings(out_dtype, n, theta)

    norm = call(b, aten.amax.default, call(b, aten.sum.dim_IntList, call(b, aten.abs.default, x), [-2]), [-1])
    ratio = call(b, aten.div.Tensor, norm, theta)
    # NaN compares false: non-finite inputs land here too and get a NaN result below.
    in_range = call(b, aten.le.Scalar, ratio, 2.0 ** steps)
    ratio = call(b, aten.where.self, in_range, ratio, b.full(1.0, dtype, batch))
    # clamped above too: a log2 that rounds up at an exact power of two must not ask for more
    # squarings than are unrolled (the scaling and the squarings have to agree)
    s = call(b, aten.clamp.default, call(b, aten.ceil.default, call(b, aten.log2.default, ratio)), 0.0, float(steps))
    s = b.convert(s, torch.int64)  # [...] in [0, steps]

    scale = _pow2_neg(b, s, steps.bit_length(), dtype)
    x = call(b, aten.mul.Tensor, x, call(b, aten.unsqueeze.default, call(b, aten.unsqueeze.default, scale, -1), -1))
    x = _taylor(b, x)
    wide = [*batch, n, n]
    s_mat = call(b, aten.expand.default, call(b, aten.unsqueeze.default, call(b, aten.unsqueeze.default, s, -1), -1),
                 wide)
    for i in range(steps):
        # every matrix is squared (static shapes); only those with s > i keep it
        x = call(b, aten.where.self, call(b, aten.gt.Scalar, s_mat, i), _matmul(b, x, x), x)
    nan = b.full(float("nan"), dtype, wide)
    keep = call(b, aten.expand.default,
                call(b, aten.unsqueeze.default, call(b, aten.unsqueeze.default, in_range, -1), -1), wide)
    x = call(b, aten.where.self, keep, x, nan)
    return b.convert(x, out_dtype) if dtype != out_dtype else x


@register(aten.linalg_matrix_exp.default)
def linalg_matrix_exp(b: GraphBuilder, a: Value) -> Value:
    check(a.rank >= 2, "linalg.matrix_exp: The input tensor A must have at least 2 dimensions.")
    check(a.shape[-1] == a.shape[-2], f"linalg.matrix_exp: A must be batches of square matrices, but they are "
          f"{a.shape[-2]} by {a.shape[-1]} matrices")
    check(a.dtype.is_floating_point, f"linalg.matrix_exp: Expected a floating point or complex tensor as input. "
          f"Got {_tname(a.dtype)}")
    return matrix_exp(b, a)
