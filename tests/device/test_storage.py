"""Storages, views, set_/resize_ and in-place ops through views (OpenReg: test_storage.py,
test_ops views)."""

from __future__ import annotations

import math

import pytest
import torch


def _tpu(x: torch.Tensor) -> torch.Tensor:
    return x.to("tpu")


def test_untyped_storage_basics() -> None:
    x = _tpu(torch.arange(6, dtype=torch.float32))
    s = x.untyped_storage()
    assert s.device == torch.device("tpu:0")
    assert s.nbytes() == 24
    assert s.data_ptr() == x.data_ptr()
    assert s.is_tpu
    torch.testing.assert_close(torch.empty(0).set_(s.cpu()), torch.arange(6, dtype=torch.float32))


def test_views_share_storage_and_data_ptr() -> None:
    x = _tpu(torch.arange(12, dtype=torch.float32))
    v = x.view(3, 4)
    t = v.t()
    sl = v[1:, 2:]
    e = x[:4].expand(2, 4)
    for view in (v, t, sl, e):
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert view._base is x or view._base is None or view._base._base is x
    assert v.data_ptr() == x.data_ptr()
    assert sl.data_ptr() == x.data_ptr() + (1 * 4 + 2) * 4
    assert sl.storage_offset() == 6 and sl.stride() == (4, 1)
    assert t.stride() == (1, 4) and not t.is_contiguous()
    torch.testing.assert_close(t.cpu(), torch.arange(12.0).view(3, 4).t())
    torch.testing.assert_close(sl.cpu(), torch.arange(12.0).view(3, 4)[1:, 2:])
    torch.testing.assert_close(e.cpu(), torch.arange(4.0).expand(2, 4))


@pytest.mark.parametrize("which", ["transpose", "slice", "as_strided", "select", "diagonal", "unfold", "view"])
def test_inplace_through_view_visible_in_base(which: str) -> None:
    base_cpu = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    base_tpu = _tpu(base_cpu)

    def view_of(b: torch.Tensor) -> torch.Tensor:
        if which == "transpose":
            return b.t()[0]
        if which == "slice":
            return b[1:3, ::2]
        if which == "as_strided":
            return b.as_strided((2, 2), (5, 1), 1)
        if which == "select":
            return b.select(1, 2)
        if which == "diagonal":
            return b.diagonal()
        if which == "unfold":
            return b.view(-1).unfold(0, 3, 4)  # windows must not overlap for in-place ops
        return b.view(2, 8)

    for b in (base_cpu, base_tpu):
        v = view_of(b)
        v.mul_(10).add_(1)
    torch.testing.assert_close(base_tpu.cpu(), base_cpu)


def test_inplace_with_expanded_operand() -> None:
    row = _tpu(torch.tensor([1.0, 2.0, 3.0]))
    m = _tpu(torch.zeros(2, 3))
    m.add_(row.expand(2, 3))
    m.mul_(row)  # broadcast in place
    torch.testing.assert_close(m.cpu(), torch.tensor([[1.0, 4.0, 9.0], [1.0, 4.0, 9.0]]))


def test_copy_into_noncontiguous_view() -> None:
    m = _tpu(torch.zeros(3, 4))
    m.t()[1].copy_(_tpu(torch.tensor([7.0, 8.0, 9.0])))
    m[:, 3] = torch.tensor([1.0, 2.0, 3.0])  # cpu -> tpu view write
    expected = torch.zeros(3, 4)
    expected[:, 1] = torch.tensor([7.0, 8.0, 9.0])
    expected[:, 3] = torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(m.cpu(), expected)


def test_cpu_copy_into_view_of_busy_tensor() -> None:
    # Queued work still reads x, so each CPU -> tpu copy is queued behind it (on an alias of
    # the view, not the view's own tensor): values, order and the view's geometry must hold.
    x = _tpu(torch.zeros(64, 64))
    view = x.t()[2:10]  # non-contiguous, with a storage offset
    src = torch.arange(8 * 64, dtype=torch.float64).view(8, 64)  # converted to float32 too
    outs = []
    for i in range(3):
        outs.append(torch.tanh(x @ x + 1))  # reads x before this iteration's copy
        view.copy_(src + i)
    expected = torch.zeros(64, 64)
    expected.t()[2:10] = (src + 2).float()
    torch.testing.assert_close(x.cpu(), expected)
    torch.testing.assert_close(outs[0].cpu(), torch.full((64, 64), math.tanh(1.0)))
    before_last = torch.zeros(64, 64)
    before_last.t()[2:10] = (src + 1).float()
    torch.testing.assert_close(outs[2].cpu(), torch.tanh(before_last @ before_last + 1))


def _busy_stream() -> torch.Tensor:
    """Queues work that keeps the default stream busy for a while (a product too large for
    strict mode's inline path), so the ops after it are queued too."""
    a = _tpu(torch.randn(384, 384, generator=torch.Generator().manual_seed(0)))  # leaves the global RNG
    return torch.tanh(a @ a @ a)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("pinned", [False, True])
def test_copy_into_live_buffer_after_queued_reader(mode: str, pinned: bool) -> None:
    # vLLM's CpuGpuBuffer.copy_to_gpu: a live device buffer refilled from the host each step.
    # An op queued (or pending, in fused mode) before the copy reads the old values; ops after
    # it read the new ones; the host source may be reused as soon as the call returns.
    import torch_tpu

    with torch_tpu.mode(mode):
        live = _tpu(torch.arange(256, dtype=torch.int64))
        keep = live[:]  # a second reference: the copy cannot treat live as fresh
        for step in range(3):
            src = torch.arange(256, dtype=torch.int64) * (step + 2)
            src = src.pin_memory() if pinned else src
            busy = _busy_stream()
            before = live * 3  # queued behind the product, reads live before the copy
            live.copy_(src, non_blocking=True)
            after = live * 3
            src.fill_(-1)  # reuse of the source after the call changes nothing on the device
            old = torch.arange(256, dtype=torch.int64) * (step + 1)
            assert torch.equal(before.cpu(), old * 3), (mode, pinned, step)
            assert torch.equal(after.cpu(), torch.arange(256, dtype=torch.int64) * (step + 2) * 3)
            assert busy.shape == (384, 384)
        assert torch.equal(keep.cpu(), torch.arange(256, dtype=torch.int64) * 4)


def test_copy_into_live_buffer_on_idle_device_writes_at_once() -> None:
    # Nothing queued: the copy is written during the call (a host view of the buffer sees it
    # before any synchronization), converted and broadcast as copy_ does.
    live = _tpu(torch.zeros(4, 8))
    view = live[1:3]
    torch.tpu.synchronize()
    view.copy_(torch.arange(8, dtype=torch.float64))
    expected = torch.zeros(4, 8)
    expected[1:3] = torch.arange(8.0)
    torch.testing.assert_close(live.cpu(), expected)
    live.t().copy_(torch.ones(8, 4, dtype=torch.int32))
    torch.testing.assert_close(live.cpu(), torch.ones(4, 8))


def test_copy_into_live_buffer_reports_a_pending_error() -> None:
    # A failed queued op's error surfaces at the next enqueue; a copy that finds the stream idle
    # must still report it rather than write past it.
    live = _tpu(torch.zeros(8))
    keep = live[:]
    x = _tpu(torch.arange(4.0))
    idx = torch.zeros(1 << 16, dtype=torch.int64)
    idx[-1] = 7
    idx = _tpu(idx)
    torch.tpu.synchronize()
    _ = x[idx]  # too large for the inline path: queued, fails on the worker
    while not torch.tpu.current_stream().query():
        pass
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        live.copy_(torch.ones(8))
    live.copy_(torch.full((8,), 2.0))
    torch.testing.assert_close(keep.cpu(), torch.full((8,), 2.0))


def test_noncontiguous_to_cpu_and_back() -> None:
    x = torch.arange(24.0).reshape(2, 3, 4)
    t = _tpu(x).permute(2, 0, 1)
    assert not t.is_contiguous()
    torch.testing.assert_close(t.cpu(), x.permute(2, 0, 1))
    torch.testing.assert_close(t.contiguous().cpu(), x.permute(2, 0, 1).contiguous())
    assert t.contiguous().is_contiguous()


def test_set_storage_with_offset() -> None:
    a = _tpu(torch.arange(6.0))
    b = torch.empty(0, device="tpu")
    b.set_(a.untyped_storage(), 2, (2, 2), (2, 1))
    assert b.data_ptr() == a.data_ptr() + 8
    torch.testing.assert_close(b.cpu(), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
    b.add_(100)
    torch.testing.assert_close(a.cpu(), torch.tensor([0.0, 1.0, 102.0, 103.0, 104.0, 105.0]))


def test_set_tensor_and_set_empty() -> None:
    a = _tpu(torch.arange(4.0))
    b = torch.empty(0, device="tpu")
    b.set_(a)
    assert b.data_ptr() == a.data_ptr() and b.shape == a.shape
    b.fill_(3.0)
    assert a.cpu().tolist() == [3.0, 3.0, 3.0, 3.0]
    b.set_()
    assert b.numel() == 0 and b.is_tpu
    c = torch.empty(0, device="tpu").set_(a.untyped_storage())
    assert c.shape == (4,) and c.cpu().tolist() == [3.0] * 4
    with pytest.raises(RuntimeError):
        torch.empty(0, device="tpu").set_(torch.arange(3.0).untyped_storage())


def test_resize_grow_keeps_data() -> None:
    a = _tpu(torch.arange(4.0))
    a.add_(1)  # queued work on the old memory before the resize
    a.resize_(8)
    assert a.shape == (8,)
    a[4:] = 9.0
    torch.testing.assert_close(a.cpu(), torch.tensor([1.0, 2.0, 3.0, 4.0, 9.0, 9.0, 9.0, 9.0]))
    a.resize_(2, 2)
    torch.testing.assert_close(a.cpu(), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert a.untyped_storage().nbytes() >= 32


def test_storage_resize() -> None:
    a = _tpu(torch.arange(4.0))
    s = a.untyped_storage()
    s.resize_(32)
    assert s.nbytes() == 32
    assert a.untyped_storage().nbytes() == 32
    torch.testing.assert_close(a.cpu(), torch.arange(4.0))
    s.resize_(8)
    assert s.nbytes() == 8
    torch.testing.assert_close(torch.empty(0, device="tpu").set_(s).cpu(), torch.tensor([0.0, 1.0]))


def test_resize_as_and_out_resize() -> None:
    out = torch.empty(0, device="tpu")
    x = _tpu(torch.arange(6.0).reshape(2, 3))
    torch.mul(x, 2, out=out)
    assert out.shape == (2, 3)
    torch.testing.assert_close(out.cpu(), torch.arange(6.0).reshape(2, 3) * 2)
    y = torch.empty(0, device="tpu").resize_as_(x)
    assert y.shape == x.shape


def test_out_tensors_without_memory_are_resized_without_waiting_for_the_device() -> None:
    # ATen's arange (a transformer's positions) and `out=` calls with an empty tensor resize
    # it: no memory moves, so queued work goes on running (a wait per step otherwise).
    x = _tpu(torch.randn(1024, 1024) / 32)
    for _ in range(8):  # ~0.1 s or more of queued products
        x = x @ x
    pos = torch.arange(5, device="tpu")
    out = torch.mul(pos, 2, out=torch.empty(0, dtype=torch.long, device="tpu"))
    assert not torch.tpu.current_stream().query(), "the resizes waited for the queued products"
    assert out.cpu().tolist() == [0, 2, 4, 6, 8]
    assert torch.isfinite(x).all().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool])
def test_dtype_roundtrip(dtype: torch.dtype) -> None:
    x = (torch.arange(-5, 7) % 3).to(dtype)
    t = x.to("tpu")
    assert t.dtype == dtype and t.element_size() == x.element_size()
    assert torch.equal(t.cpu(), x)
    assert t.untyped_storage().nbytes() == x.numel() * x.element_size()
