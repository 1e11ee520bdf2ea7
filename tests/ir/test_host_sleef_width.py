"""The host runtime's fused clusters call SLEEF 16 lanes at a time where ATen runs its AVX512
kernels, and 8 at a time otherwise (runtime/host/fusion.cpp). Both widths must give the same
bits, so results do not depend on the machine's vector width or on where a tile ends. (Where
ATen runs AVX2 kernels both runs take 8 lanes; the values are still checked against CPU.)"""

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
    got = [o.cpu() for o in run(x.to("tpu"))]
    # The values themselves against CPU (the same SLEEF functions, so float32 rounding only).
    for g, e in zip(got, run(x)):
        torch.testing.assert_close(g, e)
    torch.save(got, sys.argv[1])
""")


def test_sleef_widths_give_the_same_bits(tmp_path) -> None:
    results = []
    for capability in (None, "avx2"):
        env = dict(os.environ)
        env.pop("ATEN_CPU_CAPABILITY", None)
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        out = tmp_path / f"{capability}.pt"
        subprocess.run([sys.executable, "-c", CODE, str(out)], env=env, check=True, timeout=120)
        results.append(torch.load(out))
    for wide, narrow in zip(*results):
        assert torch.equal(wide.view(torch.int32), narrow.view(torch.int32))
