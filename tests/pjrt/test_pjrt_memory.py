"""Device memory on the PJRT runtime: a RESOURCE_EXHAUSTED upload or execution evicts the
device's resident buffers into their host bytes and is retried once, a second failure raises
torch.OutOfMemoryError with the requested and available bytes and the process stays usable;
memory_allocated / max_memory_allocated / mem_get_info report the device buffers' bytes, not the
host mirror's. XLA's CPU plugin allocates from host RAM and never runs out here, so failures are
injected (_C._pjrt_inject_out_of_memory) where the plugin's error would arise. Values are
compared with PyTorch CPU. test_pjrt_cpu_plugin.py runs this file on XLA's CPU plugin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import torch_tpu  # noqa: F401  (registers the tpu device)
from torch_tpu import _C

pytestmark = pytest.mark.skipif(
    _C._pjrt_info() is None,
    reason="the PJRT runtime is not active (set TORCH_TPU_RUNTIME=pjrt and TORCH_TPU_PJRT_PLUGIN)",
)

MiB = 1 << 20


def oom() -> dict[str, int]:
    return _C._pjrt_info()["out_of_memory"]


@pytest.fixture(autouse=True)
def _nothing_left_armed() -> Iterator[None]:
    torch.tpu.synchronize()
    yield
    _C._pjrt_inject_out_of_memory(0, 0)
    torch.tpu.synchronize()


def test_out_of_memory_evicts_resident_buffers_and_retries() -> None:
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    x = a.to("tpu") * 2  # program outputs: resident, their host bytes stale
    w = b.to("tpu") + 1
    torch.tpu.synchronize()
    assert _C._pjrt_info()["resident"]["entries"] >= 2
    before = oom()
    _C._pjrt_inject_out_of_memory(executions=1)
    y = x @ w
    torch.tpu.synchronize()
    after = oom()
    assert after["evictions"] == before["evictions"] + 1
    assert after["retried"] == before["retried"] + 1
    assert after["raised"] == before["raised"]
    assert after["evicted_bytes"] - before["evicted_bytes"] >= 2 * 128 * 128 * 4  # x and w at least
    # The evicted tensors came back into their host bytes; the retried program ran.
    torch.testing.assert_close(x.cpu(), a * 2)
    torch.testing.assert_close(w.cpu(), b + 1)
    # XLA's CPU dot sums in another order than ATen's matmul: float32 rounding differs
    torch.testing.assert_close(y.cpu(), (a * 2) @ (b + 1), rtol=1e-4, atol=1e-4)


def test_an_upload_out_of_memory_is_retried() -> None:
    c = torch.randn(256)
    t = c.to("tpu")  # host bytes only: the next program uploads them
    before = oom()
    _C._pjrt_inject_out_of_memory(uploads=1)
    got = (t * 3).cpu()
    assert oom()["retried"] == before["retried"] + 1
    assert oom()["evictions"] == before["evictions"] + 1
    torch.testing.assert_close(got, c * 3)


def test_out_of_memory_after_the_retry_raises_and_the_process_stays_usable() -> None:
    a = torch.randn(64, 64)
    x = a.to("tpu") + 0
    torch.tpu.synchronize()
    raised = oom()["raised"]
    _C._pjrt_inject_out_of_memory(executions=2)
    with pytest.raises(torch.OutOfMemoryError) as info:
        y = x @ x
        torch.tpu.synchronize()
        del y
    message = str(info.value)
    assert "out of memory on tpu:0" in message
    assert f"requested {64 * 64 * 4}+ bytes" in message  # the program's output
    assert "available: the plugin reports no free-memory figure" in message  # XLA's CPU plugin
    assert "after evicting" in message and "retrying once" in message
    assert oom()["raised"] == raised + 1
    # Nothing is left broken: the input kept its value and new programs run.
    torch.tpu.synchronize()
    torch.testing.assert_close(x.cpu(), a)
    # XLA's CPU dot sums in another order than ATen's matmul: float32 rounding differs
    torch.testing.assert_close((x @ x).cpu(), a @ a, rtol=1e-4, atol=1e-4)


def test_a_failed_in_place_update_keeps_the_old_value() -> None:
    # add_ donates x's resident buffer to its output; the failed program gives it back.
    a = torch.randn(1000)
    x = a.to("tpu") * 1
    torch.tpu.synchronize()
    _C._pjrt_inject_out_of_memory(executions=2)
    with pytest.raises(torch.OutOfMemoryError, match="out of memory on tpu:0"):
        x.add_(1)  # elementwise on an idle stream: runs inline, raises at the call
        torch.tpu.synchronize()
    torch.testing.assert_close(x.cpu(), a)
    x.add_(1)
    torch.testing.assert_close(x.cpu(), a + 1)


def test_memory_figures_are_the_device_buffers_bytes() -> None:
    base = torch.tpu.memory_allocated()
    host_base = _C._memory_stats(0)["allocated_bytes.all.current"]
    t = torch.empty(MiB, device="tpu")  # host memory from the allocator, nothing on the device yet
    assert _C._memory_stats(0)["allocated_bytes.all.current"] >= host_base + 4 * MiB
    assert torch.tpu.memory_allocated() == base
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base
    t.fill_(2.0)  # a program output: a 4 MiB device buffer
    u = t * 3  # another
    torch.tpu.synchronize()
    grown = torch.tpu.memory_allocated() - base
    assert 8 * MiB <= grown <= 8 * MiB + 4096, grown  # (plus shared scalar operands, a few bytes each)
    assert torch.tpu.max_memory_allocated() >= base + 8 * MiB
    stats = torch.tpu.memory_stats()
    assert stats["pjrt.device_bytes"] == torch.tpu.memory_allocated()
    free, total = torch.tpu.mem_get_info()
    assert free == total - torch.tpu.memory_allocated()  # the CPU plugin reports no limit
    torch.testing.assert_close(u.cpu(), torch.full((MiB,), 6.0))
    del t, u
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() - base <= 4096
    assert torch.tpu.max_memory_allocated() >= base + 8 * MiB


def test_eviction_releases_device_bytes() -> None:
    x = torch.ones(MiB, device="tpu") * 5  # resident
    torch.tpu.synchronize()
    held = torch.tpu.memory_allocated()
    _C._pjrt_inject_out_of_memory(executions=1)
    y = (x + 1).sum()
    torch.tpu.synchronize()
    # x's 4 MiB buffer was evicted (its values now in host memory), the retry ran.
    assert torch.tpu.memory_allocated() <= held - 4 * MiB + 4096
    assert y.item() == 6.0 * MiB
    torch.testing.assert_close(x.cpu(), torch.full((MiB,), 5.0))
