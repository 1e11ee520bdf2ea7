"""`index_put_` / `index_copy_` into a tensor that is their own destination (a KV cache written
in place): the host runtime writes only the indexed elements (csrc/runtime/host/host_plan.cpp,
plan_in_place_scatters). Values against CPU, with duplicate indices, accumulate on and off,
views of the destination read afterwards, and in strict and fused mode."""

from __future__ import annotations

import pytest
import torch

import torch_tpu

DEV = "tpu"
MODES = ("strict", "fused")


def _scratch_requests() -> int:
    s = torch_tpu.metrics()["host_scratch"]
    return s["hits"] + s["misses"]


def _cache_and_rows(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A vLLM-shaped layer cache `[blocks, kv_heads, block_size, 2 * head_size]` (1 MiB) and
    values for 6 rows of its `[rows, head_size]` view."""
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(64, 4, 16, 64, generator=g)
    vals = torch.randn(2, 3, 32, generator=g)
    return cache, vals


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_into_the_cache_rows(mode: str, accumulate: bool) -> None:
    cache, vals = _cache_and_rows()
    rows = torch.tensor([[3, 900, 4095], [17, 2048, 0]])
    want = cache.clone().view(-1, 32).index_put_((rows,), vals, accumulate=accumulate).view_as(cache)
    with torch_tpu.mode(mode):
        dc = cache.to(DEV)
        dc.view(-1, 32).index_put_((rows.to(DEV),), vals.to(DEV), accumulate=accumulate)
        got = dc.cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_duplicate_indices_keep_index_put_semantics(mode: str) -> None:
    cache, vals = _cache_and_rows(1)
    rows = torch.tensor([[5, 9, 5], [7, 5, 9]])
    # accumulate=True: every duplicate adds.
    want = cache.clone().view(-1, 32).index_put_((rows,), vals, accumulate=True).view_as(cache)
    with torch_tpu.mode(mode):
        dc = cache.to(DEV)
        dc.view(-1, 32).index_put_((rows.to(DEV),), vals.to(DEV), accumulate=True)
        torch.testing.assert_close(dc.cpu(), want)
    # accumulate=False: one of the written rows wins (CPU leaves which unspecified); every other
    # row is untouched or written once.
    with torch_tpu.mode(mode):
        dc = cache.to(DEV)
        dc.view(-1, 32).index_put_((rows.to(DEV),), vals.to(DEV))
        got = dc.cpu().view(-1, 32)
    flat_rows, flat_vals = rows.flatten(), vals.reshape(-1, 32)
    for r in (5, 9):
        candidates = flat_vals[flat_rows == r]
        assert any(torch.equal(got[r], c) for c in candidates), f"row {r} is none of its writes"
    assert torch.equal(got[7], flat_vals[flat_rows == 7][0])
    untouched = torch.ones(got.shape[0], dtype=torch.bool)
    untouched[flat_rows] = False
    assert torch.equal(got[untouched], cache.view(-1, 32)[untouched])


@pytest.mark.parametrize("mode", MODES)
def test_views_of_the_destination_see_the_writes(mode: str) -> None:
    cache, vals = _cache_and_rows(2)
    rows = torch.tensor([[0, 1, 2], [64, 65, 66]])
    want = cache.clone().view(-1, 32).index_put_((rows,), vals).view_as(cache)
    with torch_tpu.mode(mode):
        dc = cache.to(DEV)
        block0 = dc[0]  # views taken before the write
        keys = dc.view(64, 4, 2, 16, 32)[:, :, 0]
        old = dc[0].clone()  # a copy taken before stays old
        dc.view(-1, 32).index_put_((rows.to(DEV),), vals.to(DEV))
        doubled = block0 * 2  # a later reader of the written memory
        torch.testing.assert_close(block0.cpu(), want[0], rtol=0, atol=0)
        torch.testing.assert_close(keys.cpu(), want.view(64, 4, 2, 16, 32)[:, :, 0], rtol=0, atol=0)
        torch.testing.assert_close(doubled.cpu(), want[0] * 2, rtol=0, atol=0)
        torch.testing.assert_close(old.cpu(), cache[0], rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_a_read_of_the_old_value_before_the_write(mode: str) -> None:
    # Fused mode puts both ops in one graph: the scatter may not overwrite what `before` reads.
    cache, vals = _cache_and_rows(3)
    rows = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with torch_tpu.mode(mode):
        dc = cache.to(DEV)
        before = dc.view(-1, 32)[:8] + 1
        dc.view(-1, 32).index_put_((rows.to(DEV),), vals.to(DEV))
        torch.testing.assert_close(before.cpu(), cache.view(-1, 32)[:8] + 1, rtol=0, atol=0)
        torch.testing.assert_close(dc.cpu(), cache.clone().view(-1, 32).index_put_((rows,), vals).view_as(cache))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dim", [0, 1])
def test_index_copy_in_place(mode: str, dim: int) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(40, 24, generator=g)
    index = torch.tensor([3, 0, 3, 11]) if dim == 0 else torch.tensor([23, 1, 7, 1])
    src = torch.randn(4, 24, generator=g) if dim == 0 else torch.randn(40, 4, generator=g)
    # Duplicates: make both writes equal so the result is defined.
    src.select(dim, 2).copy_(src.select(dim, 0 if dim == 0 else 1))
    if dim == 1:
        src.select(1, 3).copy_(src.select(1, 1))
    want = x.clone().index_copy_(dim, index, src)
    with torch_tpu.mode(mode):
        dx = x.to(DEV)
        dx.index_copy_(dim, index.to(DEV), src.to(DEV))
        torch.testing.assert_close(dx.cpu(), want, rtol=0, atol=0)


def test_a_strided_destination() -> None:
    # A column slice: the rows view of it is no view of its memory, so the scatter takes the
    # general path; the values are the same.
    g = torch.Generator().manual_seed(5)
    base = torch.randn(16, 8, 6, generator=g)
    vals = torch.randn(3, 6, generator=g)
    idx = torch.tensor([2, 15, 2])
    vals[2] = vals[0]
    want = base.clone()
    want[:, 3].index_put_((idx,), vals)
    d = base.to(DEV)
    d[:, 3].index_put_((idx.to(DEV),), vals.to(DEV))
    torch.testing.assert_close(d.cpu(), want, rtol=0, atol=0)


def test_the_cache_is_not_copied_aside() -> None:
    # Before, a 1 MiB cache was scattered into scratch memory and copied back on every call.
    cache, vals = _cache_and_rows(6)
    rows = torch.tensor([[3, 900, 4095], [17, 2048, 0]])
    with torch_tpu.mode("strict"):
        dc = cache.to(DEV)
        drows, dvals = rows.to(DEV), vals.to(DEV)
        dc.view(-1, 32).index_put_((drows,), dvals)  # compiled here
        torch.tpu.synchronize()
        before, m0 = _scratch_requests(), torch_tpu.metrics()
        for _ in range(3):
            dc.view(-1, 32).index_put_((drows,), dvals)
        torch.tpu.synchronize()
        m1 = torch_tpu.metrics()
        assert m1["programs_executed"] - m0["programs_executed"] == 3
        assert _scratch_requests() == before, "the scatter took scratch memory for the whole cache"
    torch.testing.assert_close(dc.cpu(), cache.clone().view(-1, 32).index_put_((rows,), vals).view_as(cache))
