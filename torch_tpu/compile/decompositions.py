"""Decompositions AOTAutograd applies while tracing for the "tpu" backend.

PyTorch's core ATen decompositions cover the ops the lowering table has no lowering for; the
few ops below have neither (eager mode runs them as C++ kernels or composites of lowered ops),
so they are written here in terms of ops the table lowers.
"""

from __future__ import annotations

import functools

import torch

from ..lowering.registry import lookup

aten = torch.ops.aten


def _cholesky(a: torch.Tensor, upper: bool = False) -> torch.Tensor:
    """torch.cholesky as eager ATen runs it: the factor, then the error check (which AOTAutograd
    orders with an effect token; the compiled graph checks it after the run)."""
    factor, info = aten.linalg_cholesky_ex.default(a, upper=upper, check_errors=False)
    aten._linalg_check_errors.default(info, "cholesky", is_matrix=a.dim() == 2)
    return factor


def _cholesky_solve(rhs: torch.Tensor, factor: torch.Tensor, upper: bool = False) -> torch.Tensor:
    """torch.cholesky_solve: both operands broadcast over their batch dimensions, then the two
    triangular solves (_cholesky_solve_helper, which the table lowers)."""
    batch = torch.broadcast_shapes(rhs.shape[:-2], factor.shape[:-2])
    rhs = rhs.expand(*batch, *rhs.shape[-2:])
    factor = factor.expand(*batch, *factor.shape[-2:])
    return aten._cholesky_solve_helper.default(rhs, factor, upper)


def _trilinear(i1: torch.Tensor, i2: torch.Tensor, i3: torch.Tensor, expand1: list[int], expand2: list[int],
               expand3: list[int], sumdim: list[int], unroll_dim: int = 1) -> torch.Tensor:
    """aten._trilinear (nn.functional.bilinear): each operand unsqueezed at its expand dims, the
    three multiplied and summed over sumdim (eager ATen runs its CompositeExplicit kernel, which
    pairs the products; unroll_dim only chooses a loop order there)."""
    def expanded(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
        for d in sorted(dims):
            x = x.unsqueeze(d)
        return x

    prod = expanded(i1, expand1) * expanded(i2, expand2) * expanded(i3, expand3)
    return prod.sum(sumdim) if sumdim else prod


_OURS = {aten.cholesky.default: _cholesky, aten.cholesky_solve.default: _cholesky_solve,
         aten._trilinear.default: _trilinear}


@functools.cache
def decompositions() -> dict:
    """Core ATen decompositions of the ops the lowering table has no lowering for, and ours.

    Ops with a lowering stay whole (one lowering is usually tighter than its decomposition:
    layer norm, softmax, their backwards); the rest are decomposed while AOTAutograd traces.
    """
    from torch._decomp import core_aten_decompositions

    table = {op: fn for op, fn in core_aten_decompositions().items()
             if isinstance(op, torch._ops.OpOverload) and lookup(op) is None}
    table.update({op: fn for op, fn in _OURS.items() if lookup(op) is None})
    return table
