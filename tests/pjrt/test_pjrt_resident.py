"""Resident buffers on the PJRT runtime: program outputs stay on the device, later programs read
them without an upload, in-place writes donate the buffer they overwrite, and every host access
(copies, .item(), views written on the host, freed and reused memory) sees the right bytes.
Values are compared with PyTorch CPU; the transfer figures come from _C._pjrt_info().
test_pjrt_cpu_plugin.py runs this file on XLA's CPU plugin twice: with resident buffers (the
default) and with TORCH_TPU_PJRT_RESIDENT=0 (every output staged through host memory)."""

from __future__ import annotations

import copy
import io
import os

import pytest
import torch

import torch_tpu
from torch_tpu import _C

pytestmark = pytest.mark.skipif(
    _C._pjrt_info() is None,
    reason="the PJRT runtime is not active (set TORCH_TPU_RUNTIME=pjrt and TORCH_TPU_PJRT_PLUGIN)",
)

RESIDENT = os.environ.get("TORCH_TPU_PJRT_RESIDENT", "1") != "0"


def figures() -> dict[str, int]:
    info = _C._pjrt_info()
    return {**info["transfers"], **{"resident_" + k: v for k, v in info["resident"].items()}}


def delta(before: dict[str, int]) -> dict[str, int]:
    now = figures()
    return {k: now[k] - before[k] for k in now}


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_training_keeps_parameters_and_optimizer_state_on_the_device(mode: str) -> None:
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    model = copy.deepcopy(ref).to("tpu")
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)) for _ in range(4)]
    with torch_tpu.mode(mode):
        _train(model, opt, batches[0][0].to("tpu"), batches[0][1].to("tpu"))  # compiles; state created
        torch.tpu.synchronize()  # (fused mode: the first step's programs run here)
        before = figures()
        for x, y in batches[1:]:
            _train(model, opt, x.to("tpu"), y.to("tpu"))
        torch.tpu.synchronize()
        moved = delta(before)
    for x, y in batches:
        _train(ref, ref_opt, x, y)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5)
    params = sum(p.numel() * 4 for p in ref.parameters())
    if RESIDENT:
        # Each step uploads its batch (32x64 f32 + 32 i64 = 8448 bytes; read by two programs but
        # uploaded once) and the programs' scalar operands; parameters, gradients and AdamW's
        # moments never cross, and nothing is downloaded.
        tensor_bytes = 3 * (32 * 64 * 4 + 32 * 8)
        assert moved["upload_bytes"] < tensor_bytes + 16 * moved["uploads"], moved
        assert moved["upload_bytes"] < params, moved
        assert moved["downloads"] == 0 and moved["resident_syncs"] == 0, moved
        assert moved["resident_donated"] > 0, moved  # optimizer updates write in place
        assert moved["resident_hits"] > 0, moved
    else:
        # Staged: every program uploads what it reads and downloads what it writes.
        assert moved["upload_bytes"] > 3 * params and moved["download_bytes"] > 3 * params, moved
        assert moved["resident_hits"] == 0 and moved["resident_entries"] == 0, moved


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_host_reads_and_writes_through_views_of_resident_tensors(mode: str) -> None:
    a = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    with torch_tpu.mode(mode):
        t = a.to("tpu") * 2 + 1  # resident output
        t[:, 1::3].mul_(-1)  # a strided program output: the rest of t must survive
        t[4].copy_(torch.full((8,), 7.0))  # a host write into part of t
        col = t[:, 2].cpu()  # host read of a strided view
        s = t.sum().item()  # .item() of a program output
        u = t.t() @ torch.ones(6, 3).to("tpu")  # a resident tensor read through a permuted view
        got = (t.cpu(), col, u.cpu())
    ref = a * 2 + 1
    ref[:, 1::3].mul_(-1)
    ref[4] = 7.0
    torch.testing.assert_close(got[0], ref)
    torch.testing.assert_close(got[1], ref[:, 2])
    assert s == pytest.approx(ref.sum().item())
    torch.testing.assert_close(got[2], ref.t() @ torch.ones(6, 3))


def test_permuted_views_of_resident_tensors_are_read_on_the_device() -> None:
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(16, 24, generator=g), torch.randn(16, 5, generator=g)
    x, y = (a.to("tpu") + 0), (b.to("tpu") + 0)  # program outputs
    torch.tpu.synchronize()
    before = figures()
    z = x.t() @ y  # x.t() is a dense permuted view of x's resident buffer
    w = x.unsqueeze(0).permute(2, 0, 1) * 3
    torch.tpu.synchronize()
    moved = delta(before)
    torch.testing.assert_close(z.cpu(), a.t() @ b, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.cpu(), a.unsqueeze(0).permute(2, 0, 1) * 3)
    if RESIDENT:
        assert moved["resident_syncs"] == 0 and moved["resident_hits"] >= 3, moved


def test_slices_and_permuted_destinations_stay_on_the_device() -> None:
    # Attention's pattern: q, k, v are slices (with gaps) of one qkv tensor, heads are split by a
    # transpose, and a program writes into a permuted destination. All of it stays resident.
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 5, 24, generator=g)
    qkv = a.to("tpu") * 1  # a program output
    torch.tpu.synchronize()
    before = figures()
    q, k, v = qkv.split(8, dim=-1)  # views with gaps into qkv's buffer
    heads = (q.reshape(2, 5, 2, 4).transpose(1, 2) + k.reshape(2, 5, 2, 4).transpose(1, 2)) * v.sum()
    dest = torch.empty(2, 2, 5, 4, device="tpu").transpose(1, 2)  # dense, permuted
    torch.mul(heads.transpose(1, 2), 2, out=dest)
    out = dest.sum(-1) + 0
    torch.tpu.synchronize()
    moved = delta(before)
    aq, ak, av = a.split(8, dim=-1)
    ref_heads = (aq.reshape(2, 5, 2, 4).transpose(1, 2) + ak.reshape(2, 5, 2, 4).transpose(1, 2)) * av.sum()
    torch.testing.assert_close(heads.cpu(), ref_heads, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dest.cpu(), ref_heads.transpose(1, 2) * 2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.cpu(), (ref_heads.transpose(1, 2) * 2).sum(-1), rtol=1e-5, atol=1e-5)
    if RESIDENT:
        assert moved["resident_syncs"] == 0 and moved["downloads"] == 0, moved
        assert moved["upload_bytes"] < 64 * max(moved["uploads"], 1), moved  # scalars at most


def test_writes_into_slices_of_resident_tensors_stay_on_the_device() -> None:
    # A KV-cache update: cache[:, pos] = k writes a view with gaps; the program scatters k into
    # the cache's device buffer (donated), so nothing comes back to the host, and every position
    # shares one executable (the offset is an argument).
    g = torch.Generator().manual_seed(5)
    ks = torch.randn(6, 2, 3, generator=g)
    cache = torch.zeros(2, 6, 3).to("tpu") + 0  # a program output
    k_tpu = ks.to("tpu") + 0
    torch.tpu.synchronize()
    before = figures()
    for pos in range(6):
        cache[:, pos].copy_(k_tpu[pos])
    cache[:, ::2].mul_(-1)  # an in-place op through a strided view
    torch.tpu.synchronize()
    moved = delta(before)
    ref = ks.transpose(0, 1).clone()
    ref[:, ::2] *= -1
    torch.testing.assert_close(cache.cpu(), ref)
    if RESIDENT:
        assert moved["resident_syncs"] == 0 and moved["downloads"] == 0, moved
        assert moved["resident_donated"] >= 6, moved


def test_rows_of_a_resident_tensor_share_one_executable() -> None:
    # x[i] lies inside x's buffer at a different offset for each i: the offset is an argument of
    # the gathering variant, so a loop over rows compiles once, not once per row.
    a = torch.randn(24, 16, generator=torch.Generator().manual_seed(4))
    x = a.to("tpu") * 1
    torch.tpu.synchronize()
    compiles = _C._pjrt_info()["compiles"] + _C._pjrt_info()["executable_cache"]["hits"]
    before = figures()
    rows = [x[i] * 3 for i in range(24)]
    torch.tpu.synchronize()
    moved = delta(before)
    info = _C._pjrt_info()
    for i, r in enumerate(rows):
        torch.testing.assert_close(r.cpu(), a[i] * 3)
    assert info["compiles"] + info["executable_cache"]["hits"] - compiles <= 2, info
    if RESIDENT:  # every row is read from x's device buffer
        assert moved["resident_syncs"] == 0 and moved["resident_hits"] >= 24, moved


def test_freed_memory_never_serves_stale_device_copies() -> None:
    # Freed blocks return to the caching allocator and back to new tensors at the same address:
    # freeing a tensor drops its device copy (unread), so nothing of it can stand for the new one.
    reused = 0
    for i in range(6):
        torch.tpu.synchronize()
        before = figures()
        t = torch.full((256,), float(i)).to("tpu") * 2  # resident output
        addr = t.data_ptr()
        torch.tpu.synchronize()
        del t
        torch.tpu.synchronize()
        moved = delta(before)
        if RESIDENT:
            assert moved["resident_entries"] == 0 and moved["resident_dropped_unread"] == 1, moved
        fresh = torch.full((256,), -float(i)).to("tpu")  # host write into a recycled block
        reused += fresh.data_ptr() == addr
        assert torch.equal((fresh + 0).cpu(), torch.full((256,), -float(i))), (i, addr, fresh.data_ptr())
    assert reused > 0  # the caching allocator handed a freed block back (what this test is about)


def test_storage_copies_resize_and_serialization_see_device_values() -> None:
    t = torch.arange(10, dtype=torch.float32).to("tpu") * 3  # resident output
    clone = t.untyped_storage().clone()  # a device-to-device storage copy (allocator copy_data)
    buf = io.BytesIO()
    torch.save({"t": t}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="cpu")["t"]
    expected = torch.arange(10, dtype=torch.float32) * 3
    torch.testing.assert_close(loaded, expected)
    torch.testing.assert_close(torch.empty(0, device="tpu").set_(clone).cpu(), expected)
    t.resize_(20)  # keeps the first 10 values (a host copy of the old bytes)
    torch.testing.assert_close(t[:10].cpu(), expected)


def test_memory_stats_report_resident_bytes() -> None:
    torch.tpu.synchronize()
    before = torch.tpu.memory_stats()["pjrt.resident_bytes"]
    t = torch.ones(1000).to("tpu") * 2  # a 4000-byte output kept on the device (when resident)
    torch.tpu.synchronize()
    grown = torch.tpu.memory_stats()["pjrt.resident_bytes"] - before
    if RESIDENT:
        assert grown >= 4000, grown
    else:
        assert grown == 0, grown
    assert torch.equal(t.cpu(), torch.full((1000,), 2.0))


def test_padded_inputs_are_bound_without_a_program_per_length() -> None:
    """A padded program's input shorter than its bucket is copied padded on the host side of
    the device (compile/padded_buckets.py): on PJRT a device program per length would be an XLA
    compile per length."""
    from torch_tpu.compile import padded_buckets

    x = torch.arange(10, device="tpu").reshape(2, 5) * 3
    torch.tpu.synchronize()
    info = _C._pjrt_info()
    before = info["compiles"] + info["executable_cache"]["hits"]
    for n in (16, 17, 24, 40):
        bound = padded_buckets._bind(x, n)
        assert bound.cpu().tolist() == [3 * i for i in range(10)] + [0] * (n - 10)
    info = _C._pjrt_info()
    assert info["compiles"] + info["executable_cache"]["hits"] == before


def test_zeros_of_new_shapes_compile_no_program() -> None:
    # torch.zeros (and the zero gradients autograd makes for unused outputs, at every new length
    # of a variable-length loop) is written on the host mirror, not a fill program per shape.
    before = _C._pjrt_info()["compiles"]
    zs = [torch.zeros(2, n, 8, device="tpu") for n in (3, 5, 7)]
    assert _C._pjrt_info()["compiles"] == before
    for z in zs:
        torch.testing.assert_close(z.cpu(), torch.zeros(z.shape))
    # Read by a program after a resident value was written over it, and zeroed again.
    x = torch.randn(4, 6)
    t = x.to("tpu") + 1
    torch.testing.assert_close((t + torch.zeros(4, 6, device="tpu")).cpu(), x + 1)
    t.zero_()  # referenced elsewhere (the test holds it): the lowering path
    torch.testing.assert_close(t.cpu(), torch.zeros(4, 6))
    with torch_tpu.mode("fused"):  # recorded into the fused graph, as before
        u = torch.zeros(3, 3, device="tpu") + 2
    torch.testing.assert_close(u.cpu(), torch.full((3, 3), 2.0))
    # Past 4 MiB, a shape's first zeros are written on the host too; a shape met again gets the
    # fill program (compiled once), not an upload every time.
    def programs() -> int:  # executables compiled or loaded from the disk cache
        info = _C._pjrt_info()
        return info["compiles"] + info["executable_cache"]["hits"]

    before = programs()
    big = [torch.zeros(2, n, 1024, device="tpu") for n in (600, 601)]
    assert programs() == before
    again = [torch.zeros(2, 600, 1024, device="tpu") for _ in range(3)]
    assert programs() == before + 1
    for z in big + again:
        assert z.shape[2] == 1024 and not z.cpu().any()


def test_growing_a_resident_tensor_keeps_its_device_values() -> None:
    # resize_ moves the memory by copying its host bytes: the device's newer ones come back first.
    a = torch.arange(4.0).to("tpu")
    a.add_(1)  # a program output: its latest bytes live on the device
    a.resize_(8)
    a[4:] = 9.0
    torch.testing.assert_close(a.cpu(), torch.tensor([1.0, 2.0, 3.0, 4.0, 9.0, 9.0, 9.0, 9.0]))
