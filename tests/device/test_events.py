"""Events: record, wait, query, synchronize, elapsed_time (OpenReg: test_event.py)."""

from __future__ import annotations

import pytest
import torch


def test_event_create_and_query_unrecorded() -> None:
    e = torch.tpu.Event()
    assert isinstance(e, torch.Event)
    assert e.query() is True  # never recorded: nothing to wait for
    e.synchronize()


def test_record_query_synchronize() -> None:
    x = torch.ones(512, 512).to("tpu")
    e = torch.tpu.Event()
    for _ in range(4):
        x = x @ x * (1.0 / 512)
    e.record()
    e.synchronize()
    assert e.query() is True
    assert e.device == torch.device("tpu:0")
    torch.testing.assert_close(x.cpu(), torch.full((512, 512), 1.0))


def test_record_on_explicit_stream_and_stream_record_event() -> None:
    s = torch.tpu.Stream()
    e1 = torch.tpu.Event()
    e1.record(s)
    e2 = s.record_event()
    e3 = torch.tpu.current_stream().record_event()
    for e in (e1, e2, e3):
        e.synchronize()
        assert e.query()


def test_wait_orders_streams() -> None:
    s = torch.tpu.Stream()
    x = torch.zeros(4096).to("tpu")
    with torch.tpu.stream(s):
        for _ in range(30):
            x.add_(1.0)
    e = torch.tpu.Event()
    e.record(s)
    e.wait()  # the current (default) stream waits for s
    y = x + 0.5
    torch.testing.assert_close(y.cpu(), torch.full((4096,), 30.5))


def test_elapsed_time() -> None:
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    x = torch.randn(256, 256).to("tpu")
    start.record()
    for _ in range(10):
        x = torch.tanh(x @ x)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms > 0.0
    assert end.elapsed_time(start) == pytest.approx(-ms)


def test_elapsed_time_requires_timing_and_record() -> None:
    # PyTorch's generic torch.Event checks (ValueError), which torch.tpu.Event inherits.
    a, b = torch.tpu.Event(), torch.tpu.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)
    c, d = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        c.elapsed_time(d)


def test_tpu_event_type() -> None:
    e = torch.tpu.Event()
    assert isinstance(e, torch.tpu.Event) and isinstance(e, torch.Event)
    assert isinstance(torch.tpu.current_stream().record_event(), torch.tpu.Event)
    assert isinstance(torch.Event(device="tpu"), torch.tpu.Event)


def test_rerecord_tracks_latest_position() -> None:
    e = torch.tpu.Event()
    x = torch.zeros(16).to("tpu")
    e.record()
    e.synchronize()
    x.add_(2.0)
    e.record()
    e.synchronize()
    assert e.query()
    assert torch.tpu.current_stream().query()
    torch.testing.assert_close(x.cpu(), torch.full((16,), 2.0))


def test_generic_torch_event_api() -> None:
    e = torch.Event(device="tpu", enable_timing=True)
    e2 = torch.Event(device="tpu", enable_timing=True)
    e.record(torch.tpu.current_stream())
    y = torch.ones(8).to("tpu") * 3
    e2.record(torch.tpu.current_stream())
    e2.synchronize()
    assert e2.query()
    assert e.elapsed_time(e2) >= 0.0
    assert y.sum().item() == 24.0
