"""Complex values, FFTs, LU-based and Jacobi-based linear algebra on "tpu" (host runtime) against native CPU.

Same process, same inputs; rounds alternate the two and the median per-round ratio is printed
(tpu time / CPU time: above 1 is slower), because these 2 shared cores drift. The tpu side ends
each timed call with a host read (`.cpu()`), as the CPU side's result is ready when it returns.

Workloads:
  rope      rotary embeddings as Meta's Llama writes them (view_as_complex, complex multiply,
            view_as_real) on [8, 256, 8, 64], strict and fused mode
  rfft      torch.fft.rfft of [64, 4096] (split 64 x 64: two DFT products and twiddles)
  stft      Whisper's front end: stft of 30 s of 16 kHz audio, n_fft 400, hop 160, magnitudes
  solve     torch.linalg.solve of 32 batched 64 x 64 systems (LU unrolled over 64 columns)
  det       torch.linalg.det of 32 batched 64 x 64 matrices
  svd       torch.linalg.svd of 32 batched 32 x 32 matrices (Jacobi: 9 sweeps of 31 rounds)
  eigh      torch.linalg.eigh of 32 batched symmetric 32 x 32 matrices

Run: .venv/bin/python bench/complex_linalg.py [--rounds 5] [--window 0.3] [--only rope,rfft]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import torch_tpu


def _rope(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3)


def workloads() -> dict[str, tuple[Callable[[str], tuple], Callable]]:
    """name -> (inputs on a device, function)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 256, 8, 64, generator=g)
    freqs = torch.outer(torch.arange(256.0), 1.0 / 10000 ** (torch.arange(0, 64, 2).float() / 64))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    sig = torch.randn(64, 4096, generator=g)
    audio = torch.randn(16000 * 30, generator=g)
    a = torch.randn(32, 64, 64, generator=g) + 8 * torch.eye(64)
    rhs = torch.randn(32, 64, 4, generator=g)
    small = torch.randn(32, 32, 32, generator=g)
    sym = small + small.mT

    def on(*ts):
        return lambda dev: tuple(t.to(dev) for t in ts)

    def stft(s):
        w = torch.hann_window(400, device=s.device)
        return torch.stft(s, 400, 160, window=w, return_complex=True).abs()

    return {
        "rope": (on(x, freqs_cis), _rope),
        "rfft": (on(sig), lambda s: torch.fft.rfft(s)),
        "stft": (on(audio), stft),
        "solve": (on(a, rhs), torch.linalg.solve),
        "det": (on(a), torch.linalg.det),
        # U and V are computed; the values (free of the vectors' signs) are compared and read
        "svd": (on(small), lambda m: torch.linalg.svd(m, full_matrices=False)[1]),
        "eigh": (on(sym), lambda m: torch.linalg.eigh(m)[0]),
    }


def _time(fn: Callable[[], object], window: float) -> float:
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        if time.perf_counter() - start >= window and n >= 3:
            return (time.perf_counter() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=0.3)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    print(f"torch {torch.__version__}, runtime {torch_tpu._C._runtime_name()}; ratio = tpu time / CPU time "
          f"(median of {a.rounds} rounds)")
    for name, (inputs, fn) in workloads().items():
        if only and name not in only:
            continue
        cpu_in, tpu_in = inputs("cpu"), inputs("tpu")
        want = fn(*cpu_in)
        modes = ("strict", "fused") if name == "rope" else ("strict",)
        for mode in modes:
            with torch_tpu.mode(mode):
                got = fn(*tpu_in).cpu()
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
                ratios, cpu_s, tpu_s = [], [], []
                for _ in range(a.rounds):
                    c = _time(lambda: fn(*cpu_in), a.window)
                    t = _time(lambda: fn(*tpu_in).cpu(), a.window)
                    cpu_s.append(c)
                    tpu_s.append(t)
                    ratios.append(t / c)
            print(f"{name:6s} {mode:6s}  cpu {statistics.median(cpu_s) * 1e3:8.2f} ms   tpu "
                  f"{statistics.median(tpu_s) * 1e3:8.2f} ms   ratio {statistics.median(ratios):6.2f}")


if __name__ == "__main__":
    main()
