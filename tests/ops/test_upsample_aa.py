"""Antialiased interpolation (`F.interpolate(..., antialias=True)`: aten._upsample_bilinear2d_aa,
_upsample_bicubic2d_aa and their backward ops) on tpu vs PyTorch CPU, strict and fused.

The OpInfo sweep has one entry (_upsample_bilinear2d_aa) with a few samples; these cover what
the lowering (torch_tpu/lowering/nn_upsample_aa.py) has to get right: down- and upsampling
(the filter support widens by the scale when downsampling), non-integer scales, explicit
scale factors (they change the window centers, not just the output size), align_corners both
ways, one unchanged dim (CPU skips its pass), channels-last input, float32/float64 values and
gradients, and uint8, whose fixed-point path must match CPU exactly, for 3 channels (CPU's AVX
kernel) and 5 (its generic kernel).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten

# Every case compiles new programs; fused mode warns about that after 64 flushes.
pytestmark = pytest.mark.filterwarnings("ignore:torch_tpu \\(fused mode\\)")

# (input H x W, interpolate keyword arguments)
CASES = [
    ((16, 13), {"size": (5, 7)}),                                    # downsampling, wide supports
    ((7, 9), {"size": (13, 20)}),                                    # upsampling
    ((32, 17), {"size": (9, 30)}),                                   # down in H, up in W
    ((12, 10), {"size": (12, 4)}),                                   # H unchanged: only the W pass
    ((20, 15), {"scale_factor": 0.37}),                              # non-integer scale, kept for the centers
    ((9, 11), {"scale_factor": (1.7, 0.45)}),
    ((15, 14), {"scale_factor": 0.4, "recompute_scale_factor": True}),
    ((6, 5), {"size": (1, 1)}),
]
MODES = ["bilinear", "bicubic"]


def _input(hw: tuple[int, int], dtype: torch.dtype, channels: int = 3, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, (2, channels, *hw), generator=gen, dtype=torch.uint8)
    return torch.rand(2, channels, *hw, generator=gen, dtype=dtype) * 4 - 2


def _case_id(case) -> str:
    hw, kw = case
    return f"{hw[0]}x{hw[1]}-" + "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("run_mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("align_corners", [False, True], ids=["ac0", "ac1"])
@pytest.mark.parametrize("mode", MODES)
def test_forward_and_grad_match_cpu(run_mode: str, dtype: torch.dtype, align_corners: bool, mode: str) -> None:
    with torch_tpu.mode(run_mode):
        for i, (hw, kw) in enumerate(CASES):
            x = _input(hw, dtype, seed=i)
            xc = x.clone().requires_grad_()
            xt = x.to("tpu").requires_grad_()
            want = F.interpolate(xc, mode=mode, antialias=True, align_corners=align_corners, **kw)
            got = F.interpolate(xt, mode=mode, antialias=True, align_corners=align_corners, **kw)
            msg = f"{mode} {hw} {kw}"
            torch.testing.assert_close(got.detach().cpu(), want.detach(), msg=lambda m: f"{msg}: {m}")
            go = _input(tuple(want.shape[2:]), dtype, seed=100 + i)
            want.backward(go)
            got.backward(go.to("tpu"))
            torch.testing.assert_close(xt.grad.cpu(), xc.grad, msg=lambda m: f"grad {msg}: {m}")


@pytest.mark.parametrize("run_mode", ["strict", "fused"])
@pytest.mark.parametrize("channels", [3, 5], ids=["c3-avx", "c5-generic"])
@pytest.mark.parametrize("align_corners", [False, True], ids=["ac0", "ac1"])
@pytest.mark.parametrize("mode", MODES)
def test_uint8_matches_cpu_exactly(run_mode: str, channels: int, align_corners: bool, mode: str) -> None:
    cases = CASES[:-1] + [((64, 48), {"size": (17, 23)}), ((10, 10), {"size": (40, 33)})]
    with torch_tpu.mode(run_mode):
        for i, (hw, kw) in enumerate(cases):  # CPU's AVX kernel fails on a 1x1 output: not compared
            x = _input(hw, torch.uint8, channels, seed=i)
            want = F.interpolate(x, mode=mode, antialias=True, align_corners=align_corners, **kw)
            got = F.interpolate(x.to("tpu"), mode=mode, antialias=True, align_corners=align_corners, **kw)
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, msg=lambda m: f"{mode} {hw} {kw}: {m}")


@pytest.mark.parametrize("mode", MODES)
def test_channels_last_input(mode: str) -> None:
    x = _input((18, 14), torch.float32, channels=4).contiguous(memory_format=torch.channels_last)
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    want = F.interpolate(xc, size=(7, 25), mode=mode, antialias=True)
    got = F.interpolate(xt, size=(7, 25), mode=mode, antialias=True)
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    go = _input((7, 25), torch.float32, channels=4, seed=1)
    want.backward(go)
    got.backward(go.to("tpu"))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    u8 = _input((18, 14), torch.uint8, channels=3).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(F.interpolate(u8.to("tpu"), size=(7, 25), mode=mode, antialias=True).cpu(),
                               F.interpolate(u8, size=(7, 25), mode=mode, antialias=True), rtol=0, atol=0)


@pytest.mark.parametrize("ops", [
    (aten._upsample_bilinear2d_aa, aten._upsample_bilinear2d_aa_backward),
    (aten._upsample_bicubic2d_aa, aten._upsample_bicubic2d_aa_backward),
], ids=["bilinear", "bicubic"])
def test_aten_overloads_with_explicit_scales(ops) -> None:
    """The .default overloads with scales that differ from in/out (they set the window centers),
    including an unchanged dim with a scale: CPU's forward skips that dim, its backward does not."""
    fwd, bwd = ops
    x = _input((11, 8), torch.float64)
    for out, scales in [([6, 13], (0.5, 1.6)), ([11, 5], (1.1, 0.6)), ([4, 4], (None, 0.47))]:
        for align_corners in (False, True):
            args = (out, align_corners, *scales)
            torch.testing.assert_close(fwd.default(x.to("tpu"), *args).cpu(), fwd.default(x, *args))
            torch.testing.assert_close(fwd.vec(x.to("tpu"), out, align_corners, None).cpu(),
                                       fwd.vec(x, out, align_corners, None))
            go = _input(tuple(out), torch.float64, seed=3)
            bargs = (out, list(x.shape), align_corners, *scales)
            torch.testing.assert_close(bwd.default(go.to("tpu"), *bargs).cpu(), bwd.default(go, *bargs))


def test_unsupported_dtypes_raise_clear_errors() -> None:
    x = torch.rand(1, 2, 8, 8)
    for dtype in (torch.float16, torch.bfloat16, torch.int32):
        with pytest.raises(NotImplementedError, match="_upsample_bilinear2d_aa: not implemented for"):
            aten._upsample_bilinear2d_aa(x.to(dtype).to("tpu"), [4, 4], False).cpu()
    with pytest.raises(NotImplementedError, match="_upsample_bicubic2d_aa_backward: not implemented for"):
        aten._upsample_bicubic2d_aa_backward(torch.rand(1, 2, 4, 4).half().to("tpu"), [4, 4], [1, 2, 8, 8],
                                             False).cpu()
    with pytest.raises(RuntimeError):  # ATen's own shape checks run before the lowering
        aten._upsample_bilinear2d_aa(torch.rand(2, 8, 8).to("tpu"), [4, 4], False).cpu()


@pytest.mark.parametrize("op", [aten._upsample_bilinear2d_aa.default, aten._upsample_bicubic2d_aa.default],
                         ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8], ids=["f32", "u8"])
def test_lowering_on_reference_interpreter(op, dtype: torch.dtype) -> None:
    """The lowering alone (no runtime): the reference evaluation of its graph matches CPU, uint8 exactly."""
    x = _input((40, 29), dtype, channels=5)
    for args in [([9, 31], False, None, None), ([13, 8], True, None, None), ([15, 11], False, 0.4, 0.35)]:
        tol = {"rtol": 0, "atol": 0} if dtype == torch.uint8 else {}
        torch.testing.assert_close(run_reference(op, x, *args), op(x, *args), **tol)


def test_torch_compile() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=(7, 9), mode="bicubic", antialias=True) * 2

    x = _input((20, 17), torch.float32)
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    got = torch.compile(f, backend="tpu")(xt)
    want = f(xc)
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
