"""Complex tensors (complex64, complex128) on "tpu", compared with CPU.

They are bound to programs as their view_as_real and computed as pairs of real values
(torch_tpu/lowering/complex_value.py), so these tests cover the boundary (allocation, copies,
views, conj/neg bits, scalars, item/print/save) and the code users write with them: rotary
embeddings in Meta's Llama style, FFTs. Op by op, tests/ops/test_opinfo.py runs every OpInfo
entry in complex64 (docs/ops.md has the column).
"""

from __future__ import annotations

import io

import pytest
import torch

import torch_tpu

DEV = "tpu"


def _pair(shape=(3, 4), dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g), torch.randn(shape, dtype=dtype, generator=g)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_round_trip_views_and_host_reads(dtype: torch.dtype) -> None:
    a, _ = _pair(dtype=dtype)
    t = a.to(DEV)
    assert t.dtype == dtype and t.device.type == "tpu"
    torch.testing.assert_close(t.cpu(), a, rtol=0, atol=0)
    r = torch.view_as_real(t)  # a float view of the same memory, as on CPU
    assert r.dtype == a.real.dtype and r.shape == (3, 4, 2)
    torch.testing.assert_close(r.cpu(), torch.view_as_real(a), rtol=0, atol=0)
    torch.testing.assert_close(t.real.cpu(), a.real, rtol=0, atol=0)
    torch.testing.assert_close(t.imag.cpu(), a.imag, rtol=0, atol=0)
    assert t[1, 2].item() == a[1, 2].item()
    assert t.tolist() == a.tolist()
    assert "j" in repr(t)
    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded.device.type == "tpu"
    torch.testing.assert_close(loaded.cpu(), a, rtol=0, atol=0)
    # writing through the float view changes the complex tensor
    r[0, 0, 1] = 5.0
    assert t[0, 0].item().imag == 5.0


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_arithmetic_with_real_tensors_and_python_scalars(mode: str) -> None:
    a, b = _pair()
    x = torch.randn(4)
    with torch_tpu.mode(mode):
        ta, tb, tx = a.to(DEV), b.to(DEV), x.to(DEV)
        got = [ta + tb, ta - tb * 2, ta * tb, ta / tb, ta * tx, tx / ta, ta * 1j, ta + (2 - 3j), 1j / ta,
               ta.conj() * tb, torch.abs(ta), torch.angle(ta), ta.sum(0), ta.mean(), ta @ tb.T,
               torch.where(tx > 0, ta, tb), torch.exp(ta), torch.sqrt(ta), ta ** 2]
        got = [g.cpu() for g in got]
    want = [a + b, a - b * 2, a * b, a / b, a * x, x / a, a * 1j, a + (2 - 3j), 1j / a, a.conj() * b, torch.abs(a),
            torch.angle(a), a.sum(0), a.mean(), a @ b.T, torch.where(x > 0, a, b), torch.exp(a), torch.sqrt(a), a ** 2]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w)


def test_conj_and_neg_views_read_and_write_through() -> None:
    a, b = _pair()
    ta, tb = a.to(DEV), b.to(DEV)
    assert ta.conj().is_conj()
    torch.testing.assert_close((ta.conj() + tb).cpu(), a.conj() + b)
    torch.testing.assert_close(ta.conj().imag.cpu(), a.conj().imag)  # a neg view of the float memory
    torch.testing.assert_close((ta.conj().imag * 2).cpu(), a.conj().imag * 2)
    # in place through a conj view: the stored value is conjugated back, as on CPU
    ca, cta = a.clone(), ta.clone()
    ca.conj().mul_(1 + 2j)
    cta.conj().mul_(1 + 2j)
    torch.testing.assert_close(cta.cpu(), ca)
    torch.testing.assert_close(ta.conj().resolve_conj().cpu(), a.conj().resolve_conj())


def _rope(dev: str, xq: torch.Tensor):
    """Rotary embeddings as Meta's Llama and torchtitan write them (complex multiply)."""
    dim, end = xq.shape[-1], xq.shape[1]
    freqs = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=dev)[: dim // 2].float() / dim))
    freqs = torch.outer(torch.arange(end, device=dev), freqs).float()
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    out = torch.view_as_real(xq_ * freqs_cis.view(1, end, 1, dim // 2)).flatten(3)
    return out.type_as(xq)


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
def test_rotary_embedding_forward_and_backward_match_cpu(mode: str) -> None:
    x = torch.randn(2, 6, 3, 8)
    w = torch.randn(2, 6, 3, 8)
    xc = x.clone().requires_grad_()
    (_rope("cpu", xc) * w).sum().backward()
    with torch_tpu.mode(mode):
        torch_tpu.reset_metrics()
        xt = x.to(DEV).requires_grad_()
        out = _rope(DEV, xt)
        (out * w.to(DEV)).sum().backward()
        torch.testing.assert_close(out.detach().cpu(), _rope("cpu", x))
        torch.testing.assert_close(xt.grad.cpu(), xc.grad)
        if mode == "fused":  # complex ops are recorded like any other, through float views too
            flushes = torch_tpu.metrics()["fused"]["flushes_by_cause"]
            assert set(flushes) <= {"host_read", "slow_start", "copy"}, flushes


@pytest.mark.parametrize("fn", [
    lambda t: torch.fft.fft(t), lambda t: torch.fft.ifft(t), lambda t: torch.fft.rfft(t, norm="ortho"),
    lambda t: torch.fft.irfft(torch.fft.rfft(t)), lambda t: torch.fft.fft2(t.reshape(4, 6, 5)),
    lambda t: torch.fft.irfftn(torch.fft.rfftn(t), s=t.shape, norm="forward"),
    lambda t: torch.fft.fft(t.to(torch.complex64), n=7, dim=0), lambda t: torch.fft.hfft(t.to(torch.complex64)),
    lambda t: torch.stft(t.reshape(-1), n_fft=16, hop_length=4, window=torch.hann_window(16, device=t.device),
                         return_complex=True).abs(),
], ids=["fft", "ifft", "rfft_ortho", "irfft", "fft2", "irfftn", "fft_n", "hfft", "stft"])
def test_fft_matches_cpu(fn) -> None:
    x = torch.randn(4, 30)
    torch.testing.assert_close(fn(x.to(DEV)).cpu(), fn(x), rtol=1e-4, atol=1e-4)  # O(n) sums, not FFT butterflies


def test_fft_gradient_matches_cpu() -> None:
    x = torch.randn(3, 16)
    xc, xt = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
    torch.fft.rfft(xc).abs().sum().backward()
    torch.fft.rfft(xt).abs().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [6000, 4096 * 3])
def test_long_fft_is_split_and_matches_cpu(n: int) -> None:
    x = torch.randn(2, n)
    for fn in (torch.fft.fft, torch.fft.rfft, lambda t: torch.fft.irfft(torch.fft.rfft(t), n=n)):
        want = fn(x)
        torch.testing.assert_close(fn(x.to(DEV)).cpu(), want, rtol=0, atol=1e-6 * want.abs().max().item())


def test_long_prime_fft_names_the_limit() -> None:
    with pytest.raises(NotImplementedError, match="prime length 4099"):
        torch.fft.fft(torch.randn(4099, device=DEV))


def test_complex_calls_that_bake_scalars_leave_real_calls_keyed_without_them() -> None:
    # addcmul's complex form decomposes and needs its `value` as a constant; real calls of the
    # op must keep `value` a runtime input (an optimizer's step sizes change every step).
    z = torch.randn(4, dtype=torch.complex64).to(DEV)
    torch.testing.assert_close(torch.addcmul(z, z, z, value=0.5).cpu(), torch.addcmul(z.cpu(), z.cpu(), z.cpu(), value=0.5))
    x = torch.randn(4).to(DEV)
    torch.addcmul(x, x, x, value=0.1)
    before = torch_tpu.metrics()["programs_compiled"]
    for v in (0.2, 0.3, 0.4):
        torch.testing.assert_close(torch.addcmul(x, x, x, value=v).cpu(), torch.addcmul(x.cpu(), x.cpu(), x.cpu(), value=v))
    assert torch_tpu.metrics()["programs_compiled"] == before
