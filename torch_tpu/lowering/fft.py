"""Discrete Fourier transforms (torch.fft.*, stft): ATen's _fft_r2c, _fft_c2c and _fft_c2r.

Design: each transformed dim is a product with the DFT matrix, e^{-2 pi i jk/n}, as two real
matrices (cos and sin) computed in the program from iota (j*k mod n exactly in integers, the
angle and its cos/sin in float64). That reuses the runtimes' fastest kernel (the contraction)
and needs no FFT kernel in either runtime. A long transform is split once per level
(Cooley-Tukey, n = n1 * n2: transforms of length n1 and n2 and a twiddle product), so its work
per output element is O(sum of its factors) rather than O(log n); only prime lengths above
MAX_LENGTH are refused. Transforms along several dims are applied one dim at a time (they
commute).
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import call as _call
from .complex_ops import as_complex, register_complex
from .complex_value import ComplexValue
from .registry import register

aten = torch.ops.aten

# Lengths up to DIRECT_LENGTH are one DFT product; longer ones are split n = n1 * n2
# (_four_step), down to direct products again. A prime length cannot be split: one product up
# to MAX_LENGTH (its matrices have MAX_LENGTH^2 entries), an error beyond.
DIRECT_LENGTH = 128
MAX_LENGTH = 4096


def _check_length(n: int, op: str) -> None:
    if n > MAX_LENGTH:
        raise NotImplementedError(f"torch_tpu: '{op}' of prime length {n} is not implemented for the tpu device: "
                                  f"transforms are lowered as DFT products, up to length {MAX_LENGTH} for a "
                                  "length without factors")


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


def _split(n: int) -> int:
    """The factor n1 of n = n1 * n2 closest to sqrt(n) from below (1 for a prime)."""
    for n1 in range(math.isqrt(n), 1, -1):
        if n % n1 == 0:
            return n1
    return 1


def _four_step(b: GraphBuilder, z: ComplexValue, dim: int, forward: bool, n1: int) -> ComplexValue:
    """A length n = n1 * n2 transform as n2 transforms of length n1, a twiddle product and n1
    of length n2 (Cooley-Tukey's one split): O(n (n1 + n2)) work instead of O(n^2)."""
    n = z.shape[dim]
    n2 = n // n1
    perm = [d for d in range(z.rank) if d != dim] + [dim]
    lead = [z.shape[d] for d in perm[:-1]]

    def apply(fn, v: ComplexValue) -> ComplexValue:
        return ComplexValue(fn(v.re), fn(v.im))

    v = apply(lambda p: _call(b, aten.reshape.default, _call(b, aten.permute.default, p, perm), lead + [n1, n2]), z)
    v = _c2c_dim(b, v, len(lead), forward)  # along j1: [..., k1, j2]
    c, s = _dft_matrices(b, n1, n2, n, v.re.dtype)  # twiddles e^(-+2 pi i k1 j2 / n)
    if forward:
        s = _call(b, aten.neg.default, s)
    v = ComplexValue(_call(b, aten.sub.Tensor, _call(b, aten.mul.Tensor, v.re, c), _call(b, aten.mul.Tensor, v.im, s)),
                     _call(b, aten.add.Tensor, _call(b, aten.mul.Tensor, v.re, s), _call(b, aten.mul.Tensor, v.im, c)))
    v = _c2c_dim(b, v, len(lead) + 1, forward)  # along j2: [..., k1, k2]; output index k1 + n1 k2
    inverse = [perm.index(d) for d in range(z.rank)]
    return apply(lambda p: _call(b, aten.permute.default, _call(b, aten.reshape.default, _call(
        b, aten.transpose.int, p, -1, -2), lead + [n]), inverse), v)


def _c2c_dim(b: GraphBuilder, z: ComplexValue, dim: int, forward: bool) -> ComplexValue:
    n = z.shape[dim]
    n1 = _split(n) if n > DIRECT_LENGTH else 1
    if n1 > 1:
        return _four_step(b, z, dim, forward, n1)
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
    if n > DIRECT_LENGTH:  # long: the complex transform of (x, 0), cut to the half spectrum
        z = _c2c_dim(b, as_complex(b, x), last, True)
        if onesided:
            z = ComplexValue(*(_call(b, aten.slice.Tensor, p, last, 0, n // 2 + 1) for p in (z.re, z.im)))
        for d in dims[:-1]:
            z = _c2c_dim(b, z, d, True)
        return _normalize(b, z, normalization, math.prod(x.shape[d] for d in dims))
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
    m = min(z.shape[last], n // 2 + 1)
    z = ComplexValue(*(_call(b, aten.slice.Tensor, p, last, 0, m) for p in (z.re, z.im)))
    signal = math.prod([x.shape[d] for d in dims[:-1]] + [n])
    scale = 1.0 if normalization == 0 or signal == 0 else 1 / math.sqrt(signal) if normalization == 1 else 1 / signal
    if n > DIRECT_LENGTH:
        # long: the full spectrum (bins m..n-1 mirror bins n-m..1, conjugated), transformed
        # back; its real part drops the imaginary parts of bins 0 and n/2, as ATen does
        tail = ComplexValue(*(_call(b, aten.flip.default, _call(b, aten.slice.Tensor, p, last, 1, n - m + 1), [last])
                              for p in (z.re, z.im)))
        full = ComplexValue(_call(b, aten.cat.default, [z.re, tail.re], last),
                            _call(b, aten.cat.default, [z.im, _call(b, aten.neg.default, tail.im)], last))
        y = _c2c_dim(b, full, last, False).re
        return y if scale == 1.0 else _call(b, aten.mul.Tensor, y, scale)
    _check_length(n, "irfft")
    # The half spectrum stands for its Hermitian mirror: bins 1 .. ceil(n/2)-1 count twice. The
    # imaginary parts of bins 0 and n/2 meet sin(0) and sin(pi t), so they drop out, as in ATen.
    c, s = _dft_matrices(b, m, n, n, z.re.dtype)
    k = b.iota(torch.int64, (m, 1), 0)
    once = _call(b, aten.logical_or.default, _call(b, aten.eq.Scalar, k, 0), _call(b, aten.eq.Scalar, _call(b, aten.mul.Tensor, k, 2), n))
    w = _call(b, aten.where.self, once, b.full(1.0, z.re.dtype, (m, 1)), b.full(2.0, z.re.dtype, (m, 1)))
    c, s = _call(b, aten.mul.Tensor, c, w), _call(b, aten.mul.Tensor, s, w)
    y = _call(b, aten.sub.Tensor, _along(b, z.re, last, c), _along(b, z.im, last, s))
    return y if scale == 1.0 else _call(b, aten.mul.Tensor, y, scale)
