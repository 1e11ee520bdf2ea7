"""torch.autocast("tpu") follows CPU autocast's policy (OpenReg: test_autocast.py)."""

from __future__ import annotations

import pytest
import torch


def _inputs(*shapes):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g) for s in shapes]


def _under_both(fn, *cpu_args):
    """Runs fn under CPU autocast on CPU tensors and tpu autocast on tpu copies."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = fn(*cpu_args)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = fn(*[a.to("tpu") for a in cpu_args])
    return ref, out


def test_autocast_enabled_flags() -> None:
    assert not torch.is_autocast_enabled("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("tpu")
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("tpu")


@pytest.mark.parametrize("name", ["mm", "matmul", "linear", "bmm", "addmm"])
def test_lower_precision_ops_run_in_bf16(name: str) -> None:
    a, b, c, bias = _inputs((4, 8), (8, 3), (2, 4, 8), (3,))
    fns = {
        "mm": (lambda x, y: torch.mm(x, y), (a, b)),
        "matmul": (lambda x, y: x @ y, (a, b)),
        "linear": (lambda x, w, bb: torch.nn.functional.linear(x, w, bb), (a, b.t().contiguous(), bias)),
        "bmm": (lambda x, y: torch.bmm(x, y), (c, b.expand(2, 8, 3).contiguous())),
        "addmm": (lambda bb, x, y: torch.addmm(bb, x, y), (bias, a, b)),
    }
    fn, args = fns[name]
    ref, out = _under_both(fn, *args)
    assert ref.dtype == torch.bfloat16
    assert out.dtype == ref.dtype and out.is_tpu
    # Both compute in bfloat16 (8-bit mantissa): accumulation order may differ by a few ulps.
    torch.testing.assert_close(out.cpu(), ref, rtol=2e-2, atol=2e-2)


def test_linear_module_under_autocast() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    (x,) = _inputs((5, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = lin(x)
    lin_t = torch.nn.Linear(8, 4).to("tpu")
    lin_t.load_state_dict(lin.state_dict())
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = lin_t(x.to("tpu"))
    assert out.dtype == ref.dtype == torch.bfloat16
    assert lin_t.weight.dtype == torch.float32  # parameters are not modified
    torch.testing.assert_close(out.cpu(), ref, rtol=2e-2, atol=2e-2)  # bf16 compute (see above)


@pytest.mark.parametrize("in_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["sum", "softmax", "relu", "add"])
def test_other_ops_keep_input_dtype_like_cpu(name: str, in_dtype: torch.dtype) -> None:
    (x,) = _inputs((4, 6))
    x = x.to(in_dtype)
    fn = {"sum": lambda t: t.sum(), "softmax": lambda t: torch.softmax(t, dim=-1), "relu": torch.relu,
          "add": lambda t: t + t}[name]
    ref, out = _under_both(fn, x)
    assert out.dtype == ref.dtype == in_dtype
    # float32 stays float32 (default tolerances); bfloat16 results may differ by an ulp.
    tol = dict(rtol=1e-2, atol=1e-2) if in_dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out.cpu(), ref, **tol)


def test_fp32_policy_ops_like_cpu() -> None:
    a, b = _inputs((4, 6), (4, 6))
    ref, out = _under_both(lambda x, y: torch.nn.functional.mse_loss(x.bfloat16(), y.bfloat16()), a, b)
    assert ref.dtype == torch.float32
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out.cpu(), ref)


def test_promote_policy_like_cpu() -> None:
    a, b = _inputs((2, 3), (2, 3))
    ref, out = _under_both(lambda x, y: torch.cat([x.bfloat16(), y]), a, b)
    assert ref.dtype == torch.float32
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out.cpu(), ref)


def test_autocast_backward() -> None:
    (a,) = _inputs((4, 8))
    w = torch.randn(8, 3).to("tpu").requires_grad_()
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = a.to("tpu") @ w
    y.float().sum().backward()
    assert w.grad.dtype == torch.float32 and w.grad.is_tpu
    torch.testing.assert_close(w.grad.cpu(), a.bfloat16().float().sum(0, keepdim=True).t().expand(8, 3),
                               rtol=2e-2, atol=2e-2)  # bf16 forward/backward


def test_autocast_disabled_region() -> None:
    a, b = _inputs((4, 8), (8, 3))
    with torch.autocast("tpu", dtype=torch.bfloat16):
        with torch.autocast("tpu", enabled=False):
            out = a.to("tpu") @ b.to("tpu")
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), a @ b, rtol=1e-5, atol=1e-5)
