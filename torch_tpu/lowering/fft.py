"""Discrete Fourier transforms (torch.fft.*, stft): ATen's _fft_r2c, _fft_c2c and _fft_c2r.

Design: each transformed dim is a product with the DFT matrix, e^{-2 pi i jk/n}, as two real
matrices (cos and sin) computed in the program from iota (j*k mod n exactly in integers, the
angle and its cos/sin in float64). That reuses the runtimes' fastest kernel (the contraction)
and needs no FFT kernel in either runtime; it costs O(n) per output element instead of
O(log n), so lengths are capped at MAX_LENGTH (a 2048-point transform is 4M matrix entries).
Transforms along several dims are applied one dim at a time (they commute).
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .complex_ops import _call, as_complex, register_complex
from .complex_value import ComplexValue
from .registry import register

aten = torch.ops.aten

# Longest transform lowered as a dense DFT product (its matrices have MAX_LENGTH^2 entries).
MAX_LENGTH = 2048


def _check_length(n: int, op: str) -> None:
    if n > MAX_LENGTH:
        raise NotImplementedError(f"torch_tpu: '{op}' of length {n} is not implemented for the tpu device: "
                                  f"transforms are lowered as DFT products, up to length {MAX_LENGTH}")


def _dft_matrices(b: GraphBuilder, n_in: int, n_out: int, n: int, dtype: torch.dtype) -> tuple[Value, Value]:
    """cos and sin of 2 pi jk / n for j < n_in, k < n_out, as [n_in, n_out] matrices of dtype."""
    itype = torch.int32 if n * n < 2**31 else torch.int64
    j = b.iota(itype, (n_in, n_out), 0)
    k = b.iota(itype, (n_in, n_out), 1)
    jk = _call(b, aten.remainder.Tensor, _call(b, aten.mul.Tensor, j, k), n)  # exact: no large angles
    angle = _call(b, aten.mul.Tensor, b.convert(jk, torch.float64), 2 * math.pi / n)
    return (b.convert(_call(b, aten.cos.default, angle), dtype), b.convert(_call(b, aten.sin.default, angle), dtype))


def _along(b: GraphBuilder, x: Value, dim: int, mat: Value) -> Value:
    """x contracted along dim with mat [n_in, n_out]: the result's dim has n_out entries."""
    perm = [d for d in range(x.rank) if d != dim] + [dim]
    moved = _call(b, aten.permute.default, x, perm)
    lead = list(moved.shape[:-1])
    flat = _call(b, aten.reshape.default, moved, [math.prod(lead), moved.shape[-1]])
    y = _call(b, aten.reshape.default, _call(b, aten.mm.default, flat, mat), lead + [mat.shape[1]])
    inverse = [perm.index(d) for d in range(x.rank)]
    return _call(b, aten.permute.default, y, inverse)


def _c2c_dim(b: GraphBuilder, z: ComplexValue, dim: int, forward: bool) -> ComplexValue:
    n = z.shape[dim]
    _check_length(n, "fft")
    c, s = _dft_matrices(b, n, n, n, z.re.dtype)
    rc, rs, ic, is_ = (_along(b, p, dim, m) for p, m in ((z.re, c), (z.re, s), (z.im, c), (z.im, s)))
    if forward:  # (re + i im)(cos - i sin)
        return ComplexValue(_call(b, aten.add.Tensor, rc, is_), _call(b, aten.sub.Tensor, ic, rs))
    return ComplexValue(_call(b, aten.sub.Tensor, rc, is_), _call(b, aten.add.Tensor, ic, rs))


def _normalize(b: GraphBuilder, z: ComplexValue, normalization: int, n: int) -> ComplexValue:
    # ATen's fft_norm_mode: 0 none, 1 1/sqrt(n), 2 1/n (n: the product of the signal lengths)
    if normalization == 0 or n == 0:
        return z
    k = 1 / math.sqrt(n) if normalization == 1 else 1 / n
    return ComplexValue(_call(b, aten.mul.Tensor, z.re, k), _call(b, aten.mul.Tensor, z.im, k))


def _dims(dim, rank: int) -> list[int]:
    return [d % rank for d in dim]


@register_complex(aten._fft_c2c.default)
def fft_c2c(b: GraphBuilder, x, dim, normalization: int, forward: bool) -> ComplexValue:
    z = as_complex(b, x)
    dims = _dims(dim, z.rank)
    for d in dims:
        z = _c2c_dim(b, z, d, forward)
    return _normalize(b, z, normalization, math.prod(x.shape[d] for d in dims))


@register(aten._fft_r2c.default)
@register_complex(aten._fft_r2c.default)
def fft_r2c(b: GraphBuilder, x: Value, dim, normalization: int, onesided: bool) -> ComplexValue:
    dims = _dims(dim, x.rank)
    last = dims[-1]
    n = x.shape[last]
    _check_length(n, "rfft")
    m = n // 2 + 1 if onesided else n
    c, s = _dft_matrices(b, n, m, n, x.dtype)
    # x (cos - i sin) along the last dim: a real signal needs half the products of a complex one
    z = ComplexValue(_along(b, x, last, c), _call(b, aten.neg.default, _along(b, x, last, s)))
    for d in dims[:-1]:
        z = _c2c_dim(b, z, d, True)
    return _normalize(b, z, normalization, math.prod(x.shape[d] for d in dims))


@register_complex(aten._fft_c2r.default)
def fft_c2r(b: GraphBuilder, x: ComplexValue, dim, normalization: int, last_dim_size: int) -> Value:
    dims = _dims(dim, x.rank)
    last = dims[-1]
    z = x
    for d in dims[:-1]:
        z = _c2c_dim(b, z, d, False)
    n = last_dim_size
    _check_length(n, "irfft")
    m = min(z.shape[last], n // 2 + 1)
    z = ComplexValue(*(_call(b, aten.slice.Tensor, p, last, 0, m) for p in (z.re, z.im)))
    # The half spectrum stands for its Hermitian mirror: bins 1 .. ceil(n/2)-1 count twice. The
    # imaginary parts of bins 0 and n/2 meet sin(0) and sin(pi t), so they drop out, as in ATen.
    c, s = _dft_matrices(b, m, n, n, z.re.dtype)
    k = b.iota(torch.int64, (m, 1), 0)
    once = _call(b, aten.logical_or.default, _call(b, aten.eq.Scalar, k, 0), _call(b, aten.eq.Scalar, _call(b, aten.mul.Tensor, k, 2), n))
    w = _call(b, aten.where.self, once, b.full(1.0, z.re.dtype, (m, 1)), b.full(2.0, z.re.dtype, (m, 1)))
    c, s = _call(b, aten.mul.Tensor, c, w), _call(b, aten.mul.Tensor, s, w)
    y = _call(b, aten.sub.Tensor, _along(b, z.re, last, c), _along(b, z.im, last, s))
    signal = math.prod([x.shape[d] for d in dims[:-1]] + [n])
    if normalization == 0 or signal == 0:
        return y
    return _call(b, aten.mul.Tensor, y, 1 / math.sqrt(signal) if normalization == 1 else 1 / signal)
