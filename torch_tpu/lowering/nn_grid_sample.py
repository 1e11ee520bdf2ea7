"""Grid sampling (F.grid_sample, spatial transformers): grid_sampler_2d and its backward, the
volumetric grid_sampler_3d and its backward, written in ATen ops and traced into the IR.

Design: one engine serves 2-d and 3-d. Every output point reads a fixed set of input taps per
spatial dim (nearest: 1, (bi/tri)linear: 2, bicubic: 4), so the sampler is a sum over the
static product of those taps of weight * gather(input, tap index), with out-of-range taps
masked to zero (the IR has no loops, but the tap count is known at trace time). The backward
is that gather's transpose: grad_output * weight scattered-added (scatter_add) into the
flattened input, all taps in one scatter; the grid gradient is the chain rule through the
weights (their derivative along each dim, times the other dims' weights, times grad_output .
tap value summed over channels) and through the coordinate maps (unnormalize, border clip,
reflection), whose derivatives are written next to them. The conventions are ATen's
(GridSampler.h): unnormalize per align_corners, padding applied to the coordinate before
linear/nearest interpolation but to each integer tap for bicubic (whose grid gradient then
only sees unnormalize), nearest rounds half to even and passes no gradient to the grid, and
the grid gradient is computed even when output_mask[1] is False (CPU does so too; only the
input gradient is skipped). Half types compute in their own dtype, op by op: CPU's grid sampler
kernels do (coordinates and weights rounded to the input dtype at each step), and computing in
float32 instead moves half-precision results by whole taps against CPU's.

Why decompositions in torch ops rather than IR lowerings: the same functions run on CPU
tensors, so every branch is checked directly against ATen's kernels, and the tracer lowers
the few ops used (gather, scatter_add, where, floor, fmod) through the existing table. They
are registered in EXTRA_DECOMPOSITIONS (torch._decomp has none for these ops); the 2-d
forward, which torch._decomp does decompose, is registered as a lowering that traces this
engine the same way, so half types round as on CPU (see lower_grid_sampler_2d).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import _Tracer
from .decompositions import EXTRA_DECOMPOSITIONS
from .registry import register

aten = torch.ops.aten

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_MODES = {BILINEAR: "bilinear", NEAREST: "nearest", BICUBIC: "bicubic"}
# The cubic convolution kernel's parameter, as ATen's (and OpenCV's) bicubic.
_CUBIC_A = -0.75


class _Tap(NamedTuple):
    """One input tap along one spatial dim for every output point ([N, P] each)."""
    index: torch.Tensor  # int64 in [0, size - 1] (safe to gather; 0 for taps outside)
    valid: torch.Tensor | None  # bool: the tap lies inside the input (None: not masked)
    weight: torch.Tensor | None  # interpolation weight (None: 1, nearest)
    dweight: torch.Tensor | float | None  # d weight / d source coordinate (None: 0)


# -- argument checks -----------------------------------------------------------------------------

def _check(input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int, dims: int) -> None:
    """ATen's grid_sampler checks, so tpu raises what CPU raises."""
    if input.dtype != grid.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have same dtype, but input has "
                           f"{input.dtype} and grid has {grid.dtype}")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"torch_tpu: grid_sampler_{dims}d is not implemented for dtype {input.dtype}")
    if input.dim() != dims + 2 or grid.dim() != dims + 2:
        raise RuntimeError(f"grid_sampler(): expected {dims + 2}D input and grid with same number of dimensions, but "
                           f"got input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[-1] != dims:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {dims} in last dimension, but got grid with "
                           f"sizes {list(grid.shape)}")
    for i in range(2, input.dim()):
        if input.shape[i] == 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                               f"sizes {list(input.shape)} with dimension {i} being empty")
    if interpolation_mode not in _MODES:
        raise RuntimeError(f"grid_sampler(): unknown interpolation mode {interpolation_mode}")
    if padding_mode not in (ZEROS, BORDER, REFLECTION):
        raise RuntimeError(f"grid_sampler(): unknown padding mode {padding_mode}")
    if dims == 3 and interpolation_mode == BICUBIC:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")


# -- coordinate maps and their derivatives ---------------------------------------------------------

def _unnormalize(coord: torch.Tensor, size: int, align_corners: bool) -> tuple[torch.Tensor, float]:
    """[-1, 1] -> pixel coordinates: corner pixels' centers (align_corners) or their outer edges;
    returns the map's (constant) derivative too. The evaluation order is ATen's, so rounding
    matches at tap boundaries."""
    if align_corners:
        return (coord + 1) / 2 * (size - 1), (size - 1) / 2
    return ((coord + 1) * size - 1) / 2, size / 2


def _clip(x: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Clamp into [0, size - 1]; the derivative is 1 strictly inside, 0 on and beyond the ends."""
    inside = (x > 0) & (x < size - 1)
    return x.clamp(0, size - 1), inside.to(x.dtype)


def _reflect(x: torch.Tensor, twice_low: int, twice_high: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Reflect x about low = twice_low / 2 and high = twice_high / 2 until it lies in between
    (the bounds are passed doubled so both are integers); the derivative is +-1 by the parity
    of the number of reflections and the side x started on."""
    if twice_low == twice_high:  # a single pixel with align_corners: everything maps to it
        return torch.zeros_like(x), torch.zeros_like(x)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    shifted = x - low
    one = torch.ones_like(x)
    side = torch.where(shifted < 0, -one, one)
    dist = shifted.abs()
    extra = torch.fmod(dist, span)
    even = torch.fmod(torch.floor(dist / span), 2) == 0
    out = torch.where(even, extra + low, span - extra + low)
    return out, torch.where(even, side, -side)


def _pad(x: torch.Tensor, size: int, padding_mode: int,
         align_corners: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The padding mode's map of a source coordinate and its derivative (None: identity)."""
    if padding_mode == ZEROS:
        return x, None
    grad = None
    if padding_mode == REFLECTION:
        x, grad = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
    x, clip_grad = _clip(x, size)
    return x, clip_grad if grad is None else grad * clip_grad


# -- taps -------------------------------------------------------------------------------------------

def _cubic_near(t: torch.Tensor) -> torch.Tensor:
    """Cubic convolution kernel for |distance| = t <= 1."""
    return ((_CUBIC_A + 2) * t - (_CUBIC_A + 3)) * t * t + 1


def _cubic_far(t: torch.Tensor) -> torch.Tensor:
    """Cubic convolution kernel for 1 < |distance| = t < 2."""
    return ((_CUBIC_A * t - 5 * _CUBIC_A) * t + 8 * _CUBIC_A) * t - 4 * _CUBIC_A


def _cubic_near_grad(t: torch.Tensor) -> torch.Tensor:
    return (3 * (_CUBIC_A + 2) * t - 2 * (_CUBIC_A + 3)) * t


def _cubic_far_grad(t: torch.Tensor) -> torch.Tensor:
    return (3 * _CUBIC_A * t - 10 * _CUBIC_A) * t + 8 * _CUBIC_A


def _bounded(index: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 index, in-bounds mask) of an integer-valued float coordinate. Out-of-bounds taps
    read index 0 instead (their values are masked): that keeps the gather in range (the lowering
    checks indices) and the conversion defined for inf and nan coordinates too."""
    valid = (index >= 0) & (index <= size - 1)  # false for nan
    return torch.where(valid, index, torch.zeros_like(index)).to(torch.int64), valid


def _taps(coord: torch.Tensor, size: int, mode: int, padding_mode: int, align_corners: bool,
          need_grad: bool) -> tuple[list[_Tap], torch.Tensor | float]:
    """The taps along one dim for grid coordinates `coord` [N, P], and d source / d grid."""
    x, mult = _unnormalize(coord, size, align_corners)
    if mode == BICUBIC:
        # Padding applies to each integer tap below, which moves no weight: the grid gradient
        # sees only unnormalize.
        x0 = torch.floor(x)
        t = x - x0
        dists = (t + 1, t, 1 - t, 2 - t)
        weights = [_cubic_far(dists[0]), _cubic_near(dists[1]), _cubic_near(dists[2]), _cubic_far(dists[3])]
        dweights = ([_cubic_far_grad(dists[0]), _cubic_near_grad(dists[1]), -_cubic_near_grad(dists[2]),
                     -_cubic_far_grad(dists[3])] if need_grad else [None] * 4)
        taps = []
        for k in range(4):
            pos, _ = _pad(x0 + (k - 1), size, padding_mode, align_corners)
            index, valid = _bounded(pos, size)
            taps.append(_Tap(index, valid, weights[k], dweights[k]))
        return taps, mult
    x, pad_grad = _pad(x, size, padding_mode, align_corners)
    if pad_grad is not None:
        mult = pad_grad * mult
    if mode == NEAREST:
        index, valid = _bounded(torch.round(x), size)  # round half to even, as nearbyint
        # Border and reflection keep every finite coordinate inside, so only zeros padding
        # masks; a nan coordinate then reads pixel 0, as CPU's 2-d kernel does.
        return [_Tap(index, valid if padding_mode == ZEROS else None, None, None)], mult
    x0 = torch.floor(x)
    x1 = x0 + 1
    i0, v0 = _bounded(x0, size)
    i1, v1 = _bounded(x1, size)
    minus, plus = (-1.0, 1.0) if need_grad else (None, None)
    return [_Tap(i0, v0, x1 - x, minus), _Tap(i1, v1, x - x0, plus)], mult


class _Combo(NamedTuple):
    """One tap per spatial dim: a point of the input read for every output point ([N, P])."""
    index: torch.Tensor  # linear index into the flattened spatial dims
    valid: torch.Tensor | None
    weight: torch.Tensor | None  # product of the dims' weights
    dweights: list[torch.Tensor | float | None]  # per spatial dim: d weight / d that dim's coordinate


def _mul(a: torch.Tensor | float | None, b: torch.Tensor | float | None) -> torch.Tensor | float | None:
    """Product where None stands for 1 (so nearest's unit weights cost no multiplications)."""
    if a is None:
        return b
    if b is None:
        return a
    return a * b


def _combos(input: torch.Tensor, grid: torch.Tensor, mode: int, padding_mode: int, align_corners: bool,
            need_grad: bool) -> tuple[list[_Combo], list[torch.Tensor | float]]:
    """Every tap combination of the sampling, and per spatial dim (input order) d source / d grid."""
    n, spatial = input.shape[0], list(input.shape[2:])
    dims = len(spatial)
    flat_grid = grid.reshape(n, math.prod(grid.shape[1:-1]), dims)  # sizes spelled out: n may be 0
    per_dim, mults = [], []
    for d, size in enumerate(spatial):
        # grid's last axis lists coordinates fastest dim first: x (width), y (height), z (depth)
        taps, mult = _taps(flat_grid[..., dims - 1 - d], size, mode, padding_mode, align_corners, need_grad)
        per_dim.append(taps)
        mults.append(mult)
    strides = [math.prod(spatial[d + 1:]) for d in range(dims)]
    combos = []
    for choice in itertools.product(*per_dim):
        index, valid, weight = None, None, None
        for d, tap in enumerate(choice):
            term = tap.index * strides[d] if strides[d] != 1 else tap.index
            index = term if index is None else index + term
            valid = tap.valid if valid is None else (valid if tap.valid is None else valid & tap.valid)
        for tap in reversed(choice):  # x * y * z, as ATen multiplies: half types round per product
            weight = _mul(weight, tap.weight)
        dweights = []
        for d in range(dims):
            if not need_grad or choice[d].dweight is None:
                dweights.append(None)
                continue
            others = None
            for e, tap in enumerate(choice):
                if e != d:
                    others = _mul(others, tap.weight)
            dweights.append(choice[d].dweight if others is None else others * choice[d].dweight)
        combos.append(_Combo(index, valid, weight, dweights))
    return combos, mults


def _gather(flat: torch.Tensor, combo: _Combo) -> torch.Tensor:
    """Input values [N, C, P] at the combo's taps, zero where a tap is outside the input."""
    n, c, _ = flat.shape
    index = combo.index.unsqueeze(1).expand(n, c, combo.index.shape[1])
    values = torch.gather(flat, 2, index)
    if combo.valid is not None:
        # a select, not a product with the mask: an inf or nan outside must not leak in
        values = torch.where(combo.valid.unsqueeze(1), values, torch.zeros_like(values))
    return values


# -- the ops ------------------------------------------------------------------------------------------

def _forward(input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int,
             align_corners: bool, dims: int) -> torch.Tensor:
    """Sum over the tap combinations of weight * gathered input, [N, C, *grid's spatial]."""
    _check(input, grid, interpolation_mode, padding_mode, dims)
    n, c = input.shape[:2]
    out_spatial = list(grid.shape[1:-1])
    flat = input.reshape(n, c, math.prod(input.shape[2:]))
    combos, _ = _combos(input, grid, interpolation_mode, padding_mode, align_corners, need_grad=False)
    out = None
    for combo in combos:
        term = _gather(flat, combo)
        if combo.weight is not None:
            term = term * combo.weight.unsqueeze(1)
        out = term if out is None else out + term
    return out.reshape(n, c, *out_spatial)


def _backward(grad_output: torch.Tensor, input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int,
              padding_mode: int, align_corners: bool, output_mask: list[bool],
              dims: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The sampler's vector-Jacobian product: (grad_input, skipped unless output_mask[0];
    grad_grid, always, as on CPU)."""
    _check(input, grid, interpolation_mode, padding_mode, dims)
    n, c = input.shape[:2]
    flat = input.reshape(n, c, math.prod(input.shape[2:]))
    g = grad_output.reshape(n, c, math.prod(grid.shape[1:-1]))
    want_grid = interpolation_mode != NEAREST  # nearest is piecewise constant: zero grid gradient
    combos, mults = _combos(input, grid, interpolation_mode, padding_mode, align_corners, want_grid)

    grad_input = None
    if output_mask[0]:
        # The forward's gather transposed: every tap's weighted grad_output added at its index,
        # all taps in one scatter; taps outside the input add zero at index 0.
        indices, sources = [], []
        for combo in combos:
            src = g if combo.weight is None else g * combo.weight.unsqueeze(1)
            if combo.valid is not None:
                src = torch.where(combo.valid.unsqueeze(1), src, torch.zeros_like(src))
            indices.append(combo.index.unsqueeze(1).expand(n, c, combo.index.shape[1]))
            sources.append(src)
        index = torch.cat(indices, 2) if len(indices) > 1 else indices[0]
        source = torch.cat(sources, 2) if len(sources) > 1 else sources[0]
        grad_input = torch.zeros_like(flat).scatter_add(2, index, source)
        grad_input = grad_input.reshape(input.shape)

    if not want_grid:
        return grad_input, torch.zeros_like(grid)
    per_dim = [None] * dims
    for combo in combos:
        # grad_output . tap value, summed over channels: how the loss moves with this tap's weight
        gv = (g * _gather(flat, combo)).sum(1)
        for d in range(dims):
            if combo.dweights[d] is None:
                continue
            term = gv * combo.dweights[d]
            per_dim[d] = term if per_dim[d] is None else per_dim[d] + term
    coords = []
    for d in reversed(range(dims)):  # back to the grid's x, y, z order
        coords.append(per_dim[d] * mults[d] if per_dim[d] is not None else torch.zeros_like(gv))
    grad_grid = torch.stack(coords, -1).reshape(grid.shape)
    return grad_input, grad_grid


def grid_sampler_2d_backward(grad_output: torch.Tensor, input: torch.Tensor, grid: torch.Tensor,
                             interpolation_mode: int, padding_mode: int, align_corners: bool,
                             output_mask: list[bool]) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(grad_input or None per output_mask[0], grad_grid) of grid_sampler_2d."""
    return _backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask, 2)


def grid_sampler_3d(input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> torch.Tensor:
    """Volumetric sampling: input [N, C, D, H, W], grid [N, D', H', W', 3] -> [N, C, D', H', W']."""
    return _forward(input, grid, interpolation_mode, padding_mode, align_corners, 3)


def grid_sampler_3d_backward(grad_output: torch.Tensor, input: torch.Tensor, grid: torch.Tensor,
                             interpolation_mode: int, padding_mode: int, align_corners: bool,
                             output_mask: list[bool]) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(grad_input or None per output_mask[0], grad_grid) of grid_sampler_3d."""
    return _backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask, 3)


def grid_sampler_2d(input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> torch.Tensor:
    """Image sampling: input [N, C, H, W], grid [N, H', W', 2] -> [N, C, H', W']."""
    return _forward(input, grid, interpolation_mode, padding_mode, align_corners, 2)


EXTRA_DECOMPOSITIONS[aten.grid_sampler_2d_backward.default] = grid_sampler_2d_backward
EXTRA_DECOMPOSITIONS[aten.grid_sampler_3d.default] = grid_sampler_3d
EXTRA_DECOMPOSITIONS[aten.grid_sampler_3d_backward.default] = grid_sampler_3d_backward


@register(aten.grid_sampler_2d.default)
def lower_grid_sampler_2d(b: GraphBuilder, input: Value, grid: Value, interpolation_mode: int, padding_mode: int,
                          align_corners: bool) -> Value:
    """The 2-d forward through this engine rather than torch._decomp's (which the decomposition
    lookup would prefer to EXTRA_DECOMPOSITIONS): that one computes half types differently from
    CPU's kernel (its results moved by up to 0.16 in bfloat16), this one rounds as CPU does."""
    env: dict[int, Value] = {}
    metas = []
    for v in (input, grid):
        t = torch.empty(v.shape, dtype=v.dtype, device="meta")
        env[id(t)] = v
        metas.append(t)  # kept alive, so no other tensor reuses the id during the trace
    with _Tracer(b, env):
        out = grid_sampler_2d(metas[0], metas[1], interpolation_mode, padding_mode, align_corners)
    return env[id(out)]
