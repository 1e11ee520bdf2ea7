"""Out of memory where it hurts most, and recovery: a process whose device holds 64 MiB
(TORCH_TPU_HOST_MEMORY, fixed per process, so each case runs in a subprocess) runs out
- at an allocation (torch.empty larger than the device),
- in the middle of backward (the forward fits; the gradient does not),
- inside a fused-mode flush (an op recorded in fused mode finds the device full: the allocator
  flushes the pending graph, flush cause "memory", retries and still fails; the flushed work
  keeps its values),
- inside a torch.compile(backend="tpu") graph (its outputs do not fit),
20 times each after one warm-up cycle. Every time: torch.OutOfMemoryError, whose message gives
the bytes requested, the capacity and what is allocated; afterwards memory_allocated() is back
at its value before the cycles, and the process trains a small model to CPU's result.

tests/device/test_memory.py covers the per-process fraction limit and tests/device/
test_bad_input.py an allocation and an op output over TORCH_TPU_HOST_MEMORY once each; this file
adds the backward, fused and compiled cases, the repetition and the training afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import re, torch, torch_tpu
MiB = 1 << 20
F = MiB // 4  # float32 elements in 1 MiB

def ones(mib):
    return torch.ones(mib * F, device="tpu")

def expect_oom(fn):
    try:
        fn()
        torch.tpu.synchronize()
    except torch.OutOfMemoryError as e:
        msg = str(e)
        assert re.search(r"Tried to allocate \\d+\\.\\d\\d MiB; the device has a capacity of 64\\.00 MiB, of "
                         r"which [\\d.]+ (?:[KMG]i)?B is allocated by tensors", msg), msg
        return
    raise AssertionError("no OutOfMemoryError")

def train_after():
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 2)
    dev = torch.nn.Linear(8, 2).to("tpu")
    dev.load_state_dict(ref.state_dict())
    x = torch.randn(4, 8)
    for m, d in ((ref, "cpu"), (dev, "tpu")):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            loss = m(x.to(d)).square().mean()
            opt.zero_grad(); loss.backward(); opt.step()
    torch.testing.assert_close(dev.weight.detach().cpu(), ref.weight.detach())
"""

CASES = {
    "allocation": """
        def setup():
            return {}
        def cycle(s):
            expect_oom(lambda: torch.empty(80 * F, device="tpu"))
    """,
    "backward": """
        def setup():
            w = ones(12).requires_grad_()
            return {"w": w, "keep": ones(30)}   # 42 MiB
        def cycle(s):
            loss = (s["w"] * s["w"]).sum()       # fits: w*w is 12 MiB more, freed after the sum
            expect_oom(loss.backward)            # the 12 MiB gradients do not
            assert s["w"].grad is None
    """,
    "fused_flush": """
        def setup():
            return {"keep": ones(40), "x": ones(8)}  # 48 MiB
        def cycle(s):
            with torch_tpu.mode("fused"):
                a = s["x"] * 2                       # pending, 8 MiB each (allocated when recorded)
                b = a + 1                            # 64 MiB in use now
                flushes = torch_tpu.metrics()["fused"]["flushes_by_cause"].get("memory", 0)
                expect_oom(lambda: b.exp())          # no room: flush the pending graph, retry, fail
                assert torch_tpu.metrics()["fused"]["flushes_by_cause"].get("memory", 0) > flushes
                assert (a[0].item(), b[-1].item()) == (2.0, 3.0)   # the flushed work is intact
    """,
    "compiled": """
        f = torch.compile(lambda x: (x * 2, x + 1, x * 3), backend="tpu")
        def setup():
            return {"keep": ones(40), "x": ones(8)}  # 48 MiB
        def cycle(s):
            expect_oom(lambda: f(s["x"]))
    """,
}

DRIVER = """
torch.tpu.synchronize()
start = torch.tpu.memory_allocated()
s = setup()
cycle(s)                                  # warm-up: caches, compiled programs, autograd threads
torch.tpu.synchronize()
base = torch.tpu.memory_allocated()
ooms = torch.tpu.memory_stats()["num_ooms"]
for _ in range(20):
    cycle(s)
torch.tpu.synchronize()
assert torch.tpu.memory_stats()["num_ooms"] >= ooms + 20, torch.tpu.memory_stats()["num_ooms"]
assert torch.tpu.memory_allocated() == base, (torch.tpu.memory_allocated(), base)
del s
torch.tpu.synchronize()
assert torch.tpu.memory_allocated() == start, (torch.tpu.memory_allocated(), start)
train_after()
print("recovered", base - start)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(CASES))
def test_out_of_memory_raises_and_recovers(case: str) -> None:
    code = PRELUDE + textwrap.dedent(CASES[case]) + DRIVER
    env = dict(os.environ, TORCH_TPU_HOST_MEMORY="64MiB")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    assert "recovered" in proc.stdout, proc.stdout
