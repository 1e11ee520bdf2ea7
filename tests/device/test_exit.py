"""Interpreter exit after tpu work: pending work runs, and PyTorch's autograd device thread is
done with Python before the interpreter finalizes (torch_tpu._at_exit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_backward_as_the_last_statement_exits_cleanly(mode: str) -> None:
    # After a tpu backward returns, the autograd device thread drops the graph task, and with it
    # the last reference to a Python object torch.autograd stashed in thread-local state, which
    # takes the GIL. Doing that once the interpreter finalizes aborts the process ("terminate
    # called without an active exception"); the exit handler waits for it with a backward of its
    # own. The abort needs the device thread descheduled across the whole exit and cannot be
    # forced here (seen once in hundreds of runs; the late GIL acquisition itself was traced
    # with gdb, docs/notes/interpreter-exit.md): this runs the exit path right after a backward, with a
    # switch interval that keeps the main thread from handing the GIL over on its own.
    code = textwrap.dedent(f"""
        import sys, torch, torch_tpu
        sys.setswitchinterval(100.0)
        torch_tpu.set_mode({mode!r})
        x = torch.randn(64, device="tpu", requires_grad=True)
        for _ in range(3):
            (x.tanh() * 2).sum().backward()
        print(float(x.grad.sum()) != 0.0)
        (x * 3).sum().backward()
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]
    assert "terminate called" not in r.stderr


def test_the_drain_runs_only_where_autograd_threads_run() -> None:
    code = textwrap.dedent("""
        import torch, torch_tpu
        before = torch_tpu._autograd_device_threads_started()
        torch_tpu._drain_autograd_device_threads()  # nothing to drain: must not start the engine
        still = torch_tpu._autograd_device_threads_started()
        x = torch.ones(4, device="tpu", requires_grad=True)
        (x * 2).sum().backward()
        after = torch_tpu._autograd_device_threads_started()
        torch_tpu._drain_autograd_device_threads()
        print(before, still, after, x.grad.tolist())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    # The drain's own backward leaves the user's gradients alone.
    assert r.stdout.split() == ["False", "False", "True", "[2.0,", "2.0,", "2.0,", "2.0]"]
