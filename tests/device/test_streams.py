"""Streams: identity, current/default stream, stream contexts, real cross-stream ordering
(OpenReg: test_streams.py)."""

from __future__ import annotations

import subprocess
import sys
import threading

import torch


def test_default_and_current_stream() -> None:
    d = torch.tpu.default_stream()
    c = torch.tpu.current_stream()
    assert d == c
    assert d.stream_id == 0 and d.device_index == 0
    assert d.device == torch.device("tpu:0")
    assert torch.tpu.default_stream(0) == torch.tpu.default_stream("tpu:0") == d


def test_new_stream_is_distinct() -> None:
    s = torch.tpu.Stream()
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("tpu:0")
    assert s != torch.tpu.default_stream()
    assert s.stream_id != 0
    s2 = torch.tpu.Stream(device="tpu:0")
    assert s2.device_index == 0
    # torch.Stream without an index means the current device, like CUDA.
    s3 = torch.Stream(device="tpu")
    assert s3.device_index == 0 and s3.stream_id != 0


def test_stream_context_manager() -> None:
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        with torch.tpu.stream(torch.tpu.default_stream()):
            assert torch.tpu.current_stream() == torch.tpu.default_stream()
        assert torch.tpu.current_stream() == s
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    with torch.tpu.StreamContext(s):
        assert torch.tpu.current_stream() == s
    with torch.tpu.stream(None):
        assert torch.tpu.current_stream() == torch.tpu.default_stream()
    # torch.Stream is itself a context manager.
    with s:
        assert torch.tpu.current_stream() == s
    assert torch.tpu.current_stream() == torch.tpu.default_stream()


def test_set_stream() -> None:
    s = torch.tpu.Stream()
    torch.tpu.set_stream(s)
    try:
        assert torch.tpu.current_stream() == s
        assert torch.accelerator.current_stream() == s
    finally:
        torch.tpu.set_stream(torch.tpu.default_stream())
    assert torch.tpu.current_stream() == torch.tpu.default_stream()


def test_current_stream_is_per_thread() -> None:
    s = torch.tpu.Stream()
    seen = []
    with torch.tpu.stream(s):
        t = threading.Thread(target=lambda: seen.append(torch.tpu.current_stream()))
        t.start()
        t.join()
        assert torch.tpu.current_stream() == s
    assert seen == [torch.tpu.default_stream()]


def test_side_stream_work_ordered_with_wait_stream() -> None:
    a = torch.randn(128, 128)
    ta = a.to("tpu")
    s = torch.tpu.Stream()
    s.wait_stream(torch.tpu.current_stream())  # ta's upload is visible on s
    with torch.tpu.stream(s):
        tb = ta @ ta
        for _ in range(5):
            tb = tb * 0.5 + 1.0
    torch.tpu.current_stream().wait_stream(s)  # default stream waits for s
    tc = tb + 1.0
    expected = a @ a
    for _ in range(5):
        expected = expected * 0.5 + 1.0
    torch.testing.assert_close(tc.cpu(), expected + 1.0, rtol=1e-4, atol=1e-4)


def test_side_stream_ordered_with_wait_event() -> None:
    s1, s2 = torch.tpu.Stream(), torch.tpu.Stream()
    x = torch.zeros(1000).to("tpu")
    with torch.tpu.stream(s1):
        for i in range(20):
            x.add_(1.0)
        e = s1.record_event()
    s2.wait_event(e)
    with torch.tpu.stream(s2):
        y = x * 2
    s2.synchronize()
    assert s2.query()
    torch.testing.assert_close(y.cpu(), torch.full((1000,), 40.0))


def test_stream_synchronize_and_query() -> None:
    s = torch.tpu.Stream()
    x = torch.ones(256, 256).to("tpu")
    s.wait_stream(torch.tpu.current_stream())
    with torch.tpu.stream(s):
        for _ in range(10):
            x = x * 2.0 - 1.0
    s.synchronize()
    assert s.query() is True
    torch.tpu.synchronize()
    assert torch.tpu.default_stream().query() is True
    torch.testing.assert_close(x.cpu(), torch.ones(256, 256))


def test_error_on_side_stream_surfaces_on_sync() -> None:
    s = torch.tpu.Stream()
    x = torch.arange(4.0).to("tpu")
    idx = torch.zeros(1 << 16, dtype=torch.int64)  # large: always queued (no inline fast path)
    idx[-1] = 9
    idx = idx.to("tpu")
    s.wait_stream(torch.tpu.current_stream())
    with torch.tpu.stream(s):
        bad = x[idx]
    try:
        s.synchronize()
    except IndexError as e:
        assert "out of bounds" in str(e)
    else:
        raise AssertionError("the queued error was not re-raised by Stream.synchronize()")
    del bad
    s.synchronize()  # not sticky


# The stream queue holds at most 64 items, so the resizes below wait for the worker while
# PyTorch holds the GIL (storage.resize_ calls the allocator's resize under it), and the worker
# needs the GIL to drop its references to `x`, which has a Python object (torch >= 2.10 increfs
# and decrefs that object whenever the C++ reference count crosses 1 <-> 2). FSDP2 frees and
# re-allocates parameters exactly like this; it hung in CI before host waits released the GIL.
_GIL_HELD_WAIT = """
import torch, torch_tpu
x = torch.randn(256, 256).to("tpu")
p = torch.empty(1000, device="tpu")
for trial in range(3):
    for i in range(200):
        y = torch.tanh(x @ x)
    for i in range(100):
        p.untyped_storage().resize_(0)
        p.untyped_storage().resize_(4000)
torch.tpu.synchronize()
assert torch.allclose(y.cpu(), torch.tanh(x.cpu() @ x.cpu()), atol=1e-5)
print("done")
"""


def test_wait_with_gil_held_does_not_deadlock() -> None:
    # In a child process, so a deadlock fails this test (timeout) instead of hanging the suite.
    r = subprocess.run([sys.executable, "-c", _GIL_HELD_WAIT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stdout + r.stderr
