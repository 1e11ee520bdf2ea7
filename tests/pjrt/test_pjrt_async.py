"""Asynchronous completion on the PJRT runtime (runtime/completion.h, runtime/pjrt/launched.h):
a queued program whose outputs stay on the device is launched and not waited for; the stream
waits for launched programs before other work (events) and when it drains, so synchronize,
events and host reads still see finished work, and a launched program's failure surfaces at
the next synchronization. Values are compared with PyTorch CPU. test_pjrt_cpu_plugin.py runs
this file on XLA's CPU plugin."""

from __future__ import annotations

import pytest
import torch

import torch_tpu
from torch_tpu import _C

pytestmark = pytest.mark.skipif(
    _C._pjrt_info() is None,
    reason="the PJRT runtime is not active (set TORCH_TPU_RUNTIME=pjrt and TORCH_TPU_PJRT_PLUGIN)",
)


def launched() -> dict[str, int]:
    return _C._pjrt_info()["launched"]


def _chain(x: torch.Tensor, n: int) -> torch.Tensor:
    # In-place updates of one tensor, each after a contraction: strict mode queues such programs
    # (elementwise-only or tiny ones may run inline on an idle stream, waited for at the call).
    w = torch.linspace(-0.05, 0.05, 64 * 64, device=x.device).reshape(64, 64)
    for i in range(n):
        x.copy_(torch.tanh(x @ w)).mul_(1.01).add_(0.5 if i % 2 else -0.25)
    return x


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_queued_programs_complete_in_order(mode: str) -> None:
    # A chain of in-place programs on one resident tensor, none waited for at its launch: the
    # value read at the end is the CPU's, and the programs were launched asynchronously.
    before = launched()["programs"]
    ref = _chain(torch.linspace(-1, 1, 4096).reshape(64, 64), 40)
    with torch_tpu.mode(mode):
        x = torch.linspace(-1, 1, 4096).reshape(64, 64).to("tpu")
        _chain(x, 40)
        got = x.cpu()
    torch.testing.assert_close(got, ref)
    assert launched()["programs"] > before
    assert launched()["pending"] == 0  # the host read waited for every launched program


def test_synchronize_waits_for_launched_programs() -> None:
    a = torch.randn(256, 256)
    x = a.to("tpu")
    for _ in range(20):
        x = (x @ x.t()).tanh()
    torch.tpu.synchronize()
    assert launched()["pending"] == 0
    ref = a
    for _ in range(20):
        ref = (ref @ ref.t()).tanh()
    # XLA's CPU dot sums in another order than ATen's matmul: float32 rounding differs
    torch.testing.assert_close(x.cpu(), ref, rtol=1e-4, atol=1e-5)


def test_events_wait_for_launched_programs() -> None:
    # Scaled so that the chain contracts (an unscaled randn chain of sin(y @ x) amplifies
    # rounding differences by ~10x per step).
    x = (torch.randn(128, 128) / 24).to("tpu")
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    start.record()
    y = x
    for _ in range(10):
        y = (y @ x).sin()
    end.record()
    end.synchronize()
    assert end.query()
    assert launched()["pending"] == 0  # recording the event waited for the programs before it
    assert start.elapsed_time(end) >= 0.0
    ref = x.cpu()
    r = ref
    for _ in range(10):
        r = (r @ ref).sin()
    # XLA's CPU dot sums in another order than ATen's matmul: float32 rounding differs
    torch.testing.assert_close(y.cpu(), r, rtol=1e-4, atol=1e-5)


def test_failure_of_a_launched_program_surfaces_at_synchronize() -> None:
    x = torch.arange(8.0).to("tpu")
    torch.tpu.synchronize()
    failed = launched()["failed"]
    m = torch.ones(64, 64).to("tpu")
    torch.tpu.synchronize()
    _C._pjrt_inject_async_failure("injected device failure")
    try:
        y = m @ m  # queued and launched; its (injected) failure is known when it is awaited
        with pytest.raises(RuntimeError, match="injected device failure"):
            torch.tpu.synchronize()
    finally:
        _C._pjrt_inject_async_failure("")  # nothing left armed for other tests
    assert launched()["failed"] == failed + 1
    # Reported once; the process stays usable.
    torch.tpu.synchronize()
    torch.testing.assert_close((x + 1).cpu(), torch.arange(8.0) + 1)
    del y


def test_waiting_per_program_gives_the_same_values() -> None:
    # _pjrt_set_async(False) waits for each program at its launch (TORCH_TPU_PJRT_ASYNC=0).
    ref = _chain(torch.linspace(-1, 1, 4096).reshape(64, 64), 10)
    _C._pjrt_set_async(False)
    try:
        before = launched()["programs"]
        x = torch.linspace(-1, 1, 4096).reshape(64, 64).to("tpu")
        _chain(x, 10)
        torch.testing.assert_close(x.cpu(), ref)
        assert launched()["programs"] == before
        assert not launched()["enabled"]
    finally:
        _C._pjrt_set_async(True)
    assert launched()["enabled"]
