"""Value plumbing for :mod:`torch_tpu.diagnose.parity`: walking nested inputs/outputs, moving
them between devices, and comparing a tpu tensor with its CPU reference within a tolerance.

Outputs may be tensors, tuples/lists (namedtuples), mappings (dicts, Hugging Face
``ModelOutput``/``BatchEncoding``) or dataclasses; each tensor is named by its path
(``out["logits"]``, ``out[0]``), which is what the report prints.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

# Default (atol, rtol) per floating dtype. Looser than torch.testing's per-op defaults because a
# module is many ops: reassociated sums (matmul blocking, fused reductions) differ in the last
# bits and those differences add up across a layer.
_DEFAULT_TOL: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
}


def tolerance(dtype: torch.dtype, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """(atol, rtol) for a tensor of ``dtype``: the user's values, else the dtype's default."""
    real = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)
    da, dr = _DEFAULT_TOL.get(real, (0.0, 0.0))  # integer and bool results must match exactly
    return (da if atol is None else atol), (dr if rtol is None else rtol)


def leaves(obj: Any, path: str = "out") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in a nested output, with its path, in a stable order."""
    if isinstance(obj, torch.Tensor):
        return [(path, obj)]
    if isinstance(obj, Mapping):
        return [x for k, v in obj.items() for x in leaves(v, f"{path}[{k!r}]")]
    if isinstance(obj, (tuple, list)):
        return [x for i, v in enumerate(obj) for x in leaves(v, f"{path}[{i}]")]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [x for f in dataclasses.fields(obj) for x in leaves(getattr(obj, f.name), f"{path}.{f.name}")]
    return []


def map_tensors(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """``obj`` with every tensor replaced by ``fn(tensor)``; containers keep their type where
    they can be rebuilt (namedtuples, dict subclasses), other objects are kept as they are."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        items = {k: map_tensors(fn, v) for k, v in obj.items()}
        try:
            return type(obj)(items)
        except Exception:  # a mapping type that cannot be built from a dict (ModelOutput subclasses)
            return items
    if isinstance(obj, tuple):
        vals = [map_tensors(fn, v) for v in obj]
        return type(obj)(*vals) if hasattr(obj, "_fields") else tuple(vals)
    if isinstance(obj, list):
        return [map_tensors(fn, v) for v in obj]
    return obj


def snapshot(obj: Any, device: str | torch.device = "cpu", grad: bool = False) -> Any:
    """A detached copy of every tensor of ``obj`` on ``device`` (never aliasing the original).
    ``grad``: floating tensors that required grad require grad again (as leaves)."""

    def copy(t: torch.Tensor) -> torch.Tensor:
        c = t.detach().to(device, copy=True)
        if grad and t.requires_grad and (c.is_floating_point() or c.is_complex()):
            c.requires_grad_(True)
        return c

    return map_tensors(copy, obj)


@dataclasses.dataclass
class Diff:
    """How a tpu tensor differs from its CPU reference."""

    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    why: str = ""  # set when the tensors cannot be compared numerically (shape, dtype)


def compare(ref: torch.Tensor, got: torch.Tensor, atol: float | None, rtol: float | None) -> Diff:
    """Compare ``got`` (any device) with ``ref`` (CPU): NaNs must match NaNs, infinities must
    match exactly, the rest must satisfy ``|got - ref| <= atol + rtol * |ref|``."""
    got = got.detach().cpu()
    ref = ref.detach()
    if got.shape != ref.shape:
        return Diff(False, math.inf, math.inf, f"shape {list(got.shape)} != CPU {list(ref.shape)}")
    if got.dtype != ref.dtype:
        return Diff(False, math.inf, math.inf, f"dtype {got.dtype} != CPU {ref.dtype}")
    if got.numel() == 0:
        return Diff(True)
    if ref.is_complex():
        ref, got = torch.view_as_real(ref.resolve_conj()), torch.view_as_real(got.resolve_conj())
    a_tol, r_tol = tolerance(ref.dtype, atol, rtol)
    r, g = ref.to(torch.float64), got.to(torch.float64)
    nan_r, nan_g = torch.isnan(r), torch.isnan(g)
    inf_mismatch = (torch.isinf(r) | torch.isinf(g)) & (r != g) & ~nan_r & ~nan_g
    finite = torch.isfinite(r) & torch.isfinite(g)
    err = torch.where(finite, (g - r).abs(), torch.zeros_like(r))
    rel = err / r.abs().clamp_min(torch.finfo(torch.float64).tiny)
    bad = (nan_r != nan_g) | inf_mismatch | (err > a_tol + r_tol * r.abs())
    max_abs = float(err.max()) if finite.any() else 0.0
    max_rel = float(rel.max()) if finite.any() else 0.0
    if (nan_r != nan_g).any():
        return Diff(False, math.inf, math.inf, f"NaN where CPU has none ({int((nan_r != nan_g).sum())} elements)")
    if inf_mismatch.any():
        return Diff(False, math.inf, math.inf, f"infinity mismatch ({int(inf_mismatch.sum())} elements)")
    return Diff(not bool(bad.any()), max_abs, max_rel)


def compare_trees(ref: list[tuple[str, torch.Tensor]], got: list[tuple[str, torch.Tensor]],
                  atol: float | None, rtol: float | None) -> tuple[str, Diff] | None:
    """The first (path, Diff) of ``got`` that diverges from ``ref`` (matched by path), or None.
    A tensor present on one side only diverges."""
    got_by = dict(got)
    for path, r in ref:
        g = got_by.pop(path, None)
        if g is None:
            return path, Diff(False, math.inf, math.inf, "missing from the tpu result")
        d = compare(r, g, atol, rtol)
        if not d.ok:
            return path, d
    if got_by:
        path = next(iter(got_by))
        return path, Diff(False, math.inf, math.inf, "not in the CPU result")
    return None


def max_error(ref: list[tuple[str, torch.Tensor]], got: list[tuple[str, torch.Tensor]]) -> tuple[float, float]:
    """The largest absolute and relative error over the tensors both sides have."""
    got_by = dict(got)
    ma = mr = 0.0
    for path, r in ref:
        g = got_by.get(path)
        if g is not None:
            d = compare(r, g, 0.0, 0.0)
            ma, mr = max(ma, d.max_abs), max(mr, d.max_rel)
    return ma, mr
