"""TORCH_TPU_VERIFY=1 verifies each graph after the host planner's IR passes
(compiler/passes/verify_pass.h; host_plan.cpp), besides each lowered graph. Programs whose
graphs every pass rewrites (view chains, bias epilogues, concatenates of reshapes, attention's
transposes) must verify and still give CPU's values, per op and fused; a broken pass output is
reported by name (tests/cpp/test_pass_verify.cpp)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CODE = textwrap.dedent("""
    import torch, torch_tpu
    torch.manual_seed(0)
    def program(x, w, b, q, k, v):
        h = torch.nn.functional.linear(x, w, b).relu()         # a bias epilogue
        h = h.reshape(4, 3, 8).reshape(12, 8).reshape(4, 24)    # a view chain
        a = (q @ k.transpose(-1, -2)).softmax(-1) @ v          # [B, H, T, D]
        merged = a.transpose(1, 2).reshape(2, 5, 12)           # heads merged
        cat = torch.cat([merged.reshape(10, 12), h.reshape(8, 12)], 0)
        return [h, merged, cat * 2]
    args = [torch.randn(4, 16), torch.randn(24, 16), torch.randn(24), torch.randn(2, 3, 5, 4),
            torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)]
    expected = program(*args)
    for mode in ("strict", "fused"):
        torch_tpu.set_mode(mode)
        got = program(*[a.to("tpu") for a in args])
        for g, e in zip(got, expected):
            torch.testing.assert_close(g.cpu(), e)
    print("ok")
""")


def test_programs_verify_after_each_pass() -> None:
    env = dict(os.environ, TORCH_TPU_VERIFY="1", TORCH_TPU_CACHE_DIR="off")
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.strip().endswith("ok")
