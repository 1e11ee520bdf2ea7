"""nn.utils.weight_norm on tpu: ATen's fused weight-norm interface and its backward
(`_weight_norm_interface_backward`, decomposed in torch_tpu/lowering/decompositions.py),
gradients compared with CPU."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn


def _weight_norm_linear(dim: int, dtype: torch.dtype, device: str) -> nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # weight_norm is deprecated for parametrizations
        return nn.utils.weight_norm(nn.Linear(6, 5), dim=dim).to(device=device, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_weight_norm_gradients_match_cpu(dim: int, dtype: torch.dtype) -> None:
    cpu, tpu = _weight_norm_linear(dim, dtype, "cpu"), _weight_norm_linear(dim, dtype, "tpu")
    x = torch.randn(4, 6, dtype=dtype, generator=torch.Generator().manual_seed(1))
    cpu(x).pow(2).sum().backward()
    out = tpu(x.to("tpu"))
    out.pow(2).sum().backward()
    torch.testing.assert_close(out.cpu(), cpu(x).detach())
    for (name, p), (_, q) in zip(cpu.named_parameters(), tpu.named_parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, msg=name)


def test_weight_norm_interface_backward_is_the_op_run() -> None:
    # The fused interface is what dim 0 / last-dim weight norm calls: its backward is lowered.
    v = torch.randn(5, 6, device="tpu", requires_grad=True)
    g = torch.randn(5, 1, device="tpu", requires_grad=True)
    w, norms = torch._weight_norm_interface(v, g, 0)
    grad_v, grad_g = torch.ops.aten._weight_norm_interface_backward(torch.ones_like(w), v, g, norms, 0)
    vc, gc = v.detach().cpu().requires_grad_(), g.detach().cpu().requires_grad_()
    wc, nc = torch._weight_norm_interface(vc, gc, 0)
    want_v, want_g = torch.ops.aten._weight_norm_interface_backward(torch.ones_like(wc), vc, gc, nc, 0)
    torch.testing.assert_close(grad_v.cpu(), want_v)
    torch.testing.assert_close(grad_g.cpu(), want_g)
