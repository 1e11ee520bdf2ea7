"""`F.rms_norm` on tpu runs as one program (`aten._fused_rms_norm`, csrc/aten/rms_norm.cpp)
instead of the 7 of its composite; forward and backward against CPU, in strict and fused mode,
with and without autograd (vLLM runs under inference mode)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

DEV = "tpu"
MODES = ("strict", "fused")
fused_available = pytest.mark.skipif(not hasattr(torch.ops.aten, "_fused_rms_norm"),
                                     reason="this torch has no aten._fused_rms_norm")


def _tol(dtype: torch.dtype) -> dict:
    return {"rtol": 1.6e-2, "atol": 1e-5} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("weight", [True, False])
@pytest.mark.parametrize("eps", [None, 1e-5])
def test_forward_and_backward_match_cpu(mode: str, dtype: torch.dtype, weight: bool, eps: float | None) -> None:
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 5, 48, generator=g) * 0.05).to(dtype).requires_grad_()  # small: eps matters
    w = torch.randn(48, generator=g).to(dtype).requires_grad_() if weight else None
    go = torch.randn(3, 5, 48, generator=g).to(dtype)
    y = F.rms_norm(x, (48,), w, eps)
    y.backward(go)
    with torch_tpu.mode(mode):
        dx = x.detach().to(DEV).requires_grad_()
        dw = w.detach().to(DEV).requires_grad_() if weight else None
        dy = F.rms_norm(dx, (48,), dw, eps)
        dy.backward(go.to(DEV))
        torch.testing.assert_close(dy.cpu(), y.detach(), **_tol(dtype))
        torch.testing.assert_close(dx.grad.cpu(), x.grad, **_tol(dtype))
        if weight:
            torch.testing.assert_close(dw.grad.cpu(), w.grad, **_tol(dtype))


@pytest.mark.parametrize("mode", MODES)
def test_two_normalized_dims_and_inference_mode(mode: str) -> None:
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 6, 8, generator=g), torch.randn(6, 8, generator=g)
    want = F.rms_norm(x, (6, 8), w, 1e-6)
    with torch_tpu.mode(mode), torch.inference_mode():
        got = F.rms_norm(x.to(DEV), (6, 8), w.to(DEV), 1e-6)
        torch.testing.assert_close(got.cpu(), want)


@fused_available
@pytest.mark.parametrize("grad", [False, True])
def test_one_program_per_call(grad: bool) -> None:
    x = torch.randn(32, 64, device=DEV, requires_grad=grad)
    w = torch.randn(64, device=DEV, requires_grad=grad)
    ctx = torch.enable_grad() if grad else torch.inference_mode()
    with torch_tpu.mode("strict"), ctx:
        F.rms_norm(x, (64,), w, 1e-6)  # compiled here
        torch.tpu.synchronize()
        m0 = torch_tpu.metrics()
        y = F.rms_norm(x, (64,), w, 1e-6)
        torch.tpu.synchronize()
        m1 = torch_tpu.metrics()
    assert m1["programs_executed"] - m0["programs_executed"] == 1  # was 7: pow, mean, add, ...
    if grad:
        assert y.grad_fn is not None and "FusedRmsNorm" in type(y.grad_fn).__name__
