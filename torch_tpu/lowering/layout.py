"""Which program inputs are contiguous, for the few lowerings whose results depend on it.

Programs are keyed by shapes, not strides, so a lowering normally cannot see a layout. ATen's
det and slogdet factorize A^T when A is contiguous (a copy saved) and their backward reads
that factorization, so to match it their programs are keyed on contiguity too (C++
OpInfo::keys_contiguity) and the bridge marks contiguous inputs here while the op is lowered
(compiled graphs mark them from the traced strides).
"""

from __future__ import annotations

_contiguous: set[int] = set()


def reset() -> None:
    """Forgets the marks of the previous lowering."""
    _contiguous.clear()


def mark_contiguous(v: object) -> None:
    _contiguous.add(id(v))


def is_contiguous(v: object) -> bool:
    """Whether v is an input marked contiguous (False when unknown)."""
    return id(v) in _contiguous
