"""The host runtime's fused clusters run 16 lanes at a time where ATen runs its AVX512 kernels
(SLEEF's 16-wide functions and the AVX512 tile loops; exp, log, sin, cos, erf and atan call
MKL's vector math either way, tanh the runtime's own 8-lane function), and 8 at a time otherwise
(runtime/host/tile_math.cpp). Both widths must give the same bits, so results do not depend on
the machine's vector width or on where a tile ends. (Where ATen runs AVX2 kernels both runs
take 8 lanes; the values are still checked against CPU.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch

CODE = textwrap.dedent("""
    import sys, torch, torch_tpu
    torch_tpu.set_mode("fused")
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(40000, generator=g) * 3, torch.rand(40000, generator=g) * 40 - 20])
    def run(t):
        pos = t.abs() + 0.5
        return [t.tanh() * 1, t.exp() * 1, pos.log() * 1, t.sin() * 1, t.cos() * 1, t.erf() * 1,
                t.sigmoid() * 1, t.atan() * 1, torch.atan2(t, pos) * 1, pos.pow(t * 0.1) * 1]
    def plain(t):
        # The tile loops' own ops (no SLEEF), on a length that is not a multiple of 16.
        t = t[:-5].clone()
        t[::997] = float("nan")  # NaN handling of max/min/select/compare (not SLEEF's: see below)
        u = t.flip(0) * 0.7 + 0.1
        return [(t + u) * (t - u) / (u.abs() + 0.25), torch.maximum(t, u) - torch.minimum(t, u) * 2,
                t.floor() + t.ceil() * 3, t.round() - t.trunc() * 2, (t.abs() + 1).sqrt() * 1,
                (t.abs() + 1).rsqrt() * 1, torch.fmod(t, u + 3.0) * 1, torch.where(t > u, t * 2, -u) * 1,
                t.clamp(-2.5, 2.5).sign() * t.neg()]
    got = [o.cpu() for o in run(x.to("tpu")) + plain(x.to("tpu"))]
    # The values themselves against CPU (MKL's or SLEEF's functions, so float32 rounding only).
    for g, e in zip(got, run(x) + plain(x)):
        torch.testing.assert_close(g, e, equal_nan=True)
    torch.save(got, sys.argv[1])
""")


def test_vector_widths_give_the_same_bits(tmp_path) -> None:
    results = []
    for capability in (None, "avx2"):
        env = dict(os.environ)
        env.pop("ATEN_CPU_CAPABILITY", None)
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        out = tmp_path / f"{capability}.pt"
        subprocess.run([sys.executable, "-c", CODE, str(out)], env=env, check=True, timeout=120)
        results.append(torch.load(out))
    # NaN payloads and signs may differ (x86 keeps an operand's NaN, and which one depends on
    # the instruction sequence); every other value must match bit for bit. SLEEF's inputs have no
    # NaN: with NaNs among them, sin and cos differed in the last bit at 3 non-NaN positions
    # between the widths (SLEEF chooses its argument reduction per vector, so a lane's result
    # can depend on the lanes that share its vector).
    for i, (wide, narrow) in enumerate(zip(*results)):
        assert torch.equal(wide.isnan(), narrow.isnan()), f"output {i}: NaN positions differ"
        same = wide.view(torch.int32) == narrow.view(torch.int32)
        assert bool((same | wide.isnan()).all()), f"output {i}: {int((~same & ~wide.isnan()).sum())} values differ"
