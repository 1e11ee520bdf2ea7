"""Decompositions of ATen ops that PyTorch's tables lack, written in ATen ops the lowering
table lowers; ``apply.decomposition_for`` consults them first. Each is traced into the IR by
``trace_decomposition`` like PyTorch's own."""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _weight_norm_interface_backward(grad_w: torch.Tensor, saved_v: torch.Tensor, saved_g: torch.Tensor,
                                    saved_norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of w = v * (g / ||v||) (norm over every dim but `dim`; norms shaped like g),
    as ATen's weight-norm backward: grad_g = sum(grad_w * v) / norms and
    grad_v = (g / norms) * (grad_w - v * sum(grad_w * v) / norms^2), accumulated in float32
    for reduced-precision inputs."""
    dims = [d for d in range(saved_v.dim()) if d != dim % max(saved_v.dim(), 1)]
    acc = torch.promote_types(saved_v.dtype, torch.float32)
    gw, v = grad_w.to(acc), saved_v.to(acc)
    g, norms = saved_g.to(acc), saved_norms.to(acc)
    per_dim = (gw * v).sum(dims, keepdim=True) if dims else gw * v
    grad_v = (g / norms) * (gw - v * (per_dim / (norms * norms)))
    grad_g = per_dim / norms
    return grad_v.to(saved_v.dtype), grad_g.to(saved_g.dtype)


EXTRA_DECOMPOSITIONS = {aten._weight_norm_interface_backward.default: _weight_norm_interface_backward}
