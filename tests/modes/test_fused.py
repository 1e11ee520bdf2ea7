"""Fused mode (DeferAndFuse): deferred graphs keep every eager semantic of strict mode.

Each test runs ordinary eager code in fused mode and compares values with CPU (or with strict
mode), and checks through torch_tpu.metrics() that the work really was deferred and fused.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import torch_tpu


@pytest.fixture(autouse=True)
def fused_mode():
    with torch_tpu.mode("fused"):
        torch_tpu.sync()
        torch_tpu.reset_metrics()
        yield


def fused() -> dict:
    return torch_tpu.metrics()["fused"]


def test_ops_are_deferred_until_a_host_read():
    x = torch.randn(64, 32)
    t = x.to("tpu")
    y = ((t * 2 + 1).relu() - t).exp()
    assert fused()["flushes"] == 0 and fused()["ops_recorded"] >= 4
    torch.testing.assert_close(y.cpu(), ((x * 2 + 1).relu() - x).exp())
    m = fused()
    assert m["flushes_by_cause"] == {"host_read": 1}
    assert m["ops_fused"] == m["ops_recorded"]
    assert m["host_read_flush_lines"][0][0].endswith(f"{os.path.basename(__file__)}:{_line_of('y.cpu()')}")


def test_ops_resizing_a_fresh_out_tensor_do_not_flush():
    # ATen's arange (positions in a transformer's forward) and functional ops with `out=` resize
    # an empty tensor: no memory to move, so no wait for the device and no cut in the graph.
    x = torch.randn(8, 5)
    t = x.to("tpu") * 2
    pos = torch.arange(5, device="tpu")
    out = torch.empty(0, device="tpu")
    torch.mul(t, 3, out=out)
    y = out + pos
    assert fused()["flushes"] == 0
    torch.testing.assert_close(y.cpu(), x * 6 + torch.arange(5))
    assert fused()["flushes_by_cause"] == {"host_read": 1}


def _line_of(snippet: str) -> int:
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if snippet in line and "_line_of" not in line:
                return i
    raise AssertionError(snippet)


def test_dead_intermediates_are_not_materialized():
    x = torch.randn(256, 256, device="tpu")
    a = x * 2
    b = a + 1
    del a  # dead before the flush: never written to memory
    c = b.sigmoid()
    del b
    got = c.cpu()
    torch.testing.assert_close(got, (x.cpu() * 2 + 1).sigmoid())
    m = fused()
    assert m["stores_skipped"] == 2
    assert m["bytes_not_materialized"] == 2 * 256 * 256 * 4


def test_in_place_chain_writes_memory_once():
    p = torch.randn(1000, device="tpu")
    ref = p.cpu()
    for _ in range(5):
        p.mul_(0.5).add_(1)
        ref.mul_(0.5).add_(1)
    torch.testing.assert_close(p.cpu(), ref)
    assert fused()["stores_skipped"] == 9  # all but the last of the 10 writes of p


def test_views_read_pending_values_without_flushing():
    x = torch.randn(2, 6, 8)
    t = x.to("tpu")
    y = t * 3
    q, k, v = y.split(2, dim=1)  # strided views of a pending value
    z = (q.transpose(1, 2) @ k + v.sum()).flatten()
    e = y[:, 1, ::2].expand(4, 2, 4) * 1.0
    assert fused()["flushes"] == 0
    yc = x * 3
    qc, kc, vc = yc.split(2, dim=1)
    torch.testing.assert_close(z.cpu(), (qc.transpose(1, 2) @ kc + vc.sum()).flatten())
    torch.testing.assert_close(e.cpu(), yc[:, 1, ::2].expand(4, 2, 4))
    assert "view_read" not in fused()["flushes_by_cause"]


def test_views_of_values_stored_in_a_transposed_layout_read_without_flushing():
    # A result keeps its operand's layout (ATen's elementwise ops): a transposed operand makes
    # a value stored column by column, which attention's backward then reads through views.
    x = torch.randn(4, 6, 8)
    t = x.to("tpu")
    y = t.transpose(1, 2) * 2  # [4, 8, 6] stored as [4, 6, 8]
    assert y.stride() == (48, 1, 8)
    a = y.transpose(1, 2) @ torch.ones(8, 3, device="tpu")  # reads the memory's own order
    b = y[:, 2:5, 1::2].reshape(4, 9) + 1  # strided read of the same memory
    c = y.permute(2, 0, 1).sum(0)  # another order still
    assert fused()["flushes"] == 0
    yc = x.transpose(1, 2) * 2
    torch.testing.assert_close(a.cpu(), yc.transpose(1, 2) @ torch.ones(8, 3))
    torch.testing.assert_close(b.cpu(), yc[:, 2:5, 1::2].reshape(4, 9) + 1)
    torch.testing.assert_close(c.cpu(), yc.permute(2, 0, 1).sum(0))
    assert "view_read" not in fused()["flushes_by_cause"]


def test_in_place_through_views_across_flushes():
    base = torch.zeros(4, 5, device="tpu")
    ref = torch.zeros(4, 5)
    row, col = base[1], base[:, 2]
    row.add_(3)
    ref[1].add_(3)
    col.mul_(2).add_(1)
    ref[:, 2].mul_(2).add_(1)
    assert base[1, 2].item() == ref[1, 2].item()  # a host read of an alias flushes its writers
    base.t()[0].sub_(7)
    ref.t()[0].sub_(7)
    out = base * 2
    torch.testing.assert_close(out.cpu(), ref * 2)
    torch.testing.assert_close(row.cpu(), ref[1])


def test_write_after_read_keeps_the_old_value():
    x = torch.randn(8, 8)
    t = x.to("tpu")
    tt = t.t()           # a view of memory that is overwritten below
    y = tt * 1.0         # reads t before the write ...
    t.add_(100)          # ... which this overwrites
    z = y + tt           # and this reads t after the write
    torch.testing.assert_close(z.cpu(), x.t() + (x + 100).t())
    torch.testing.assert_close(t.cpu(), x + 100)


@pytest.mark.parametrize("value", [0.0, 1.0, 5.0])
def test_constant_writes_into_part_of_a_pending_value_land_in_program_order(value: float):
    # A constant store (0 and 1 are baked into the program; the runtime computes such values
    # once) is written at its op's position: after the op computing the base and after the
    # earlier reads of its memory, never when the graph starts.
    got, want = [], []
    for device, out in (("tpu", got), ("cpu", want)):
        y = torch.arange(6.0, device=device) * 2
        y[2:] = value
        m = torch.arange(6.0, device=device).view(2, 3) * 2
        m[:, 0].fill_(value)
        b = torch.arange(6, device=device) > -1
        b[1:] = bool(value)
        c = torch.arange(6.0, device=device) * 2
        c[1:].copy_(torch.full((5,), value, device=device))
        ones = torch.ones(4, device=device)
        ones.sum()  # a flush boundary on tpu: `ones` is memory, not a pending value
        if device == "tpu":
            torch.tpu.synchronize()
        before = ones * 2  # reads the memory before the write below
        ones[1:].fill_(value)
        out.extend(t.cpu() for t in (y, y.sum(), m, b, c, before, ones))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_a_kernel_reading_several_values_of_one_cluster_pulls_each_node_ahead_once():
    # cat reads four members of one open cluster; the product after it was pulled into that
    # cluster once per member read, and the duplicated member corrupted the heap.
    x = torch.randn(3, 6)
    got = []
    for _ in range(3):  # compiled once, then from the cache
        xt = x.to("tpu")
        a, b, c, e = xt.sin(), xt.cos(), xt.tanh(), xt.sigmoid()
        cat = torch.cat([a, b, c, e], 1)
        d = (a * b).exp()
        got.append((cat.sum(1, keepdim=True) * d).cpu())
    want = torch.cat([x.sin(), x.cos(), x.tanh(), x.sigmoid()], 1).sum(1, keepdim=True) * (x.sin() * x.cos()).exp()
    for g in got:
        torch.testing.assert_close(g, want)


def test_a_write_waits_for_clusters_reading_its_memory_through_another_shape():
    # y's cluster ([64]) reads base's memory; the in-place write through an [8, 8] view runs in
    # another cluster, which the product then closes (runs) first. The executor keeps clusters
    # of other memory open across a write, but this one reads the memory written: it must run
    # before the write, so y is computed from the old values.
    x = torch.randn(64)
    base = x.to("tpu")
    torch_tpu.sync()
    y = base * 2
    w = base.view(8, 8).mul_(3)
    m = w @ w
    torch.testing.assert_close(y.cpu(), x * 2)
    torch.testing.assert_close(base.cpu(), x * 3)
    torch.testing.assert_close(m.cpu(), (x * 3).view(8, 8) @ (x * 3).view(8, 8))


def test_optimizer_chains_fuse_across_foreach_ops():
    # AdamW's update of each parameter is ~10 foreach ops; every op writes all parameters. The
    # executor closes only clusters that touch the memory being written, so each parameter's
    # chain (and the chains of parameters of one shape) runs as one cluster, not one per op.
    torch.manual_seed(0)
    ref = [torch.randn(64, 32) for _ in range(3)] + [torch.randn(16), torch.randn(8, 8), torch.randn(32)]
    grads = [torch.randn_like(t) for t in ref]
    params = [t.to("tpu").requires_grad_() for t in ref]
    cpu_params = [t.clone().requires_grad_() for t in ref]
    for ps in (params, cpu_params):
        for p, g in zip(ps, grads):
            p.grad = g.to(p.device)
    opt, cpu_opt = torch.optim.AdamW(params, lr=0.1), torch.optim.AdamW(cpu_params, lr=0.1)
    opt.step()
    cpu_opt.step()
    torch_tpu.sync()
    torch_tpu.reset_metrics()
    opt.step()
    cpu_opt.step()
    torch_tpu.sync()
    # Four shapes: one kernel each (the per-parameter scalars are computed inside them). With
    # every write closing every other open cluster, the 8 foreach ops took 19.
    assert fused()["kernels_launched"] <= 4, fused()
    for p, c in zip(params, cpu_params):
        torch.testing.assert_close(p.detach().cpu(), c.detach())


def test_copy_from_host_into_pending_tensor_is_ordered():
    t = torch.zeros(3, device="tpu")
    u = t + 1
    u.copy_(torch.tensor([7.0, 8.0, 9.0]))  # host->device write after a pending write of u
    torch.testing.assert_close(u.cpu(), torch.tensor([7.0, 8.0, 9.0]))
    assert fused()["flushes_by_cause"].get("copy", 0) == 1


def test_repeated_steps_hit_the_graph_cache():
    def train(device: str) -> tuple[list[float], list[int], list[torch.Tensor]]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x = torch.randn(8, 16).to(device)
        losses, compiled = [], []
        for _ in range(5):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            compiled.append(fused()["graphs_compiled"])
        return losses, compiled, [p.detach().cpu() for p in model.parameters()]

    losses, compiled, params = train("tpu")
    ref_losses, _, ref_params = train("cpu")
    # The first steps differ (AdamW creates its state); from then on every step reuses the
    # graphs it compiled and nothing new is compiled.
    assert compiled[2] == compiled[4], compiled
    assert fused()["graph_cache_hits"] >= 2
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses))
    for got, ref in zip(params, ref_params):
        torch.testing.assert_close(got, ref)


def test_modes_can_be_switched_between_steps():
    x = torch.randn(10, device="tpu")
    y = x * 2
    torch_tpu.set_mode("strict")  # flushes
    assert fused()["flushes_by_cause"] == {"mode_switch": 1}
    z = y + 1
    torch_tpu.set_mode("fused")
    w = z * y
    torch.testing.assert_close(w.cpu(), (x.cpu() * 2 + 1) * (x.cpu() * 2))


def test_switching_modes_queues_pending_work_without_waiting():
    # `with torch_tpu.mode("fused"):` around each step switches twice per step: a wait there
    # would make the host wait for the device every step.
    x = torch.randn(1024, 1024, device="tpu") / 32
    for _ in range(8):  # ~0.1 s or more of products, pending
        x = x @ x
    with torch_tpu.mode("strict"):
        assert not torch.tpu.current_stream().query(), "the switch waited for the device"
        y = x + 1  # queued behind the flushed graph
    with torch_tpu.mode("debug"):  # runs on the calling thread: finds the queue drained
        assert torch.tpu.current_stream().query()
        z = y * 2
    torch.testing.assert_close(z.cpu(), (x.cpu() + 1) * 2)


def test_rng_matches_strict():
    def draw() -> list[torch.Tensor]:
        torch.manual_seed(7)
        a = torch.rand(5, device="tpu")
        b = torch.nn.functional.dropout(torch.ones(6, device="tpu"), 0.5)
        c = torch.randn(3, 3, device="tpu")
        return [a.cpu(), b.cpu(), c.cpu()]

    got = draw()
    with torch_tpu.mode("strict"):
        ref = draw()
    for g, r in zip(got, ref):
        assert torch.equal(g, r)


def test_row_sums_fuse_and_match_strict_bit_for_bit():
    """A sum over trailing dims fuses with its prologue (a row cluster) and still gives strict
    mode's bits: the cluster and strict mode's single-op sum kernel add in one order
    (tile_cluster.h, row_sums), wherever cluster boundaries fall. The prologues are exact arithmetic
    (a transcendental in a cluster may differ from ATen's kernel in the last bit, sums or not)."""
    F = torch.nn.functional
    x, w, y = torch.randn(37, 201), torch.randn(201), torch.arange(37) * 5
    cases = [
        lambda t, tw, ty: (t * tw + t).sum(-1),
        lambda t, tw, ty: (t * t).mean(),
        lambda t, tw, ty: (t * tw).var(-1),
        lambda t, tw, ty: torch.softmax(t * 3, -1),
        lambda t, tw, ty: torch.log_softmax(t - 1, -1),
        lambda t, tw, ty: F.layer_norm(t + 1, (201,)),
        lambda t, tw, ty: F.cross_entropy(t * 2, ty),
    ]

    def compute() -> list[torch.Tensor]:
        return [f(x.to("tpu"), w.to("tpu"), y.to("tpu")).cpu() for f in cases]

    got = compute()
    with torch_tpu.mode("strict"):
        ref = compute()
    for k, (g, r) in enumerate(zip(got, ref)):
        assert torch.equal(g, r), f"case {k}"
        torch.testing.assert_close(g, cases[k](x, w, y))
    # The prologue (broadcast, mul, add) and the sum run as one kernel.
    torch_tpu.reset_metrics()
    cases[0](x.to("tpu"), w.to("tpu"), y).cpu()
    assert fused()["kernels_launched"] == 1


@pytest.mark.parametrize("channels_last", [False, True])
def test_convolution_chains_inside_a_graph_match_cpu(channels_last: bool):
    """An inference pass of a small ResNet with its graph deferred: inside the graph the host
    runtime runs the convolutions channels-last and the batch norm / ReLU / residual clusters
    walk that layout (kernels_contract.cpp, tile_cluster.h "Layout"). Inputs and parameters in
    either layout; the values the user sees are PyTorch's."""
    from torch_tpu.models import SmallResNet

    torch.manual_seed(0)
    model = SmallResNet(width=8).eval()
    x = torch.randn(3, 3, 16, 16)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model, x = model.to(memory_format=fmt), x.contiguous(memory_format=fmt)
    with torch.no_grad():
        want = model(x)
        dev = copy.deepcopy(model).to("tpu")
        stem = dev.stem(x.to("tpu"))
        got = dev(x.to("tpu"))
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(stem.cpu(), model.stem(x))
    assert fused()["graph_cache_hits"] + fused()["graphs_compiled"] >= 1


@pytest.mark.parametrize("shape", [(32, 3, 64, 64), (100_003,), (8193,), (3, 5000)])
def test_total_sums_fuse_and_match_strict_bit_for_bit(shape):
    """A sum over every dim longer than a row ends the cluster that computes its operand: the
    operand is never stored, and the sum adds in total_sum's order (tile_cluster.h), which strict
    mode's single-op sum kernel uses too, so the bits are strict mode's, across tiles, blocks
    and threads. Against a float64 sum: float32 rounding of the summation."""
    x = torch.randn(*shape)

    def compute() -> list[torch.Tensor]:
        t = x.to("tpu")
        return [(t * 3 - 1).sum().cpu(), t.sum().cpu(), t.t().sum().cpu() if t.dim() == 2 else t.abs().sum().cpu()]

    got = compute()
    with torch_tpu.mode("strict"):
        ref = compute()
    exact = [(x * 3 - 1).double().sum(), x.double().sum(), x.double().sum() if x.dim() == 2 else x.double().abs().sum()]
    for k, (g, r, e) in enumerate(zip(got, ref, exact)):
        assert torch.equal(g, r), f"case {k}: fused {g.item()} strict {r.item()}"
        torch.testing.assert_close(g.double(), e, rtol=1e-5, atol=1e-3)
    # The prologue and the sum are one kernel (not a cluster storing the product, then a sum).
    t = x.to("tpu")
    torch_tpu.sync()
    torch_tpu.reset_metrics()
    (t * 3 - 1).sum().cpu()
    assert fused()["kernels_launched"] == 1


@pytest.mark.parametrize("shape", [(8, 16, 32, 32), (3, 5, 7, 9), (2, 24, 8, 8), (1, 7, 40, 40), (600, 3, 4, 4)])
def test_column_sums_fuse_and_match_strict_bit_for_bit(shape: tuple[int, ...]):
    """A sum over the dims around a kept range (batch norm's per-channel sums, a bias gradient)
    ends the cluster computing its operand, and adds in column_sums' order (column_sums.h)
    wherever it runs: in the cluster's tiles (a channels-last walk keeping channels, a
    row-major walk keeping trailing dims), after them from the stored member or a scratch copy
    (an NCHW walk), or in strict mode's sum kernel over NCHW runs, [rows, C] memory or a
    strided value. So every layout, both modes, gives the same bits. Several blocks of 256
    rows and threads (the largest), runs of a length that is not a multiple of 8 (7 x 9), one
    image."""
    torch.manual_seed(0)
    x = torch.randn(shape) * 3
    layouts = {
        "nchw": x,
        "channels_last": x.contiguous(memory_format=torch.channels_last),
        "strided": x.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3),
    }
    cases = [
        lambda t: (t * 0.5 - 1).sum([0, 2, 3]),
        lambda t: t.sum([0, 2, 3]),
        lambda t: (t * t).flatten(0, 2).sum(0),  # a bias gradient's shape: keeps the trailing dim
        lambda t: t.relu().sum([0, 1]),
        # The summed member is stored too (read outside the cluster): summed from there.
        lambda t: (lambda u: torch.cat([u.sum([0, 2, 3]), u.flatten()[:7]]))(t - 0.25),
    ]
    results = {}
    for name, v in layouts.items():
        t = v.to("tpu")
        assert t.stride() == v.stride()
        results[f"fused {name}"] = [f(t).cpu() for f in cases]
        with torch_tpu.mode("strict"):
            results[f"strict {name}"] = [f(t).cpu() for f in cases]
    ref = results["strict nchw"]
    for name, got in results.items():
        for k, (g, r) in enumerate(zip(got, ref)):
            assert torch.equal(g, r), f"{name}, case {k}: differs from strict mode on NCHW memory"
    for k, f in enumerate(cases):  # float32 summation order against a float64 sum
        torch.testing.assert_close(ref[k].double(), f(x.double()), rtol=1e-5, atol=1e-4)
    # The prologue and the per-channel sum are one kernel; the operand is never stored.
    t = layouts["channels_last"].to("tpu")
    torch_tpu.sync()
    torch_tpu.reset_metrics()
    cases[0](t).cpu()
    assert fused()["kernels_launched"] == 1
    assert fused()["stores_skipped"] >= 2


@pytest.mark.parametrize("shape", [(300_001,), (1,), ()])
def test_scalar_operands_are_computed_once_and_exact(shape: tuple[int, ...]):
    """Instructions that read only scalars (Python numbers, one-element tensors) run once per
    thread before the tiles (tile_cluster.h, Instr::invariant); pow with a scalar exponent of 2, 0.5 or
    -0.5 is x*x, sqrt and 1/sqrt as in ATen's kernel. Several tiles and threads, and clusters of
    one element (where every operand is one element); every case's bits match CPU and strict
    mode (the ops are exactly rounded)."""
    torch.manual_seed(0)
    x = torch.rand(shape) + 0.5
    s = torch.tensor(1.75)
    cases = [
        lambda t, ts: t.pow(2) * 3 - t,
        lambda t, ts: (t - 0.25) * (1.0 / 3.0) + 2.0,
        lambda t, ts: t * ts + (ts * 2 + 1),
        lambda t, ts: torch.where(t > ts - 1, t.square(), (ts + 0.5) * t),
        lambda t, ts: (t + ts).pow(2).clamp(0.5, 4.0) / (ts * ts),
    ]

    def compute() -> list[torch.Tensor]:
        return [f(x.to("tpu"), s.to("tpu")).cpu() for f in cases]

    got = compute()
    with torch_tpu.mode("strict"):
        ref = compute()
    for k, (g, r) in enumerate(zip(got, ref)):
        assert torch.equal(g, r), f"case {k}: fused and strict differ"
        assert torch.equal(g, cases[k](x, s)), f"case {k}: differs from CPU"
    # x^0.5 is a correctly rounded sqrt and x^-0.5 its reciprocal; ATen's are not always (MKL's
    # vsSqrt; a 0-d tensor takes a scalar pow), so within an ulp. A general exponent keeps pow
    # (1 ulp, as ATen's).
    for e in (0.5, -0.5, 1.5):
        torch.testing.assert_close(x.to("tpu").pow(e).cpu(), x.pow(e))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_pow_with_a_scalar_exponent_matches_cpu_bit_for_bit(dtype: torch.dtype):
    """ATen's pow with a Python-number exponent special-cases 2, 3, -1 and -2 as products and a
    reciprocal (PowKernel.cpp), which differ in the last bit from a general pow for a quarter of
    inputs; bfloat16 rounds each product (x^3 is (x*x)*x with x*x rounded first). Both modes, in
    clusters (float32, half types) and ATen kernels (float64), and a chain give CPU's bits. 0.5 is
    left out: float32 sqrt is correctly rounded here, MKL's (ATen's) is not always (test above)."""
    torch.manual_seed(0)
    x = (torch.randn(4099) * 3).to(dtype)  # 4099: a partial tile and a scalar tail
    exponents = (2.0, 3.0, -1.0, -2.0, 1.0, 0.0, 4.0, 1.5, -0.5)
    for mode in ("strict", "fused"):
        with torch_tpu.mode(mode):
            for e in exponents:
                got, want = x.to("tpu").pow(e).cpu(), x.pow(e)
                torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True,
                                           msg=lambda m: f"{mode} x^{e} ({dtype}): {m}")
            got = x.to("tpu").pow(3).mul(0.5).add(x.to("tpu").pow(-2)).cpu()
            torch.testing.assert_close(got, x.pow(3).mul(0.5).add(x.pow(-2)), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_pow_with_a_tensor_exponent_is_the_general_pow_as_on_cpu(dtype: torch.dtype):
    """A one-value tensor exponent (0-d or [1] on tpu, or a 0-d CPU tensor) is pow.Tensor_Tensor:
    CPU computes the general pow for it, not the scalar-exponent recipes (x^2 as x*x), and so does
    the lowering (no scalar-exponent attribute on the IR pow), in both modes. 4096 elements: ATen's
    vectorized loop covers them all (its last n % 16 elements would take std::pow, the clusters
    SLEEF's pow)."""
    torch.manual_seed(0)
    x = (torch.randn(4096) * 3).to(dtype)
    for mode in ("strict", "fused"):
        with torch_tpu.mode(mode):
            for e in (2.0, 3.0, -1.0, -2.0, 1.5):
                base = x.abs() if e == 1.5 else x
                want = base.pow(torch.tensor(e, dtype=dtype))
                for exponent in (torch.tensor(e, dtype=dtype, device="tpu"),
                                 torch.tensor([e], dtype=dtype, device="tpu"),
                                 torch.tensor(e, dtype=dtype)):
                    got = base.to("tpu").pow(exponent).cpu()
                    torch.testing.assert_close(got, want, rtol=0, atol=0,
                                               msg=lambda m: f"{mode} x^{exponent!r} ({dtype}): {m}")


@pytest.mark.parametrize("hw", [(64, 64), (32, 32), (8, 16)])
def test_per_channel_operands_match_cpu_bit_for_bit(hw: tuple[int, int]):
    """Per-channel values broadcast over NCHW images: over 64x64 planes each tile of a cluster
    holds one channel's value (filled only when it changes: the channels below repeat values,
    the last differs only in sign, -0.0 against 0.0); over smaller planes a tile spans several
    channels. Every result matches CPU bit for bit (the ops are exactly rounded)."""
    torch.manual_seed(0)
    x = torch.rand(5, 6, *hw) * 255
    mean = torch.tensor([2.0, 2.0, 3.5, 3.5, 0.0, -0.0]).view(1, 6, 1, 1)
    scale = torch.tensor([0.5, 0.5, 0.5, -1.0, 1.0, 1.0]).view(1, 6, 1, 1)

    def f(t: torch.Tensor, m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        y = (t / 255.0 - m) * s
        return torch.where(y > 0.25, y * y, 1.0 / (y - m - 4.0))

    got = f(x.to("tpu"), mean.to("tpu"), scale.to("tpu")).cpu()
    assert fused()["stores_skipped"] >= 8  # one cluster: only the result is written
    assert torch.equal(got, f(x, mean, scale))


def test_autograd_with_retain_graph():
    x = torch.randn(5, 4)
    w = torch.randn(4, 3)
    xt, wt = x.to("tpu"), w.to("tpu").requires_grad_()
    loss = (xt @ wt).tanh().sum()
    loss.backward(retain_graph=True)
    g1 = wt.grad.clone()
    loss.backward()
    wc = w.clone().requires_grad_()
    (x @ wc).tanh().sum().backward()
    torch.testing.assert_close(g1.cpu(), wc.grad)
    torch.testing.assert_close(wt.grad.cpu(), 2 * wc.grad)


def test_error_at_flush_names_op_and_source_line():
    x = torch.randn(4, device="tpu")
    idx = torch.tensor([0, 9], device="tpu")
    y = x[idx] * 2  # out of range: found when the graph runs
    with pytest.raises(IndexError) as info:
        y.cpu()
    msg = str(info.value)
    assert "aten::index" in msg and "index 9 is out of bounds" in msg
    assert f"{os.path.basename(__file__)}:{_line_of('y = x[idx] * 2')}" in msg
    # The process stays usable.
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)


def test_a_failed_graph_loses_only_what_depends_on_the_failing_op():
    x = torch.arange(10.0, device="tpu")
    acc = torch.zeros(3, device="tpu")
    w = torch.ones(3, device="tpu")
    torch_tpu.sync()
    acc.add_(1)
    bad = (x * 1)[torch.tensor([11], device="tpu")]
    s = x * 1 + bad
    acc.add_(10)
    w.add_(bad)  # an in-place update that depends on the failing op
    with pytest.raises(IndexError, match="index 11 is out of bounds"):
        bad.tolist()
    # New results computed from the failed op have no value: using them raises the same type.
    for lost in (bad, s):
        with pytest.raises(IndexError, match="value was lost.*index 11 is out of bounds"):
            lost.tolist()
    # Work independent of it ran; the in-place update that needed it did not happen, so its
    # target keeps its last good value (as in strict mode, where the op would have raised).
    assert acc.tolist() == [11.0, 11.0, 11.0]
    assert w.tolist() == [1.0, 1.0, 1.0]
    # Memory the graph only read is intact, new work runs, and a full copy from the host makes a
    # lost tensor valid again.
    assert x.tolist() == list(range(10))
    s.copy_(torch.full((10,), 7.0))
    s.add_(1)
    assert s.tolist() == [8.0] * 10
    assert (x * 2).sum().item() == 90.0


@pytest.mark.parametrize("mode", ["fused", "strict"])
def test_work_queued_after_a_failed_graph_does_not_compute_from_its_lost_values(mode: str):
    # A graph (fused) or op (strict) queued behind the failing one, before the failure is known
    # on the host, reads the failed one's unwritten result: its own results are lost too and
    # raise when used, instead of holding values computed from uninitialized memory. What it
    # computes from intact memory is kept, in both modes.
    torch_tpu.set_mode(mode)
    x = torch.arange(10.0, device="tpu")
    big = torch.randn(1024, 1024, device="tpu")
    torch_tpu.sync()
    busy = big @ big  # keeps the stream busy so the next ops queue behind it
    derived = independent = None
    raised = []
    try:  # strict mode raises at whichever op next reaches the queue after the failure
        bad = (x + busy[0, 0] * 0)[torch.tensor([11], device="tpu")]  # fails once the product is done
        if mode == "fused":
            torch_tpu._C._fused_flush(-1, "optimizer_step")  # queues the graph without waiting for it
        derived = bad * 2 + 1
        independent = x * 3
    except IndexError as e:
        raised.append(str(e))
    try:
        torch_tpu.sync()
    except IndexError as e:
        raised.append(str(e))
    assert len(raised) == 1 and "index 11 is out of bounds" in raised[0], raised
    assert mode == "strict" or derived is not None  # fused mode raises at the synchronization
    if derived is not None:
        with pytest.raises(IndexError, match="value was lost.*index 11 is out of bounds"):
            derived.tolist()
    if independent is not None:
        assert independent.tolist() == [3.0 * i for i in range(10)]
    assert (x * 3).tolist() == [3.0 * i for i in range(10)]  # memory only read stays intact
    assert busy.shape == (1024, 1024)


def test_a_graph_flushed_after_the_failure_is_known_still_runs():
    # The failing graph's error is already pending on the stream when the next graph is flushed:
    # that graph is queued all the same (its ops returned results long ago), what it computes
    # from the lost value is lost, the rest is computed. Before: the graph was dropped, and
    # `derived` read uninitialized memory.
    x = torch.arange(10.0, device="tpu")
    big = torch.randn(1024, 1024, device="tpu")
    torch_tpu.sync()
    busy = big @ big  # the worker is still busy with it when the next graph is recorded
    bad = (x + busy[0, 0] * 0)[torch.tensor([11], device="tpu")]  # fails once the product is done
    torch_tpu._C._fused_flush(-1, "optimizer_step")  # queued, not waited for
    derived = bad * 2 + 1
    independent = x * 3
    time.sleep(0.5)  # the worker runs the first graph meanwhile: its error is pending at the flush
    with pytest.raises(IndexError, match="index 11 is out of bounds"):
        torch_tpu.sync()
    assert busy.shape == (1024, 1024)
    with pytest.raises(IndexError, match="value was lost.*index 11 is out of bounds"):
        derived.tolist()
    assert independent.tolist() == [3.0 * i for i in range(10)]


def test_graph_size_is_bounded():
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_mode("fused")
        x = torch.zeros(4, device="tpu")
        for _ in range(100):
            x = x + 1
        m = torch_tpu.metrics()["fused"]
        assert m["flushes_by_cause"] == {"size_cap": 3}, m
        assert m["largest_graph_ops"] == 32, m
        assert x.sum().item() == 400
    """)
    env = dict(os.environ, TORCH_TPU_FUSED_MAX_OPS="32")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)


def test_slow_start_cuts_the_first_graphs_after_a_wait_that_hold_a_contraction():
    # After the host waits, the device is idle: graphs holding a matrix product are flushed at
    # 8, then 16 ops, then the cap (32). Elementwise-only graphs stay whole.
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_mode("fused")
        w = torch.randn(8, 8) / 3
        x = torch.randn(8, 8)
        xd, wd = x.to("tpu"), w.to("tpu")
        xd.sum().item()  # the host waits: the next graphs start slow
        torch_tpu.reset_metrics()
        y, want = xd, x
        for _ in range(61):  # 122 ops: matmul, then scale
            y = (y @ wd) * 0.5
            want = (want @ w) * 0.5
        got = y.cpu()  # flushes the rest (host_read)
        m = torch_tpu.metrics()["fused"]
        assert m["flushes_by_cause"] == {"slow_start": 2, "size_cap": 3, "host_read": 1}, m
        torch.testing.assert_close(got, want)
        torch_tpu.reset_metrics()
        z = xd
        for _ in range(40):  # no contraction: one graph up to the cap
            z = z * 0.5 + 1
        z.cpu()
        m = torch_tpu.metrics()["fused"]
        assert m["flushes_by_cause"] == {"size_cap": 2, "host_read": 1}, m
    """)
    env = dict(os.environ, TORCH_TPU_FUSED_MAX_OPS="32", TORCH_TPU_FUSED_FIRST_OPS="8")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    # Off: the cap alone.
    off = code.replace('{"slow_start": 2, "size_cap": 3, "host_read": 1}', '{"size_cap": 3, "host_read": 1}')
    env["TORCH_TPU_FUSED_FIRST_OPS"] = "0"
    subprocess.run([sys.executable, "-c", off], env=env, check=True, timeout=120)


def test_a_host_wait_with_nothing_pending_restarts_the_slow_start():
    # Eight ops after a wait are flushed at the slow start's first cut (8, the default), so the
    # next host read finds nothing pending; it waits all the same, and the eight ops after it
    # are cut at 8 again rather than at the next cut (16).
    w = torch.randn(8, 8) / 3
    xd, wd = torch.randn(8, 8).to("tpu"), w.to("tpu")
    xd.sum().item()
    torch_tpu.reset_metrics()
    y = xd
    for _ in range(4):
        y = (y @ wd) * 0.5
    first = y.cpu()  # nothing pending: the graph went at 8 ops
    for _ in range(4):
        y = (y @ wd) * 0.5
    assert fused()["flushes_by_cause"] == {"slow_start": 2}, fused()
    torch.testing.assert_close(y.cpu(), ((((first @ w) * 0.5 @ w) * 0.5 @ w) * 0.5 @ w) * 0.5)


def test_queued_graphs_are_bounded_so_dead_tensors_free_their_memory():
    # 100 graphs of slow matmuls recorded without a host read. Each graph's results (2 MiB) are
    # dead once the next graph replaces them, but their memory returns only when their graph
    # has run: with every graph queued at once the peak was 195 MiB; two queued graphs
    # (exec/fused.cpp) keep it at 9 MiB.
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_mode("fused")
        a = torch.randn(512, 512, device="tpu")
        torch_tpu.sync()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        y = a
        for _ in range(200):
            y = (a @ a) * 0.01
        torch_tpu.sync()
        peak = (torch.tpu.max_memory_allocated() - base) / 2**20
        assert torch_tpu.metrics()["fused"]["flushes_by_cause"]["size_cap"] >= 49
        assert peak <= 16, peak
        torch.testing.assert_close(y.cpu(), (a.cpu() @ a.cpu()) * 0.01)
    """)
    env = dict(os.environ, TORCH_TPU_FUSED_MAX_OPS="4")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)


def test_two_threads_record_concurrently():
    results: dict[int, torch.Tensor] = {}

    def work(i: int) -> None:
        t = torch.full((100,), float(i), device="tpu")
        for _ in range(50):
            t = t * 1.0 + 1
        results[i] = t.cpu()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for i in range(2):
        torch.testing.assert_close(results[i], torch.full((100,), float(i + 50)))


def test_exit_flushes_pending_work(tmp_path):
    out = tmp_path / "x.pt"
    code = textwrap.dedent(f"""
        import torch, torch_tpu
        torch_tpu.set_mode("fused")
        x = torch.arange(6.0, device="tpu") * 2
        torch.save(x, {str(out)!r})
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    torch.testing.assert_close(torch.load(out, map_location="cpu"), torch.arange(6.0) * 2)


def test_debug_fusion_prints_graphs():
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_mode("fused")
        torch_tpu.set_debug_fusion(True)
        x = torch.ones(8, device="tpu")
        print((x * 2 + 1).sum().item())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert r.stdout.strip() == "24.0"
    assert "compiled a graph of 4 ops" in r.stderr and "flush (host_read)" in r.stderr


def test_memory_pressure_flushes_pending_work():
    # A pending sum() keeps its input alive until the graph runs. When an allocation finds the
    # device full, the allocator's retry flushes the graph, the inputs are released, and the
    # allocation succeeds.
    code = textwrap.dedent("""
        import torch, torch_tpu
        xs = [torch.full((1 << 20,), float(i), device="tpu") for i in range(10)]  # 40 MiB
        torch_tpu.set_mode("fused")
        sums = []
        for i in range(10):
            sums.append(xs[i].sum())
            xs[i] = None  # only the pending graph references it now
        big = torch.empty(8 << 20, device="tpu")  # 32 MiB: fits only once the graph ran
        assert [s.item() for s in sums] == [float(i * (1 << 20)) for i in range(10)]
        m = torch_tpu.metrics()["fused"]
        assert m["flushes_by_cause"].get("memory", 0) == 1, m
    """)
    env = dict(os.environ, TORCH_TPU_HOST_MEMORY="64MiB")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)


def test_writes_through_views_stay_in_the_graph():
    # A KV-cache-like buffer filled column by column, a row update and a strided fill: every
    # write through a view is merged into the buffer's pending value, so reads never flush.
    cache = torch.zeros(4, 8, device="tpu")
    ref = torch.zeros(4, 8)
    for t in range(8):
        col = torch.full((4,), float(t + 1), device="tpu") * 2
        cache[:, t] = col
        ref[:, t] = torch.full((4,), float(t + 1)) * 2
    cache[1].add_(100)
    ref[1].add_(100)
    cache[::2, 2::2] = -1.0
    ref[::2, 2::2] = -1.0
    total = cache.sum(dim=1) + cache.t()[2]
    assert fused()["flushes"] == 0
    torch.testing.assert_close(total.cpu(), ref.sum(dim=1) + ref.t()[2])
    torch.testing.assert_close(cache.cpu(), ref)
    assert "view_read" not in fused()["flushes_by_cause"]


def test_graphs_that_never_repeat_warn_once():
    code = textwrap.dedent("""
        import warnings, torch, torch_tpu
        torch_tpu.set_mode("fused")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in range(1, 80):  # a new shape every iteration: every flush compiles
                (torch.ones(n, device="tpu") * 2).sum().item()
        msgs = [str(w.message) for w in caught if "compiled a new graph" in str(w.message)]
        assert len(msgs) == 1, msgs
        assert torch_tpu.metrics()["fused"]["graphs_compiled"] == 79
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_waiting_thread_runs_independent_steps():
    """At a host read the Python thread waits for the stream worker; it spins and runs program
    steps that do not depend on the worker's (two independent chains of products here), and the
    values stay those of CPU. The whole loop is one graph (no size cap, no slow start), flushed
    by the read itself, so the host waits while the worker has both chains to run. Whether it
    gets a step is up to the OS scheduler (a loaded machine may not run it until the worker is
    done: eight reads all went unhelped once, beside a sanitizer build), so the test asks for
    help in at least one of up to forty reads, stopping at the first."""
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_mode("fused")
        torch.manual_seed(0)
        a, b = torch.randn(64, 64) / 8, torch.randn(64, 64) / 8
        x, y = a, b
        for _ in range(60):
            x, y = x @ a, y @ b
        want = torch.stack([x, y])
        ta, tb = a.to("tpu"), b.to("tpu")
        helped = []
        for i in range(41):  # the first read also compiles the graph
            before = torch_tpu.metrics()["host_threads"]["waiting_thread_work"]
            tx, ty = ta, tb
            for _ in range(60):
                tx, ty = tx @ ta, ty @ tb
            got = torch.stack([tx, ty]).cpu()
            torch.testing.assert_close(got, want)
            helped.append(torch_tpu.metrics()["host_threads"]["waiting_thread_work"] - before)
            if i and helped[-1]:
                break
        assert sum(helped[1:]) > 0, helped
    """)
    env = dict(os.environ, TORCH_TPU_FUSED_MAX_OPS="1000", TORCH_TPU_FUSED_FIRST_OPS="0")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)


def test_helping_can_be_turned_off():
    """TORCH_TPU_HOST_HELP_SPIN_US=0: waiting threads sleep as before and run no work."""
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_mode("fused")
        a = torch.randn(64, 64, device="tpu") / 8
        for _ in range(3):
            x, y = a, a
            for _ in range(60):
                x, y = x @ a, y @ a
            (x + y).sum().item()
        assert torch_tpu.metrics()["host_threads"]["waiting_thread_work"] == 0
    """)
    env = dict(os.environ, TORCH_TPU_HOST_HELP_SPIN_US="0")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)


def test_an_optimizer_step_ends_the_graph_so_loops_without_host_reads_hit_the_cache():
    """A training loop that reads no value between steps. Each optimizer step flushes (cause
    optimizer_step, no host wait), so every step's graphs start at its first op and are cut at
    the same points: once two such runs have compiled them, later steps compile nothing. Without
    the flush the size cap's cuts drift by the step's op count modulo the cap from step to step.
    The parameters match the same loop on CPU."""
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4))
    model = copy.deepcopy(cpu_model).to("tpu")
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    xd, yd = x.to("tpu"), y.to("tpu")
    # The per-parameter AdamW: ~100 ops per step, so the 32-op cap cuts inside every step.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2, foreach=False)

    def step(m: torch.nn.Module, o: torch.optim.Optimizer, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(m(a), b)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss

    for _ in range(2):  # compiles the graphs of a run of steps after a host read
        for _ in range(3):
            step(model, opt, xd, yd)
            step(cpu_model, cpu_opt, x, y)
        torch_tpu.sync()
    torch_tpu.reset_metrics()
    for _ in range(10):
        loss = step(model, opt, xd, yd)
        step(cpu_model, cpu_opt, x, y)
    loss.item()
    m = fused()
    assert m["ops_recorded"] > 10 * 32, m  # each step records more than the size cap
    assert m["flushes_by_cause"]["optimizer_step"] == 10, m
    assert m["graphs_compiled"] == 0, m
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        # 16 AdamW steps over products and GELU, whose last bits may differ from CPU's kernels:
        # parameters of size <= 0.4 differed by at most 4.4e-7 (float32's default atol is 1e-5).
        torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)
