"""_foreach_*, fused optimizer and AMP lowerings against PyTorch CPU (including whole
torch.optim steps through ReferenceMode)."""

from __future__ import annotations

import math

import pytest
import torch

import torch_tpu.lowering  # noqa: F401  (registers the lowering table)
from torch_tpu.lowering.testing import ReferenceMode, run_reference

aten = torch.ops.aten


def close(got, expected, **kw) -> None:
    torch.testing.assert_close(got, expected, equal_nan=True, **kw)


def tensors(dtype: torch.dtype, seed: int, positive: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(3, 4), (17,), ()]
    if dtype.is_floating_point:
        out = [torch.randn(s, generator=g).to(dtype) for s in shapes]
        return [t.abs() + 0.1 for t in out] if positive else out
    out = [torch.randint(-6, 6, s, generator=g).to(dtype) for s in shapes]
    return [torch.where(t == 0, torch.ones_like(t), t.abs()) if positive else t for t in out]


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32]


def _cases(dt: torch.dtype):
    xs, ys, zs = tensors(dt, 0), tensors(dt, 1), tensors(dt, 2, positive=True)
    fl = dt.is_floating_point
    s = 0.5 if fl else 2
    return [
        (aten._foreach_add.Scalar, (xs, 2.5)), (aten._foreach_add.List, (xs, ys), {"alpha": 2}),
        (aten._foreach_add.ScalarList, (xs, [1.0, 2, -3])), (aten._foreach_add.Tensor, (xs, torch.tensor(3.0))),
        (aten._foreach_sub.Scalar, (xs, 2)), (aten._foreach_sub.List, (xs, ys)),
        (aten._foreach_sub.ScalarList, (xs, [1, 2.5, 3])),
        (aten._foreach_mul.Scalar, (xs, s)), (aten._foreach_mul.List, (xs, ys)),
        (aten._foreach_mul.ScalarList, (xs, [2, 0.5, -1])), (aten._foreach_mul.Tensor, (xs, torch.tensor(0.5))),
        (aten._foreach_div.Scalar, (xs, 4)), (aten._foreach_div.List, (xs, zs)),
        (aten._foreach_div.ScalarList, (xs, [2, 4, 0.5])), (aten._foreach_div.Tensor, (xs, torch.tensor(2.0))),
        (aten._foreach_addcmul.Scalar, (xs, ys, zs), {"value": s}),
        (aten._foreach_addcmul.ScalarList, (xs, ys, zs, [1, 2, 3])),
        (aten._foreach_addcmul.Tensor, (xs, ys, zs, torch.tensor([1.0, 2.0, 0.5]))),
        (aten._foreach_addcdiv.Scalar, (xs, ys, zs), {"value": s}),
        (aten._foreach_addcdiv.ScalarList, (xs, ys, zs, [0.5, 2, 3])),
        (aten._foreach_addcdiv.Tensor, (xs, ys, zs, torch.tensor([1.0, 2.0, 0.5]))),
        (aten._foreach_lerp.Scalar, (xs, ys, 0.3)), (aten._foreach_lerp.Scalar, (xs, ys, 0.7)),
        (aten._foreach_lerp.List, (xs, ys, zs)), (aten._foreach_lerp.ScalarList, (xs, ys, [0.1, 0.6, 1.5])),
        (aten._foreach_sqrt.default, (zs,)), (aten._foreach_neg.default, (xs,)), (aten._foreach_exp.default, (xs,)),
        (aten._foreach_abs.default, (xs,)), (aten._foreach_sign.default, (xs,)),
        (aten._foreach_reciprocal.default, (zs,)), (aten._foreach_log.default, (zs,)),
        (aten._foreach_maximum.List, (xs, ys)), (aten._foreach_minimum.List, (xs, ys)),
        (aten._foreach_maximum.Scalar, (xs, 1)), (aten._foreach_minimum.ScalarList, (xs, [0, 1, -1])),
        (aten._foreach_clamp_min.Scalar, (xs, 0)), (aten._foreach_clamp_max.List, (xs, ys)),
        (aten._foreach_clamp_max.ScalarList, (xs, [0, 1, 2])),
        (aten._foreach_pow.Scalar, (zs, 2)), (aten._foreach_pow.List, (zs, [y.abs() for y in ys])),
        (aten._foreach_pow.ScalarList, (zs, [2, 3, 0.5])), (aten._foreach_pow.ScalarAndTensor, (2.0, xs)),
        (aten._foreach_zero.default, (xs,)), (aten._foreach_copy.default, (xs, [y.double() for y in ys])),
        (aten._foreach_max.default, (xs,)),
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_foreach_ops(dtype: torch.dtype) -> None:
    for case in _cases(dtype):
        op, args = case[0], case[1]
        kwargs = case[2] if len(case) > 2 else {}
        try:
            expected = op(*args, **kwargs)
        except Exception:
            with pytest.raises(Exception):
                run_reference(op, *args, **kwargs)
            continue
        close(run_reference(op, *args, **kwargs), expected, msg=lambda m: f"{op}: {m}")


@pytest.mark.parametrize("ord", [2, 1, 0, 3.0, math.inf, -math.inf], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_foreach_norm(dtype: torch.dtype, ord) -> None:
    xs = tensors(dtype, 3)
    close(run_reference(aten._foreach_norm.Scalar, xs, ord), torch._foreach_norm(xs, ord))
    close(run_reference(aten._foreach_norm.Scalar, xs, ord, torch.float64),
          torch._foreach_norm(xs, ord, dtype=torch.float64))


def test_foreach_inplace_variants() -> None:
    xs, ys = tensors(torch.float32, 4), tensors(torch.float32, 5)
    a = [x.clone() for x in xs]
    run_reference(aten._foreach_add_.List, a, ys, alpha=2)
    close(a, [x + 2 * y for x, y in zip(xs, ys)])
    a = [x.clone() for x in xs]
    run_reference(aten._foreach_mul_.Scalar, a, 3.0)
    close(a, [x * 3 for x in xs])
    a = [x.clone() for x in xs]
    run_reference(aten._foreach_zero_.default, a)
    close(a, [torch.zeros_like(x) for x in xs])
    a = [x.clone() for x in xs]
    run_reference(aten._foreach_copy_.default, a, ys)
    close(a, ys)
    i = [torch.arange(3)]
    with pytest.raises(RuntimeError):  # float result into an integer tensor
        run_reference(aten._foreach_div_.Scalar, i, 2)


# -- fused optimizers -----------------------------------------------------------------------

def _adam_state(dtype: torch.dtype, amsgrad: bool) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    shapes = [(3, 4), (33,), ()]
    p = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    gr = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    m = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    v = [torch.rand(s, generator=g).to(dtype) for s in shapes]
    mx = [torch.rand(s, generator=g).to(dtype) for s in shapes] if amsgrad else []
    steps = [torch.tensor(float(k + 1)) for k in range(len(shapes))]
    return [p, gr, m, v, mx, steps]


@pytest.mark.parametrize("scaler", ["none", "ok", "inf"])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["_fused_adam_", "_fused_adamw_"])
def test_fused_adam(name: str, dtype: torch.dtype, amsgrad: bool, maximize: bool, scaler: str) -> None:
    for lr in (1e-2, torch.tensor(1e-2)):
        packet = getattr(aten, name)
        op = packet.tensor_lr if isinstance(lr, torch.Tensor) else packet.default
        expected = _adam_state(dtype, amsgrad)
        got = [[t.clone() for t in lst] for lst in expected]
        gs = None if scaler == "none" else torch.tensor(4.0)
        fi = None if scaler == "none" else torch.tensor(1.0 if scaler == "inf" else 0.0)
        kw = dict(lr=lr, beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8, amsgrad=amsgrad, maximize=maximize,
                  grad_scale=gs, found_inf=fi)
        op(*expected, **kw)
        run_reference(op, *got, **kw)
        for e, g in zip(expected, got):
            close(g, e)


def _sgd_reference(p, g, buf, wd, mom, lr, damp, nesterov, maximize, first, gs):
    """PyTorch's fused SGD math in float64 (CPU's bfloat16 vectorized kernel is wrong, see below)."""
    p, g = p.double(), g.double()
    if gs is not None:
        g = g / float(gs)
    new_grad = g
    if maximize:
        g = -g
    if wd != 0:
        g = g + p * wd
    if buf is not None:
        buf = g if first else buf.double() * mom + g * (1 - damp)
        g = g + buf * mom if nesterov else buf
    return p - g * lr, new_grad, buf


@pytest.mark.parametrize("scaler", ["none", "ok", "inf"])
@pytest.mark.parametrize("first", [False, True])
@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_fused_sgd(dtype: torch.dtype, momentum: float, nesterov: bool, first: bool, scaler: str) -> None:
    state = _adam_state(dtype, False)
    p, gr, bufs = state[0], state[1], (state[2] if momentum else [])
    gs = None if scaler == "none" else torch.tensor(4.0)
    fi = None if scaler == "none" else torch.tensor(1.0 if scaler == "inf" else 0.0)
    kw = dict(weight_decay=0.1, momentum=momentum, lr=0.1, dampening=0.2, nesterov=nesterov, maximize=True,
              is_first_step=first, grad_scale=gs, found_inf=fi)
    got = [[t.clone() for t in lst] for lst in (p, gr, bufs)]
    run_reference(aten._fused_sgd_.default, *got, **kw)
    if dtype in (torch.bfloat16, torch.float16):
        # torch's CPU _fused_sgd_ scrambles half-type tensors longer than one vector (torch
        # 2.13), so half types are checked against the kernel's math done in float64.
        for i in range(len(p)):
            if scaler == "inf":
                exp = (p[i], gr[i], bufs[i] if bufs else None)
            else:
                exp = _sgd_reference(p[i], gr[i], bufs[i] if bufs else None, 0.1, momentum, 0.1, 0.2, nesterov,
                                     True, first, gs)
            close(got[0][i], exp[0].to(dtype))
            close(got[1][i], exp[1].to(dtype))
            if bufs:
                close(got[2][i], exp[2].to(dtype))
        return
    expected = [[t.clone() for t in lst] for lst in (p, gr, bufs)]
    aten._fused_sgd_(*expected, **kw)
    for e, g in zip(expected, got):
        close(g, e)


# -- AMP ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [None, math.inf, math.nan])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_amp_unscale(dtype: torch.dtype, bad) -> None:
    grads = tensors(dtype, 8)
    if bad is not None:
        grads[1][5] = bad
    got = [t.clone() for t in grads]
    f_exp, f_got = torch.zeros(()), torch.zeros(())
    torch._amp_foreach_non_finite_check_and_unscale_(grads, f_exp, torch.tensor(0.25))
    run_reference(aten._amp_foreach_non_finite_check_and_unscale_.default, got, f_got, torch.tensor(0.25))
    close(got, grads)
    close(f_got, f_exp)


@pytest.mark.parametrize("scale", [65536.0, 3e38])
@pytest.mark.parametrize("tracker", [0, 1, 2])
@pytest.mark.parametrize("found", [0.0, 1.0])
def test_amp_update_scale(found: float, tracker: int, scale: float) -> None:
    s_exp, t_exp = torch.tensor(scale), torch.tensor(tracker, dtype=torch.int32)
    s_got, t_got = s_exp.clone(), t_exp.clone()
    torch._amp_update_scale_(s_exp, t_exp, torch.tensor(found), 2.0, 0.5, 3)
    run_reference(aten._amp_update_scale_.default, s_got, t_got, torch.tensor(found), 2.0, 0.5, 3)
    close(s_got, s_exp)
    close(t_got, t_exp)


# -- whole optimizer steps through ReferenceMode ---------------------------------------------

class AtenReferenceMode(ReferenceMode):
    """ReferenceMode for ATen ops only: Optimizer.step's profiler ops (profiler::record_function)
    never reach a backend's kernels, so they run natively here too."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace != "aten":
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


def _train(make_opt, init: list[torch.Tensor], steps: int = 3, clip: bool = False) -> list[torch.Tensor]:
    params = [torch.nn.Parameter(t.clone()) for t in init]
    opt = make_opt(params)
    for k in range(steps):
        for i, p in enumerate(params):
            p.grad = torch.sin(torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) * (k + 1) + i)
        if clip:
            torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
        opt.step()
    return [p.detach().clone() for p in params]


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, amsgrad=True, fused=True),
    lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=True, maximize=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True),
], ids=["adam-fused", "adamw-fused-amsgrad", "adam-foreach", "adamw-foreach", "sgd-foreach", "sgd-fused"])
def test_optimizer_steps_match_cpu(make_opt) -> None:
    g = torch.Generator().manual_seed(0)
    init = [torch.randn(4, 3, generator=g), torch.randn(5, generator=g)]
    expected = _train(make_opt, init, clip=True)
    with AtenReferenceMode() as mode:
        got = _train(make_opt, init, clip=True)
    close(got, expected)
    assert any("_foreach" in k or "_fused" in k for k in mode.lowered)


def test_foreach_calls_on_device_run_one_program_with_runtime_scalar_lists() -> None:
    """tpu calls of _foreach_* reach their lowerings: one program per call (not one per tensor
    and op), in place included; a Scalar[] list is a runtime input, so new values (an
    optimizer's per-step sizes) reuse the program instead of compiling another."""
    import torch_tpu

    xs = [torch.randn(3, 4), torch.randn(17), torch.randn(())]
    ys = [torch.randn_like(x) for x in xs]
    dx, dy = [x.to("tpu") for x in xs], [y.to("tpu") for y in ys]
    with torch_tpu.mode("strict"):
        torch.tpu.synchronize()
        m0 = torch_tpu.metrics()
        torch._foreach_add_(dx, dy, alpha=0.5)
        torch.tpu.synchronize()
        m1 = torch_tpu.metrics()
        assert m1["ops_dispatched"] - m0["ops_dispatched"] == 1
        assert m1["programs_executed"] - m0["programs_executed"] == 1
        torch._foreach_add_(xs, ys, alpha=0.5)
        for step in range(3):
            scalars = [0.5 + step, -0.25 - step, 2.0 + 0.5 * step]  # never 0 or 1 (keyed specially)
            torch._foreach_mul_(dx, scalars)
            torch._foreach_mul_(xs, scalars)
        m2 = torch_tpu.metrics()
        assert m2["programs_executed"] - m1["programs_executed"] == 3
        assert m2["cache_misses"] - m1["cache_misses"] <= 1, "a new Scalar[] value compiled a new program"
    for got, want in zip(dx, xs):
        close(got.cpu(), want)
