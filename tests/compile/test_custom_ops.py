"""User ops (torch.library) with a lowering from torch_tpu.lowering.register_lowering.

The op's Python implementation counts its calls: on tpu it must never run (every mode runs
the lowered program); results are compared with that implementation on the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo

import torch_tpu
from torch_tpu.compile import stats
from torch_tpu.lowering import register_lowering

PY_CALLS: list[str] = []


@torch.library.custom_op("tpu_custom_test::silu_alpha", mutates_args=())
def silu_alpha(x: torch.Tensor, alpha: float) -> torch.Tensor:
    PY_CALLS.append(x.device.type)
    return x * torch.sigmoid(alpha * x)


@silu_alpha.register_fake
def _(x, alpha):
    return torch.empty_like(x)


def _backward(ctx, grad):
    x, = ctx.saved_tensors
    s = torch.sigmoid(ctx.alpha * x)
    return grad * (s + ctx.alpha * x * s * (1 - s)), None


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.alpha = inputs[1]


silu_alpha.register_autograd(_backward, setup_context=_setup)


@register_lowering(silu_alpha)
def _lower_silu_alpha(b, x, alpha):
    a = b.broadcast_in_dim(b.convert(alpha, x.dtype), x.shape, [])
    return b.binary("mul", x, b.unary("logistic", b.binary("mul", a, x)))


def _want(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return x.cpu() * torch.sigmoid(alpha * x.cpu())


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    PY_CALLS.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["debug", "strict", "fused"])
def test_eager_modes_run_the_lowering(mode):
    x = torch.randn(5, 7)
    with torch_tpu.mode(mode):
        got = silu_alpha(x.to("tpu"), 1.5)
        got2 = silu_alpha(x.to("tpu"), 0.5)  # alpha is a runtime scalar: same program
        got, got2 = got.cpu(), got2.cpu()
    assert "tpu" not in PY_CALLS
    torch.testing.assert_close(got, _want(x, 1.5))
    torch.testing.assert_close(got2, _want(x, 0.5))


def test_cpu_calls_still_run_the_python_implementation():
    x = torch.randn(3)
    torch.testing.assert_close(silu_alpha(x, 2.0), _want(x, 2.0))
    assert PY_CALLS == ["cpu"]


def test_compiled_graph_with_the_op_is_one_program_with_autograd():
    def f(x, w):
        return silu_alpha(x @ w, 1.5).sum()

    x = torch.randn(4, 6)
    w = torch.randn(6, 3)
    wt = w.to("tpu").requires_grad_()
    before = stats()
    loss = torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"), wt)
    loss.backward()
    after = stats()
    assert after["fallbacks"] == before["fallbacks"]
    assert after["graphs_compiled"] == before["graphs_compiled"] + 2  # forward and backward
    assert "tpu" not in PY_CALLS
    wc = w.clone().requires_grad_()
    want = (x @ wc * torch.sigmoid(1.5 * (x @ wc))).sum()
    want.backward()
    torch.testing.assert_close(loss.cpu(), want.detach(), rtol=1e-5, atol=1e-5)  # see test_compile._close
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-5)


def test_register_lowering_rejects_what_is_not_an_op():
    with pytest.raises(TypeError, match="expected an op"):
        register_lowering(42)
    with pytest.raises(ValueError, match="qualified op name"):
        register_lowering("silu_alpha")


@torch.library.custom_op("tpu_custom_test::scaled", mutates_args=())
def scaled(x: torch.Tensor) -> torch.Tensor:
    PY_CALLS.append(x.device.type)
    return x * 2


@scaled.register_fake
def _(x):
    return torch.empty_like(x)


def _times(factor: float):
    def lower(b, x):
        return b.binary("mul", x, b.full(factor, x.dtype, x.shape))

    return lower


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_lowering_registered_again_replaces_cached_programs(mode):
    """The second registration must win for the same call signature: the per-op programs of
    the first are dropped, and fused graphs that named them by address never match again."""
    x = torch.randn(6)
    with torch_tpu.mode(mode):
        register_lowering(scaled)(_times(2.0))
        first = (scaled(x.to("tpu")) + 1).cpu()
        register_lowering(scaled)(_times(3.0))
        second = (scaled(x.to("tpu")) + 1).cpu()
    assert "tpu" not in PY_CALLS
    torch.testing.assert_close(first, x * 2 + 1)
    torch.testing.assert_close(second, x * 3 + 1)


DISK_CHILD = """
import json, sys, torch, torch_tpu
from torch_tpu.lowering import register_lowering

@torch.library.custom_op("tpu_disk_test::scaled", mutates_args=())
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 0

@scaled.register_fake
def _(x):
    return torch.empty_like(x)

@register_lowering(scaled)
def _lower(b, x):
    return b.binary("mul", x, b.full(FACTOR, x.dtype, x.shape))

x = torch.tensor([0.0, 1.0, 2.0, 3.0]).to("tpu")  # a copy, not a program: the op is the only program
print(json.dumps({"y": scaled(x).cpu().tolist(), "disk": torch_tpu.cache_stats()}))
"""


def test_the_disk_tier_never_loads_programs_of_an_edited_lowering(tmp_path):
    """Per-op programs of a user op are stored on disk keyed by a hash of the lowering's source:
    a process whose lowering changed compiles anew, one with the same lowering loads them."""

    def run(factor: float) -> dict:
        script = tmp_path / f"child_{factor}.py"
        script.write_text(DISK_CHILD.replace("FACTOR", repr(factor)))
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run(2.0)
    assert first["y"] == [0.0, 2.0, 4.0, 6.0]
    assert (first["disk"]["hits"], first["disk"]["writes"]) == (0, 1), first["disk"]
    edited = run(3.0)  # the stored program (x * 2) must not be loaded
    assert edited["y"] == [0.0, 3.0, 6.0, 9.0]
    assert (edited["disk"]["hits"], edited["disk"]["writes"]) == (0, 1), edited["disk"]
    again = run(3.0)  # the same lowering: its program comes from disk
    assert again["y"] == [0.0, 3.0, 6.0, 9.0]
    assert (again["disk"]["hits"], again["disk"]["writes"]) == (1, 0), again["disk"]
