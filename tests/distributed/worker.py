"""Worker for tests/distributed: run by torchrun (or spawned directly), one process per rank.

``python worker.py OUT_DIR PHASE[,PHASE...]`` runs the named phases in order and writes one JSON
line per check to OUT_DIR/rank<r>.jsonl: {"check": name, "ok": bool, "detail": str}. A check
that raises is recorded as failed with the traceback, and the worker moves on (a collective that
failed on one rank would desynchronize the group, so later checks may fail too; the first
failure is the one to read). Launching torchrun costs seconds, so one launch runs many checks.

Phases: collectives (every collective and dtype against the same collective on CPU/Gloo),
mpmd (rank-divergent work around a barrier, strict and fused), ddp, fsdp, tp, dcp (state
dicts written for the test process to load on 1 rank), killed (spawned without torchrun:
rank 1 exits, rank 0's collective must raise within the timeout).
"""

from __future__ import annotations

import copy
import datetime
import faulthandler
import json
import os
import signal
import sys
import time
import traceback
import warnings

import torch
import torch.distributed as dist

import torch_tpu
from torch_tpu.models import TinyGPT, synthetic_text

warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's rename
RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
DEV = torch.device("tpu", LOCAL_RANK)
OUT_DIR = sys.argv[1]
_results = open(os.path.join(OUT_DIR, f"rank{RANK}.jsonl"), "a")


def record(name: str, ok: bool, detail: str = "") -> None:
    _results.write(json.dumps({"check": name, "ok": bool(ok), "detail": detail}) + "\n")
    _results.flush()


def check(name: str, fn) -> None:
    try:
        fn()
        record(name, True)
    except Exception:  # noqa: BLE001 - recorded for the test process to report
        record(name, False, traceback.format_exc())


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    """Exact equality of a tpu result with the CPU/Gloo result (same algorithm, same data)."""
    a = a.cpu()
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    assert torch.equal(a, b), f"max diff {(a.double() - b.double()).abs().max().item()}"


def data(shape, dtype, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-20, 20, shape, generator=g, dtype=dtype)


# --------------------------------------------------------------------------------------------
# collectives: each one on tpu tensors (the tpu backend) and on CPU tensors (Gloo), same values


def phase_collectives() -> None:
    w = dist.group.WORLD
    record("backend_selected", w._get_backend(DEV).name() == "tpu" and
           w._get_backend(torch.device("cpu")).name() == "gloo",
           f"{w._get_backend(DEV).name()} / {w._get_backend(torch.device('cpu')).name()}")
    dtypes = [torch.float32, torch.bfloat16, torch.int32]
    for dt in dtypes:
        n = dt.__repr__().split(".")[-1]
        ops = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
               "product": dist.ReduceOp.PRODUCT}

        def all_reduce(op):
            x = data((5, 7), dt, 10 + RANK)
            t = x.to(DEV)
            dist.all_reduce(t, op=op)
            dist.all_reduce(x, op=op)
            same(t, x)

        for opname, op in ops.items():
            check(f"all_reduce_{opname}_{n}", lambda op=op: all_reduce(op))
        if dt.is_floating_point:
            def avg():
                x = data((3, 33), dt, 20 + RANK)
                t = x.to(DEV)
                dist.all_reduce(t, op=dist.ReduceOp.AVG)
                dist.all_reduce(x)  # Gloo has no AVG: SUM, divided the same way
                same(t, x / WORLD)
            check(f"all_reduce_avg_{n}", avg)

        def broadcast():
            x = data((4, 4), dt, 30 + RANK)
            t = x.to(DEV)
            dist.broadcast(t, src=1)
            dist.broadcast(x, src=1)
            same(t, x)
        check(f"broadcast_{n}", broadcast)

        def all_gather():
            x = data((2, 3), dt, 40 + RANK)
            outs_t = [torch.empty(2, 3, dtype=dt, device=DEV) for _ in range(WORLD)]
            outs_c = [torch.empty(2, 3, dtype=dt) for _ in range(WORLD)]
            dist.all_gather(outs_t, x.to(DEV))
            dist.all_gather(outs_c, x)
            for a, b in zip(outs_t, outs_c):
                same(a, b)
        check(f"all_gather_{n}", all_gather)

        def all_gather_into_tensor():
            x = data((3, 5), dt, 50 + RANK)
            out_t = torch.empty(3 * WORLD, 5, dtype=dt, device=DEV)
            out_c = torch.empty(3 * WORLD, 5, dtype=dt)
            dist.all_gather_into_tensor(out_t, x.to(DEV))
            dist.all_gather_into_tensor(out_c, x)
            same(out_t, out_c)
        check(f"all_gather_into_tensor_{n}", all_gather_into_tensor)

        def reduce_scatter():
            xs = [data((4,), dt, 60 + RANK * 10 + i) for i in range(WORLD)]
            out_t = torch.empty(4, dtype=dt, device=DEV)
            out_c = torch.empty(4, dtype=dt)
            dist.reduce_scatter(out_t, [x.to(DEV) for x in xs])
            dist.reduce_scatter(out_c, xs)
            same(out_t, out_c)
        check(f"reduce_scatter_{n}", reduce_scatter)

        def reduce_scatter_tensor(op):
            x = data((WORLD * 3, 2), dt, 70 + RANK)
            out_t = torch.empty(3, 2, dtype=dt, device=DEV)
            out_c = torch.empty(3, 2, dtype=dt)
            dist.reduce_scatter_tensor(out_t, x.to(DEV), op=op)
            dist.reduce_scatter_tensor(out_c, x, op=dist.ReduceOp.SUM)
            same(out_t, out_c / WORLD if op == dist.ReduceOp.AVG else out_c)
        check(f"reduce_scatter_tensor_{n}", lambda: reduce_scatter_tensor(dist.ReduceOp.SUM))
        if dt.is_floating_point:
            check(f"reduce_scatter_tensor_avg_{n}", lambda: reduce_scatter_tensor(dist.ReduceOp.AVG))

        def all_to_all():
            xs = [data((2, 3), dt, 80 + RANK * 10 + i) for i in range(WORLD)]  # Gloo: equal sizes
            outs_t = [torch.empty(2, 3, dtype=dt, device=DEV) for _ in range(WORLD)]
            outs_c = [torch.empty(2, 3, dtype=dt) for _ in range(WORLD)]
            dist.all_to_all(outs_t, [x.to(DEV) for x in xs])
            dist.all_to_all(outs_c, xs)
            for a, b in zip(outs_t, outs_c):
                same(a, b)
        check(f"all_to_all_{n}", all_to_all)

        def all_to_all_uneven():
            # rank r sends a (r + 1 + d, 3) tensor to rank d (Gloo's list form rejects this); the
            # reference is Gloo's all_to_all_single over the same values flattened and packed.
            xs = [data((RANK + 1 + d, 3), dt, 85 + RANK * 10 + d) for d in range(WORLD)]
            shapes = [(s + 1 + RANK, 3) for s in range(WORLD)]
            outs_t = [torch.empty(sh, dtype=dt, device=DEV) for sh in shapes]
            outs_t[0] = torch.empty(shapes[0][::-1], dtype=dt, device=DEV).t()  # a strided output
            dist.all_to_all(outs_t, [x.to(DEV) for x in xs])
            flat_in = torch.cat([x.reshape(-1) for x in xs])
            flat_out = torch.empty(sum(a * b for a, b in shapes), dtype=dt)
            dist.all_to_all_single(flat_out, flat_in, [a * b for a, b in shapes], [x.numel() for x in xs])
            for a, b in zip(outs_t, flat_out.split([a * b for a, b in shapes])):
                same(a, b.view(a.shape))
        check(f"all_to_all_uneven_{n}", all_to_all_uneven)

        def all_to_all_single_uneven():
            # rank r sends (r + 1 + d) rows to rank d
            in_splits = [RANK + 1 + d for d in range(WORLD)]
            out_splits = [s + 1 + RANK for s in range(WORLD)]
            x = data((sum(in_splits), 3), dt, 90 + RANK)
            out_t = torch.empty(sum(out_splits), 3, dtype=dt, device=DEV)
            out_c = torch.empty(sum(out_splits), 3, dtype=dt)
            dist.all_to_all_single(out_t, x.to(DEV), out_splits, in_splits)
            dist.all_to_all_single(out_c, x, out_splits, in_splits)
            same(out_t, out_c)
        check(f"all_to_all_single_uneven_{n}", all_to_all_single_uneven)

        def gather_scatter_reduce():
            x = data((3,), dt, 100 + RANK)
            gt = [torch.empty(3, dtype=dt, device=DEV) for _ in range(WORLD)] if RANK == 0 else None
            gc = [torch.empty(3, dtype=dt) for _ in range(WORLD)] if RANK == 0 else None
            dist.gather(x.to(DEV), gt, dst=0)
            dist.gather(x, gc, dst=0)
            if RANK == 0:
                for a, b in zip(gt, gc):
                    same(a, b)
            chunks = [data((2, 2), dt, 110 + i) for i in range(WORLD)]
            st = torch.empty(2, 2, dtype=dt, device=DEV)
            sc = torch.empty(2, 2, dtype=dt)
            dist.scatter(st, [c.to(DEV) for c in chunks] if RANK == 1 else None, src=1)
            dist.scatter(sc, chunks if RANK == 1 else None, src=1)
            same(st, sc)
            rt = x.to(DEV)
            rc = x.clone()
            dist.reduce(rt, dst=1)
            dist.reduce(rc, dst=1)
            if RANK == 1:
                same(rt, rc)
        check(f"gather_scatter_reduce_{n}", gather_scatter_reduce)

    def send_recv():
        x = torch.arange(6.0).reshape(2, 3) + RANK
        if RANK == 0:
            dist.send(x.to(DEV), dst=1)
        else:
            t = torch.empty(2, 3, device=DEV)
            dist.recv(t, src=0)
            same(t, torch.arange(6.0).reshape(2, 3))
        # both ranks post a receive before their send: must not deadlock
        peer = 1 - RANK
        got = torch.empty(2, 3, device=DEV)
        ops = [dist.P2POp(dist.irecv, got, peer), dist.P2POp(dist.isend, x.to(DEV), peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        same(got, torch.arange(6.0).reshape(2, 3) + peer)
    check("send_recv", send_recv)

    def coalesced():
        from torch.distributed.distributed_c10d import _coalescing_manager
        ins = [data((2, 2), torch.float32, 120 + RANK), data((3,), torch.float32, 121 + RANK)]
        outs_t = [torch.empty(WORLD * 2, 2, device=DEV), torch.empty(WORLD * 3, device=DEV)]
        with _coalescing_manager(device=DEV, async_ops=True) as cm:
            for o, i in zip(outs_t, ins):
                dist.all_gather_into_tensor(o, i.to(DEV))
        cm.wait()
        rs_in = [data((WORLD * 2,), torch.float32, 130 + RANK), data((WORLD * 4,), torch.float32, 131 + RANK)]
        rs_t = [torch.empty(2, device=DEV), torch.empty(4, device=DEV)]
        with _coalescing_manager(device=DEV, async_ops=True) as cm:
            for o, i in zip(rs_t, rs_in):
                dist.reduce_scatter_tensor(o, i.to(DEV))
        cm.wait()
        ar = [data((5,), torch.float32, 140 + RANK), data((2, 2), torch.float32, 141 + RANK)]
        ar_t = [a.to(DEV) for a in ar]
        with _coalescing_manager(device=DEV, async_ops=True) as cm:
            for a in ar_t:
                dist.all_reduce(a)
        cm.wait()
        for o, i in zip(outs_t, ins):
            ref = torch.empty_like(o, device="cpu")
            dist.all_gather_into_tensor(ref, i)
            same(o, ref)
        for o, i in zip(rs_t, rs_in):
            ref = torch.empty_like(o, device="cpu")
            dist.reduce_scatter_tensor(ref, i)
            same(o, ref)
        for a, c in zip(ar_t, ar):
            dist.all_reduce(c)
            same(a, c)
    check("coalesced", coalesced)

    def async_work_and_future():
        x = data((1000,), torch.float32, 150 + RANK)
        t = x.to(DEV) * 2  # queued tpu work the collective must wait for
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future()
        work.wait()
        vals = fut.wait()
        assert vals[0].device == DEV, vals[0].device
        ref = x * 2
        dist.all_reduce(ref)
        same(t, ref)
        assert work.is_completed() and work.is_success()
    check("async_work_and_future", async_work_and_future)

    def issue_order_mixed_paths():
        # A collective on an idle stream is started by the calling thread, one behind queued tpu
        # work by the issue thread. Each rank makes a different half of them wait (busy stream),
        # so a collective overtaking a queued one would pair different collectives across ranks.
        m = torch.full((96, 96), 0.01, device=DEV)
        ys, works = [], []
        for i in range(12):
            if i % 2 == RANK % 2:
                for _ in range(4):
                    m = torch.tanh(m @ m)  # queued work: this collective waits for the stream
            y = torch.full((8,), float(i * 10 + RANK), device=DEV)
            works.append(dist.all_reduce(y, async_op=True))
            ys.append(y)
        for w in works:
            w.wait()
        for i, y in enumerate(ys):
            same(y, torch.full((8,), float(sum(i * 10 + r for r in range(WORLD)))))
    check("issue_order_mixed_paths", issue_order_mixed_paths)

    def fused_mode_flushes():
        with torch_tpu.mode("fused"):
            x = data((64,), torch.float32, 160 + RANK)
            t = x.to(DEV) * 3 + 1  # pending in the fused graph until the collective flushes it
            dist.all_reduce(t)
            u = t * 2  # reads the collective's output
            ref = x * 3 + 1
            dist.all_reduce(ref)
            same(u, ref * 2)
    check("fused_mode_flushes", fused_mode_flushes)

    def barrier():
        dist.barrier()
    check("barrier", barrier)

    def object_collectives():
        objs = [None] * WORLD
        dist.all_gather_object(objs, {"rank": RANK})
        assert objs == [{"rank": r} for r in range(WORLD)], objs
    check("object_collectives", object_collectives)


# --------------------------------------------------------------------------------------------
# MPMD: rank 0 works (and reads values) while the other rank waits at a barrier


def phase_mpmd() -> None:
    for mode in ("strict", "fused"):
        def run(mode=mode):
            with torch_tpu.mode(mode):
                x = torch.full((64, 64), 0.01, device=DEV)
                if RANK == 0:
                    for _ in range(20):
                        x = torch.tanh(x @ x + 0.5)
                    checksum = x.sum().item()  # rank-0-only host read ("logging")
                    assert checksum == checksum
                dist.barrier()
                y = torch.ones(4, device=DEV) * (RANK + 1)
                dist.all_reduce(y)
                same(y, torch.full((4,), float(sum(range(1, WORLD + 1)))))
        check(f"mpmd_{mode}", run)


# --------------------------------------------------------------------------------------------
# Training: DDP, FSDP2 and 2-way tensor parallel against single-process CPU training

STEPS = 10
BATCH = 8


def _gpt() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(vocab=64, dim=32, heads=4, layers=2, ctx=16)


def _reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    """Single-process CPU training on the full batch."""
    model = _gpt()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for x, y in synthetic_text(STEPS, batch=BATCH, ctx=16, vocab=64):
        loss = model(x, y)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _compare(name: str, losses, state, ref_losses, ref_state) -> None:
    # 1e-3, not float32's default: 10 SGD steps amplify rounding differences, and the sharded
    # runs sum gradients in a different order (per-rank partial sums, then the collective).
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-3, atol=1e-3)
    for k, v in ref_state.items():
        torch.testing.assert_close(state[k].cpu(), v, rtol=1e-3, atol=1e-3, msg=lambda m, k=k: f"{name} {k}: {m}")
    assert losses[-1] < losses[0]


def _train_data_parallel(model: torch.nn.Module) -> list[float]:
    """STEPS SGD steps, each rank on its slice of the batch; the losses averaged over ranks."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    per = BATCH // WORLD
    for x, y in synthetic_text(STEPS, batch=BATCH, ctx=16, vocab=64):
        xs, ys = x[RANK * per:(RANK + 1) * per].to(DEV), y[RANK * per:(RANK + 1) * per].to(DEV)
        loss = model(xs, ys)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
        full = loss.detach().clone()
        dist.all_reduce(full, op=dist.ReduceOp.AVG)
        losses.append(full.item())
    return losses


def phase_ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    def run():
        ref_losses, ref_state = _reference()
        model = DDP(_gpt().to(DEV), device_ids=None)
        losses = _train_data_parallel(model)
        _compare("ddp", losses, model.module.state_dict(), ref_losses, ref_state)
    check("ddp_tinygpt", run)


def phase_fsdp() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def run():
        ref_losses, ref_state = _reference()
        mesh = init_device_mesh("tpu", (WORLD,))
        model = _gpt().to(DEV)
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh)
        fully_shard(model, mesh=mesh)
        losses = _train_data_parallel(model)
        state = {k: v.full_tensor() for k, v in model.state_dict().items()}
        _compare("fsdp", losses, state, ref_losses, ref_state)
        _FSDP_MODEL.append(model)
    check("fsdp2_tinygpt", run)


_FSDP_MODEL: list = []


def phase_tp() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def run():
        ref_losses, ref_state = _reference()
        mesh = init_device_mesh("tpu", (WORLD,))
        model = _gpt().to(DEV)
        plan = {}
        for i in range(len(model.blocks)):
            plan[f"blocks.{i}.mlp.0"] = ColwiseParallel()
            plan[f"blocks.{i}.mlp.2"] = RowwiseParallel()
            plan[f"blocks.{i}.attn.proj"] = RowwiseParallel(input_layouts=dist.tensor.Replicate())
        parallelize_module(model, mesh, plan)
        # foreach=False: the model mixes DTensor (parallelized) and plain parameters, which the
        # foreach kernels reject (the same on every device).
        opt = torch.optim.SGD(model.parameters(), lr=0.5, foreach=False)
        losses = []
        for x, y in synthetic_text(STEPS, batch=BATCH, ctx=16, vocab=64):
            loss = model(x.to(DEV), y.to(DEV))[1]
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        state = {k: (v.full_tensor() if isinstance(v, dist.tensor.DTensor) else v)
                 for k, v in model.state_dict().items()}
        _compare("tp", losses, state, ref_losses, ref_state)
    check("tp_tinygpt", run)


def phase_dcp() -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    ckpt = os.path.join(OUT_DIR, "ckpt")

    def save_and_load():
        mesh = init_device_mesh("tpu", (WORLD,))
        model = _gpt().to(DEV)
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                p.add_(0.001 * (i + 1))  # values that differ from a fresh init
        fully_shard(model, mesh=mesh)
        full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        if RANK == 0:
            torch.save(full, os.path.join(OUT_DIR, "expected_state.pt"))
        dcp.save(model.state_dict(), checkpoint_id=ckpt)
        fresh = _gpt().to(DEV)
        fully_shard(fresh, mesh=mesh)
        sd = fresh.state_dict()
        dcp.load(sd, checkpoint_id=ckpt)
        fresh.load_state_dict(sd)
        for k, v in fresh.state_dict().items():
            same(v.full_tensor(), full[k])
    check("dcp_save_load_2_ranks", save_and_load)


# --------------------------------------------------------------------------------------------
# A killed rank (spawned without torchrun, whose agent would tear the job down itself)


def phase_killed() -> None:
    t = torch.ones(16, device=DEV)
    dist.all_reduce(t)
    c = torch.ones(4)  # launched with backend "tpu" alone: CPU tensors go through it too
    dist.all_reduce(c, op=dist.ReduceOp.AVG)
    record("tpu_backend_cpu_tensors", dist.group.WORLD._get_backend(torch.device("cpu")).name() == "tpu"
           and torch.equal(c, torch.ones(4)) and torch.equal(t.cpu(), torch.full((16,), 2.0)))
    if RANK == 1:
        os._exit(3)  # dies without a word, as a crashed or OOM-killed rank would
    start = time.monotonic()
    try:
        for _ in range(3):
            dist.all_reduce(t)
            t.cpu()
        record("killed_rank_raises", False, "all_reduce succeeded with a dead peer")
    except Exception as e:  # noqa: BLE001
        record("killed_rank_raises", True, f"{type(e).__name__} after {time.monotonic() - start:.1f}s: {e}")


PHASES = {"collectives": phase_collectives, "mpmd": phase_mpmd, "ddp": phase_ddp, "fsdp": phase_fsdp,
          "tp": phase_tp, "dcp": phase_dcp, "killed": phase_killed}


def main() -> None:
    # torchrun terminates the other ranks when one fails: a rank that hung says where (every
    # thread's Python stack goes to stderr, which the test's failure message includes).
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    if os.environ.get("TPU_TEST_DUMP_AFTER"):  # debugging a hang: every thread's stack to stderr
        faulthandler.dump_traceback_later(float(os.environ["TPU_TEST_DUMP_AFTER"]), exit=False)
    torch.tpu.set_device(LOCAL_RANK)
    timeout = datetime.timedelta(seconds=float(os.environ.get("TPU_TEST_PG_TIMEOUT", "60")))
    # "" -> None: init_process_group picks the backend for the accelerator ("tpu") by itself.
    backend = os.environ.get("TPU_TEST_BACKEND", "cpu:gloo,tpu:tpu") or None
    dist.init_process_group(backend, device_id=DEV, timeout=timeout)
    name = dist.group.WORLD._get_backend(DEV).name()
    record("tpu_backend_selected", name == "tpu", name)
    for phase in sys.argv[2].split(","):
        PHASES[phase]()
    if "killed" not in sys.argv[2]:
        dist.barrier()
        dist.destroy_process_group()
    record("done", True)
    _results.close()


if __name__ == "__main__":
    main()
