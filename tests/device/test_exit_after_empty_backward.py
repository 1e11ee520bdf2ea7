"""Interpreter exit after a backward through empty tpu tensors (torch_tpu._at_exit).

The exit handler waits for PyTorch's autograd device thread to drop its last graph task (which
releases a Python object and so takes the GIL) before the interpreter finalizes; a device thread
that takes the GIL during finalization aborts the process with "terminate called without an
active exception". The handler used to skip devices whose max_memory_allocated was 0, taken to
mean that nothing, so no backward, ran there, but a backward through empty tensors allocates
nothing, and neither does a backward after which all memory was freed and peak statistics were
reset. Those processes aborted at exit in most runs (the device thread is usually still dropping
the graph task when the interpreter finalizes). Each reproducer runs a few times, as the abort
is a race.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

RUNS = 3


def _exits_cleanly(code: str, runs: int = RUNS, **env: str) -> None:
    full_env = dict(os.environ)
    full_env.update(env)
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                           text=True, timeout=120)
        assert "terminate called" not in r.stderr, r.stderr[-2000:]
        assert r.returncode == 0, f"rc={r.returncode}\n{r.stderr[-2000:]}"
        assert r.stdout.strip() == "ok", r.stdout


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("how,dtype", [("backward", "float32"), ("autograd.grad", "float64")])
def test_an_empty_backward_as_the_only_tpu_work_exits_cleanly(mode: str, how: str, dtype: str) -> None:
    call = ("(x * 2).sum(1).backward(g)" if how == "backward"
            else "assert torch.autograd.grad((x * 2).sum(1), x, g)[0].shape == (0, 3)")
    _exits_cleanly(f"""
        import torch, torch_tpu
        with torch_tpu.mode({mode!r}):
            x = torch.zeros(0, 3, device="tpu", dtype=torch.{dtype}, requires_grad=True)
            g = torch.ones(0, device="tpu", dtype=torch.{dtype})
            {call}
        assert torch.tpu.max_memory_allocated() == 0  # the case the exit handler used to skip
        print("ok")
    """)


def test_an_empty_backward_on_a_second_device_exits_cleanly() -> None:
    _exits_cleanly("""
        import torch, torch_tpu
        x = torch.zeros(0, 3, device="tpu:1", requires_grad=True)
        (x * 2).sum(1).backward(torch.ones(0, device="tpu:1"))
        print("ok")
    """, TORCH_TPU_NUM_DEVICES="2")


def test_a_backward_after_peak_statistics_were_reset_exits_cleanly() -> None:
    _exits_cleanly("""
        import torch, torch_tpu
        x = torch.randn(64, device="tpu", requires_grad=True)
        (x * 3).sum().backward()
        del x
        torch.tpu.reset_peak_memory_stats()
        assert torch.tpu.max_memory_allocated() == 0
        print("ok")
    """)


def test_the_drain_allocates_nothing_and_launches_nothing() -> None:
    """The drain runs on every device, used or not: it allocates nothing, runs no program and starts
    no thread (tpu:1 never ran anything; tpu:0 ran a backward before the snapshot)."""
    _exits_cleanly("""
        import os, torch, torch_tpu
        from torch_tpu import _C
        a = torch.ones(3, device="tpu:0", requires_grad=True)
        (a * 2).sum().backward()  # runs on tpu:0's autograd thread, so the threads exist
        assert torch_tpu._autograd_device_threads_started()
        torch.tpu.synchronize()
        threads = len(os.listdir("/proc/self/task"))
        mem = [dict(_C._memory_stats(i)) for i in range(2)]
        metrics = dict(_C._metrics())
        torch_tpu._drain_autograd_device_threads()
        assert [dict(_C._memory_stats(i)) for i in range(2)] == mem
        assert dict(_C._metrics()) == metrics
        assert len(os.listdir("/proc/self/task")) == threads
        print("ok")
    """, runs=1, TORCH_TPU_NUM_DEVICES="2")
