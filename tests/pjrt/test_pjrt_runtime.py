"""Programs executed by the PJRT runtime, compared with PyTorch CPU. These tests need a usable
PJRT plugin: they run when the PJRT runtime is active (TORCH_TPU_RUNTIME=pjrt, or auto with a
plugin discovered) and skip with that reason otherwise. test_pjrt_cpu_plugin.py runs them in a
subprocess on XLA's CPU plugin (lammps-jax-pjrt-cpu, a dev dependency) on any machine;
bench/device/pjrt_cuda.sh runs them on a GPU machine."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_tpu
from torch_tpu import _C
from torch_tpu.models import TinyGPT, synthetic_text

pytestmark = pytest.mark.skipif(
    _C._pjrt_info() is None,
    reason="the PJRT runtime is not active (no usable PJRT plugin: set TORCH_TPU_RUNTIME=pjrt and "
    "TORCH_TPU_PJRT_PLUGIN, or install libtpu / jax-cuda13-pjrt on a machine with the device)",
)


def test_client_reports_devices_and_memory() -> None:
    info = _C._pjrt_info()
    assert info["devices"], info
    try:
        stats = _C._pjrt_memory_stats(0)
    except NotImplementedError as e:
        # XLA's CPU plugin has no allocator statistics: the PJRT error must arrive as a clear
        # Python exception naming the call and the plugin.
        assert "Device_MemoryStats" in str(e) and "UNIMPLEMENTED" in str(e) and "plugin" in str(e), e
    else:
        assert stats["bytes_in_use"] >= 0


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_elementwise_reduction_matmul(mode: str) -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(33, 17, generator=g), torch.randn(17, 9, generator=g)
    with torch_tpu.mode(mode):
        x, y = a.to("tpu"), b.to("tpu")
        out = [(x.exp() * 2 + 1).sum(1).cpu(), (x @ y).relu().cpu(), x.t().contiguous().cpu(), x.softmax(-1).cpu()]
    ref = [(a.exp() * 2 + 1).sum(1), (a @ b).relu(), a.t().contiguous(), a.softmax(-1)]
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_inplace_on_views_and_dtypes(mode: str) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    with torch_tpu.mode(mode):
        t = base.to("tpu")
        t[:, 1::2].mul_(-1)  # strided write through a view
        t[2].add_(100)
        i = t.to(torch.int32)
        h = t.to(torch.bfloat16) * 3
        got = (t.cpu(), i.cpu(), h.cpu())
    ref = base.clone()
    ref[:, 1::2].mul_(-1)
    ref[2].add_(100)
    torch.testing.assert_close(got[0], ref)
    torch.testing.assert_close(got[1], ref.to(torch.int32))
    torch.testing.assert_close(got[2], ref.to(torch.bfloat16) * 3)


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
def test_fill_and_zero_of_an_expanded_view_like_cpu(mode: str) -> None:
    """CPU fills an expanded view (one value everywhere); the PJRT runtime wrote the result
    through CPU's copy_, which refused the overlapping destination."""
    with torch_tpu.mode(mode):
        filled = torch.zeros(1, 3, device="tpu").expand(4, 3).fill_(2)
        zeroed = torch.ones(2, 1, device="tpu").expand(2, 5).zero_()
        assert filled.cpu().tolist() == [[2.0] * 3] * 4
        assert zeroed.cpu().tolist() == [[0.0] * 5] * 2
        assert filled.stride() == (0, 1)  # still the view, written in place


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_complex_values_and_fft(mode: str) -> None:
    # Complex tensors cross the PJRT boundary as their float views (the IR stays real).
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 8, dtype=torch.complex64, generator=g)
    x = torch.randn(6, 8, generator=g)
    want = [a * x - a.conj() / (1 + 1j), torch.view_as_real(a * torch.polar(torch.ones(8), x[0])),
            torch.fft.rfft(x), torch.fft.ifft(a).abs()]
    with torch_tpu.mode(mode):
        ta, tx = a.to("tpu"), x.to("tpu")
        got = [ta * tx - ta.conj() / (1 + 1j), torch.view_as_real(ta * torch.polar(torch.ones(8, device="tpu"), tx[0])),
               torch.fft.rfft(tx), torch.fft.ifft(ta).abs()]
        got = [t.cpu() for t in got]
    for gv, wv in zip(got, want):
        torch.testing.assert_close(gv, wv, rtol=1e-4, atol=1e-5)  # DFT products: sums in another order


def test_random_numbers_follow_the_generator() -> None:
    torch.tpu.manual_seed(123)
    a = torch.rand(1000, device="tpu").cpu()
    torch.tpu.manual_seed(123)
    b = torch.rand(1000, device="tpu").cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert 0.4 < a.mean().item() < 0.6


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_gpt_training_matches_cpu(mode: str) -> None:
    data = synthetic_text(5, batch=4, ctx=16, vocab=64)

    def train(device: str) -> list[float]:
        torch.manual_seed(0)
        model = TinyGPT(vocab=64, dim=32, heads=4, layers=2, ctx=16).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, eps=1e-6)
        losses = []
        for x, y in data:
            opt.zero_grad()
            loss = model(x.to(device), y.to(device))[1]
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    ref = train("cpu")
    with torch_tpu.mode(mode):
        got = train("tpu")
    # Five AdamW steps amplify float32 rounding differences (XLA's reduction order and fused
    # transcendental approximations differ from ATen's), hence a wider tolerance than one op.
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=2e-3, atol=2e-3)


def test_compiled_mode_runs_on_pjrt() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    tpu_model = copy.deepcopy(model).to("tpu")
    x = torch.randn(8, 16)
    ref = model(x)
    ref.square().sum().backward()
    compiled = torch.compile(tpu_model, backend="tpu", fullgraph=True)
    out = compiled(x.to("tpu"))
    out.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-4, atol=1e-5)
    for p_tpu, p_cpu in zip(tpu_model.parameters(), model.parameters()):
        torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5)


def test_each_pjrt_device_is_a_tpu_device() -> None:
    info = _C._pjrt_info()
    n = len(info["devices"])
    assert torch.tpu.device_count() == n
    assert info["platform"] in torch.tpu.get_device_name(0)
    with pytest.raises(RuntimeError, match=rf"Invalid device index tpu:{n}: torch_tpu has {n} device"):
        torch.empty(1, device=f"tpu:{n}")
    if n < 2:
        pytest.skip(f"the PJRT plugin has {n} device: nothing to place on tpu:1")
    a = torch.randn(64, 32)
    before = _C._pjrt_info()["executions_per_device"]
    x1 = a.to("tpu:1")
    y1 = (x1 * 3).tanh().sum(0)  # runs on PJRT device 1
    y0 = y1.to("tpu:0") + 1  # device-to-device copy, then device 0
    torch.testing.assert_close(y0.cpu(), (a * 3).tanh().sum(0) + 1, rtol=1e-5, atol=1e-5)
    assert y1.device == torch.device("tpu:1") and y0.device == torch.device("tpu:0")
    after = _C._pjrt_info()["executions_per_device"]
    assert after[1] > before[1] and after[0] > before[0], (before, after)


def test_a_child_forked_after_import_raises_instead_of_hanging() -> None:
    # The plugin's client runs threads from import on; fork() copies only the calling thread, so
    # a forked child that used the device waited forever for them. It raises, naming the fix.
    import subprocess
    import sys

    code = (
        "import os, torch, torch_tpu\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        torch.ones(4, device='tpu').sum().item()\n"
        "    except RuntimeError as e:\n"
        "        os._exit(0 if 'forked subprocess' in str(e) and 'spawn' in str(e) else 4)\n"
        "    os._exit(3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "assert os.waitstatus_to_exitcode(status) == 0, status\n"
        "assert torch.ones(4, device='tpu').sum().item() == 4.0  # the parent is unaffected\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
