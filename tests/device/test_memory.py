"""The caching device allocator's statistics (OpenReg: test_memory.py)."""

from __future__ import annotations

import pytest
import torch

MiB = 1 << 20


def _settle() -> int:
    torch.tpu.synchronize()
    return torch.tpu.memory_allocated()


def test_memory_allocated_tracks_tensors() -> None:
    base = _settle()
    a = torch.empty(MiB, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_allocated() == base + MiB
    assert torch.tpu.memory_allocated(0) == torch.tpu.memory_allocated("tpu:0")
    b = torch.empty(256, dtype=torch.float32, device="tpu")  # 1 KiB: rounded to 512 B blocks
    assert torch.tpu.memory_allocated() == base + MiB + 1024
    del a
    assert torch.tpu.memory_allocated() == base + 1024
    del b
    assert torch.tpu.memory_allocated() == base


def test_small_allocations_are_rounded() -> None:
    base = _settle()
    x = torch.empty(1, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_allocated() == base + 512
    stats = torch.tpu.memory_stats()
    assert stats["requested_bytes.all.current"] <= stats["allocated_bytes.all.current"]
    del x


def test_zero_size_tensor_allocates_nothing() -> None:
    base = _settle()
    x = torch.empty(0, 5, device="tpu")
    assert x.shape == (0, 5) and x.numel() == 0
    assert torch.tpu.memory_allocated() == base


def test_peak_and_reset() -> None:
    _settle()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() == base
    a = torch.empty(4 * MiB, dtype=torch.uint8, device="tpu")
    del a
    assert torch.tpu.memory_allocated() == base
    assert torch.tpu.max_memory_allocated() == base + 4 * MiB
    assert torch.tpu.max_memory_reserved() >= base + 4 * MiB
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base
    torch.tpu.reset_max_memory_allocated()
    assert torch.tpu.max_memory_allocated() == base


def test_cache_reuse_and_empty_cache() -> None:
    _settle()
    torch.tpu.empty_cache()
    reserved0 = torch.tpu.memory_reserved()
    # Free blocks that empty_cache cannot return: they share a small-block segment with tensors
    # earlier tests keep alive (0 when the suite runs this file alone).
    pinned0 = reserved0 - torch.tpu.memory_allocated()
    a = torch.empty(2 * MiB, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_reserved() == reserved0 + 2 * MiB
    hits = torch.tpu.memory_stats()["num_cache_hits"]
    del a
    # The freed block stays reserved (cached) ...
    assert torch.tpu.memory_reserved() == reserved0 + 2 * MiB
    b = torch.empty(2 * MiB, dtype=torch.uint8, device="tpu")
    # ... and is reused for the same size without reserving more.
    assert torch.tpu.memory_stats()["num_cache_hits"] == hits + 1
    assert torch.tpu.memory_reserved() == reserved0 + 2 * MiB
    del b
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() == reserved0
    assert torch.tpu.memory_reserved() - torch.tpu.memory_allocated() == pinned0
    assert torch.tpu.max_memory_reserved() >= reserved0 + 2 * MiB


def test_changing_sizes_reuse_larger_cached_blocks() -> None:
    # A loop whose sizes change every step (a new sequence length): a freed block up to twice
    # the request's size serves it, so the cache neither maps fresh memory every step nor keeps
    # a block of every size seen. memory_allocated still counts the (rounded) request.
    _settle()
    torch.tpu.empty_cache()
    reserved0 = torch.tpu.memory_reserved()
    hits0 = torch.tpu.memory_stats()["num_cache_hits"]
    lengths = [300 - 7 * i for i in range(30)]  # shrinking: each fits the block before it
    for n in lengths:
        base = torch.tpu.memory_allocated()
        rounded = -(-n * 4096 // (128 << 10)) * (128 << 10) if n * 4096 >= MiB else -(-n * 4096 // 512) * 512
        x = torch.empty(n, 1024, dtype=torch.float32, device="tpu")  # 1.2 MiB down to 0.4 MiB
        allocated = torch.tpu.memory_allocated()
        del x  # before asserting: a failure must not leave the block to the tests after this one
        assert allocated == base + rounded
    assert torch.tpu.memory_stats()["num_cache_hits"] - hits0 >= len(lengths) - 3
    assert torch.tpu.memory_reserved() - reserved0 <= 2 * 300 * 4096
    torch.tpu.empty_cache()


def test_memory_stats_keys_and_counters() -> None:
    _settle()
    torch.tpu.reset_accumulated_memory_stats()
    stats = torch.tpu.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "num_alloc_retries", "num_ooms"):
        assert key in stats, key
    assert stats["allocation.all.allocated"] == 0 and stats["allocation.all.freed"] == 0
    x = torch.empty(100, device="tpu")
    del x
    stats = torch.tpu.memory_stats()
    assert stats["allocation.all.allocated"] == 1 and stats["allocation.all.freed"] == 1
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.tpu.memory_reserved()
    assert list(stats) == sorted(stats)
    y = torch.empty(1024, device="tpu")  # 4 KiB
    summary = torch.tpu.memory_summary()
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in summary.splitlines() if line.count("|") == 5}
    stats = torch.tpu.memory_stats()
    assert lines["Allocated memory"][0] == f"{stats['allocated_bytes.all.current'] / 1024:.2f} KiB", summary
    assert lines["Allocations"] == [str(stats["active.all.current"]), str(stats["allocation.all.allocated"]),
                                    str(stats["allocation.all.freed"])], summary
    assert "device ID 0" in summary and all(len(line) == 77 for line in summary.splitlines()), summary
    del y


def test_mem_get_info() -> None:
    _settle()
    torch.tpu.empty_cache()
    free, total = torch.tpu.mem_get_info()
    assert total == torch.tpu.get_device_properties(0).total_memory
    assert free == total - torch.tpu.memory_reserved()
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="tpu")
    free2, total2 = torch.tpu.mem_get_info()
    assert total2 == total and free2 == free - 8 * MiB
    del x
    torch.tpu.empty_cache()
    assert torch.tpu.mem_get_info() == (free, total)


def test_op_outputs_are_counted_and_freed() -> None:
    base = _settle()
    x = torch.ones(256, 256).to("tpu")  # 256 KiB
    y = x * 2
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() >= base + 2 * 256 * 1024
    assert y[0, 0].item() == 2.0
    del x, y
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == base


def test_program_intermediates_are_recycled() -> None:
    """A program's large intermediates (here the first product, 512 KiB) come from the host
    scratch cache from the second run on, and torch.tpu.empty_cache() releases the cache."""
    import torch_tpu

    torch.manual_seed(0)
    x, w = torch.randn(256, 512), torch.randn(512, 512) / 16
    xt, wt = x.to("tpu"), w.to("tpu")
    want = ((x @ w).relu() @ w).sum()
    with torch_tpu.mode("fused"):
        torch.testing.assert_close(((xt @ wt).relu() @ wt).sum().cpu(), want, rtol=1e-4, atol=1e-3)
        before = torch_tpu.metrics()["host_scratch"]
        for _ in range(3):
            torch.testing.assert_close(((xt @ wt).relu() @ wt).sum().cpu(), want, rtol=1e-4, atol=1e-3)
    after = torch_tpu.metrics()["host_scratch"]
    assert after["hits"] >= before["hits"] + 3
    assert after["misses"] == before["misses"]
    assert after["live_bytes"] == 0 and after["cached_bytes"] >= 512 * 256 * 4
    torch.tpu.empty_cache()
    assert torch_tpu.metrics()["host_scratch"]["cached_bytes"] == 0


def test_per_process_memory_fraction_limits_allocations() -> None:
    _settle()
    capacity = torch.tpu.get_device_properties(0).total_memory
    assert torch.tpu.get_per_process_memory_fraction() == 1.0
    limit_mib = 64
    torch.tpu.set_per_process_memory_fraction(limit_mib * 2**20 / capacity)
    try:
        x = torch.empty(16 * 2**20 // 4, device="tpu")  # 16 MiB fits
        with pytest.raises(torch.tpu.OutOfMemoryError, match="this process may use 64.00 MiB of the device's"):
            torch.empty(128 * 2**20 // 4, device="tpu")
        assert torch.tpu.OutOfMemoryError is torch.OutOfMemoryError
        y = x + 1  # still usable after the error
        assert y.shape == x.shape
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    z = torch.empty(128 * 2**20 // 4, device="tpu")  # the limit is gone
    del x, y, z
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        torch.tpu.set_per_process_memory_fraction(1.5)


def test_cuda_parity_names() -> None:
    x = torch.ones(1000, device="tpu")
    nested = torch.tpu.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == torch.tpu.memory_allocated() > 0
    assert torch.tpu.memory_cached() == torch.tpu.memory_reserved()
    assert torch.tpu.max_memory_cached() == torch.tpu.max_memory_reserved()
    assert torch.tpu.is_current_stream_capturing() is False
    del x
