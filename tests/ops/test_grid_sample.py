"""Grid sampling on "tpu" (torch_tpu/lowering/nn_grid_sample.py) against CPU, beyond OpInfo's
samples: every interpolation x padding x align_corners combination in 2-d and 3-d, grid points
well outside [-1, 1] and single-pixel dims (where reflection and clipping degenerate), the
input and grid gradients (through autograd and the backward ops with each output_mask),
half types (CPU rounds op by op; so must we), a spatial-transformer training step, empty
shapes, and the errors CPU raises.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

DEV = "tpu"
aten = torch.ops.aten

_COMBOS_2D = list(itertools.product(("bilinear", "nearest", "bicubic"), ("zeros", "border", "reflection"),
                                    (False, True)))
_COMBOS_3D = list(itertools.product(("bilinear", "nearest"), ("zeros", "border", "reflection"), (False, True)))
_MODE_IDS = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PAD_IDS = {"zeros": 0, "border": 1, "reflection": 2}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _case(dims: int, dtype: torch.dtype = torch.float32, spatial: list[int] | None = None,
          seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, grid) with grid points reaching 1.7 beyond the [-1, 1] square on every side, plus
    the exact corners and center (tap boundaries and the reflection/clip edges)."""
    spatial = spatial or ([5, 7] if dims == 2 else [3, 4, 5])
    x = torch.randn(2, 3, *spatial, generator=_gen(seed), dtype=torch.float64)
    out = [4, 3] if dims == 2 else [3, 2, 4]
    g = torch.rand(2, *out, dims, generator=_gen(seed + 1), dtype=torch.float64) * 5.4 - 2.7
    flat = g.view(2, -1, dims)
    flat[0, 0], flat[0, 1], flat[1, 0] = -1.0, 1.0, 0.0
    return x.to(dtype), g.to(dtype)


def _sample_both(x: torch.Tensor, g: torch.Tensor, mode: str, pad: str, ac: bool, run_mode: str):
    """Forward and input/grid gradients of a weighted sum on CPU and on tpu (moved to CPU)."""
    w = torch.randn(F.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=ac).shape,
                    generator=_gen(7), dtype=x.dtype)
    results = []
    for dev in ("cpu", DEV):
        xd, gd = (t.detach().to(dev, copy=True).requires_grad_() for t in (x, g))
        with torch_tpu.mode(run_mode if dev == DEV else "strict"):
            y = F.grid_sample(xd, gd, mode=mode, padding_mode=pad, align_corners=ac)
            (y * w.to(dev)).sum().backward()
        results.append((y.detach().cpu(), xd.grad.cpu(), gd.grad.cpu()))
    return results


@pytest.mark.parametrize("run_mode", ["strict", "fused"])
@pytest.mark.parametrize("dims,mode,pad,ac", [(2, *c) for c in _COMBOS_2D] + [(3, *c) for c in _COMBOS_3D])
def test_forward_and_gradients_match_cpu(dims: int, mode: str, pad: str, ac: bool, run_mode: str) -> None:
    x, g = _case(dims)
    (y, gx, gg), (ty, tgx, tgg) = _sample_both(x, g, mode, pad, ac, run_mode)
    torch.testing.assert_close(ty, y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tgx, gx, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tgg, gg, rtol=1e-4, atol=1e-4)  # bicubic's grid gradient sums 16 taps


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("ac", [False, True])
def test_single_pixel_dims_float64(dims: int, pad: str, ac: bool) -> None:
    """Size-1 dims: align_corners' unnormalize scale is 0 and reflection collapses to the pixel."""
    x, g = _case(dims, torch.float64, spatial=[1, 4] if dims == 2 else [1, 3, 1])
    for mode in ("bilinear", "nearest") + (("bicubic",) if dims == 2 else ()):
        (y, gx, gg), (ty, tgx, tgg) = _sample_both(x, g, mode, pad, ac, "strict")
        torch.testing.assert_close(ty, y, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(tgx, gx, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(tgg, gg, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("mask", [[True, True], [False, True], [True, False], [False, False]])
def test_backward_ops_honor_output_mask(dims: int, mask: list[bool]) -> None:
    """The input gradient is undefined where output_mask[0] is False; the grid gradient is
    always computed, as CPU computes it."""
    x, g = _case(dims, torch.float64)
    op = aten.grid_sampler_2d_backward if dims == 2 else aten.grid_sampler_3d_backward
    fwd = aten.grid_sampler_2d if dims == 2 else aten.grid_sampler_3d
    go = torch.randn(fwd(x, g, 0, 2, False).shape, generator=_gen(3), dtype=torch.float64)
    gx, gg = op(go, x, g, 0, 2, False, mask)
    tgx, tgg = op(go.to(DEV), x.to(DEV), g.to(DEV), 0, 2, False, mask)
    assert (tgx is None) == (gx is None) == (not mask[0])
    if mask[0]:
        torch.testing.assert_close(tgx.cpu(), gx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(tgg.cpu(), gg, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dims", [2, 3])
def test_half_types_round_like_cpu(dtype: torch.dtype, dims: int) -> None:
    """CPU's kernels keep coordinates and weights in the input dtype, so float32 math would move
    a bfloat16 result by whole taps; the bilinear forward matches CPU's rounding step for step."""
    x, g = _case(dims, dtype)
    for pad, ac in itertools.product(("zeros", "border", "reflection"), (False, True)):
        y = F.grid_sample(x, g, mode="bilinear", padding_mode=pad, align_corners=ac)
        ty = F.grid_sample(x.to(DEV), g.to(DEV), mode="bilinear", padding_mode=pad, align_corners=ac).cpu()
        assert ty.dtype == dtype
        torch.testing.assert_close(ty, y, rtol=0, atol=0)


@pytest.mark.parametrize("run_mode", ["strict", "fused"])
@pytest.mark.parametrize("dims", [2, 3])
def test_spatial_transformer_training_step_matches_cpu(dims: int, run_mode: str) -> None:
    """affine_grid + grid_sample + a loss, backward, one SGD step on the affine parameters and a
    conv in front: the gradients and updated parameters equal CPU's."""
    n, c = 2, 3
    spatial = [6, 8] if dims == 2 else [4, 5, 6]
    conv_cls = torch.nn.Conv2d if dims == 2 else torch.nn.Conv3d
    torch.manual_seed(0)
    conv = conv_cls(c, c, 3, padding=1).double()
    theta0 = (torch.eye(dims, dims + 1, dtype=torch.float64) + 0.1 * torch.randn(dims, dims + 1, generator=_gen(5),
                                                                                 dtype=torch.float64))
    x = torch.randn(n, c, *spatial, generator=_gen(6), dtype=torch.float64)
    target = torch.randn(n, c, *spatial, generator=_gen(7), dtype=torch.float64)
    results = []
    for dev in ("cpu", DEV):
        m = conv_cls(c, c, 3, padding=1).double().to(dev)
        m.load_state_dict(conv.state_dict())
        theta = theta0.clone().to(dev).requires_grad_()
        opt = torch.optim.SGD([theta, *m.parameters()], lr=0.1)
        with torch_tpu.mode(run_mode if dev == DEV else "strict"):
            grid = F.affine_grid(theta.unsqueeze(0).expand(n, dims, dims + 1), [n, c, *spatial], align_corners=False)
            y = F.grid_sample(m(x.to(dev)), grid, mode="bilinear", padding_mode="border", align_corners=False)
            loss = F.mse_loss(y, target.to(dev))
            opt.zero_grad()
            loss.backward()
            grads = [theta.grad.cpu(), m.weight.grad.cpu()]
            opt.step()
        results.append((loss.detach().cpu(), grads, theta.detach().cpu(), m.weight.detach().cpu()))
    (loss, grads, theta, weight), (tloss, tgrads, ttheta, tweight) = results
    torch.testing.assert_close(tloss, loss, rtol=1e-10, atol=1e-12)
    for tg, cg in zip(tgrads, grads):
        torch.testing.assert_close(tg, cg, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(ttheta, theta, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(tweight, weight, rtol=1e-10, atol=1e-12)


def test_empty_shapes_match_cpu() -> None:
    x, g = torch.randn(0, 2, 3, 3), torch.zeros(0, 4, 1, 2)
    assert F.grid_sample(x.to(DEV), g.to(DEV), align_corners=False).shape == (0, 2, 4, 1)
    x3, g3 = torch.randn(1, 2, 2, 2, 2), torch.zeros(1, 0, 3, 1, 3)
    assert F.grid_sample(x3.to(DEV), g3.to(DEV), align_corners=True).shape == (1, 2, 0, 3, 1)
    go, xc, gc = torch.ones(1, 0, 3, 1), torch.ones(1, 0, 2, 2), torch.rand(1, 3, 1, 2)
    gx, gg = aten.grid_sampler_2d_backward(go.to(DEV), xc.to(DEV), gc.to(DEV), 0, 0, False, [True, True])
    assert gx.shape == (1, 0, 2, 2)
    torch.testing.assert_close(gg.cpu(), torch.zeros(1, 3, 1, 2))


@pytest.mark.parametrize("call,match", [
    (lambda d: F.grid_sample(torch.randn(1, 1, 2, 2, 2, device=d), torch.zeros(1, 1, 1, 1, 3, device=d),
                             mode="bicubic", align_corners=False), "bicubic interpolation only supports 4D input"),
    (lambda d: aten.grid_sampler_3d_backward(torch.ones(1, 1, 1, 1, 1, device=d), torch.ones(1, 1, 2, 2, 2, device=d),
                                             torch.zeros(1, 1, 1, 1, 3, device=d), 2, 0, False, [True, True]),
     "bicubic interpolation only supports 4D input"),
    (lambda d: aten.grid_sampler_3d(torch.ones(1, 1, 2, 2, 2, device=d), torch.zeros(1, 1, 1, 1, 2, device=d),
                                    0, 0, False), "expected grid to have size 3 in last dimension"),
    (lambda d: aten.grid_sampler_2d(torch.ones(2, 1, 2, 2, device=d), torch.zeros(1, 1, 1, 2, device=d), 0, 0, False),
     "same batch size"),
    (lambda d: aten.grid_sampler_2d(torch.ones(1, 1, 0, 2, device=d), torch.zeros(1, 1, 1, 2, device=d), 0, 0, False),
     "non-empty spatial dimensions"),
])
def test_invalid_arguments_raise_like_cpu(call, match: str) -> None:
    with pytest.raises(RuntimeError, match=match):
        call("cpu")
    with pytest.raises(RuntimeError, match=match):
        call(DEV)


def test_unsupported_inputs_raise_clearly() -> None:
    """Integer inputs (CPU has no kernel either), mixed dtypes and unknown modes (CPU reads
    garbage for the last) are refused with a message naming the problem."""
    with pytest.raises(NotImplementedError, match="grid_sampler_3d is not implemented for dtype torch.int64"):
        aten.grid_sampler_3d(torch.ones(1, 1, 2, 2, 2, dtype=torch.int64, device=DEV),
                             torch.zeros(1, 1, 1, 1, 3, dtype=torch.int64, device=DEV), 0, 0, False)
    with pytest.raises(RuntimeError, match="expected input and grid to have same dtype"):
        aten.grid_sampler_3d(torch.ones(1, 1, 2, 2, 2, device=DEV),
                             torch.zeros(1, 1, 1, 1, 3, dtype=torch.float64, device=DEV), 0, 0, False)
    with pytest.raises(RuntimeError, match="unknown interpolation mode 5"):
        aten.grid_sampler_2d(torch.ones(1, 1, 2, 2, device=DEV), torch.zeros(1, 1, 1, 2, device=DEV), 5, 0, False)
    with pytest.raises(RuntimeError, match="unknown padding mode 3"):
        aten.grid_sampler_2d_backward(torch.ones(1, 1, 1, 1, device=DEV), torch.ones(1, 1, 2, 2, device=DEV),
                                      torch.zeros(1, 1, 1, 2, device=DEV), 0, 3, False, [True, True])


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
def test_non_finite_grid_points_stay_local(mode: str, pad: str) -> None:
    """nan, +-inf and huge coordinates neither fail the gather's index check nor disturb other
    points. With zeros padding the results are CPU's; with border/reflection CPU's 2-d and 3-d
    kernels disagree with each other on such points, so only the finite points are compared."""
    x = torch.randn(1, 2, 3, 4, generator=_gen(0))
    bad = [[float("nan"), 0.2], [float("inf"), 0.1], [-float("inf"), 0.3], [1e30, -1e30]]
    g = torch.tensor([[bad + [[0.5, 0.5], [-0.3, 0.9]]]])
    y = F.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=False)
    ty = F.grid_sample(x.to(DEV), g.to(DEV), mode=mode, padding_mode=pad, align_corners=False).cpu()
    if pad == "zeros":
        torch.testing.assert_close(ty, y, equal_nan=True)
    torch.testing.assert_close(ty[..., len(bad):], y[..., len(bad):])
    gx, gg = aten.grid_sampler_2d_backward(torch.ones_like(ty).to(DEV), x.to(DEV), g.to(DEV), _MODE_IDS[mode],
                                           _PAD_IDS[pad], False, [True, True])
    # (CPU's backward kernels crash on such grids: the reference takes the finite points only)
    finite = g[..., len(bad):, :].contiguous()
    _, rgg = aten.grid_sampler_2d_backward(torch.ones_like(y[..., len(bad):]), x, finite, _MODE_IDS[mode],
                                           _PAD_IDS[pad], False, [True, True])
    torch.testing.assert_close(gg.cpu()[..., len(bad):, :], rgg)
    assert gx.shape == x.shape


@pytest.mark.parametrize("dims", [2, 3])
def test_spatial_transformer_under_torch_compile(dims: int) -> None:
    """torch.compile(backend="tpu") graphs hold the same ops (forward and AOTAutograd backward)."""
    torch._dynamo.reset()  # a rank change would otherwise recompile with dynamic sizes

    def loss_fn(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        y = F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        return y.square().mean()

    x = torch.randn(2, 3, *([6, 7] if dims == 2 else [4, 5, 6]), generator=_gen(0))
    theta = (torch.eye(dims, dims + 1) + 0.1 * torch.randn(dims, dims + 1, generator=_gen(1))).expand(2, -1, -1)
    xc, tc = x.clone().requires_grad_(), theta.clone().requires_grad_()
    loss_fn(xc, tc).backward()
    xt, tt = x.to(DEV).requires_grad_(), theta.contiguous().to(DEV).requires_grad_()
    torch.compile(loss_fn, backend="tpu", fullgraph=True)(xt, tt).backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tt.grad.cpu(), tc.grad, rtol=1e-5, atol=1e-6)
