"""Collective bandwidth: the tpu backend against Gloo on CPU tensors, in the same run.

    python bench/collectives.py [--ranks 2] [--min-kib 4] [--max-mib 64] [--rounds 9]
                                [--batch-seconds 0.1]

Spawns the ranks itself (local processes, loopback TCP), initializes one process group with
"cpu:gloo,tpu:tpu", and for each size times all_reduce (sum) and all_gather_into_tensor on
float32 tpu tensors (the tpu backend) and on CPU tensors (Gloo).

Measurement, made for a small shared machine where the load changes from second to second:
- a *batch* is K back-to-back synchronous calls (then torch.tpu.synchronize() for tpu), timed as
  a whole; K is chosen per size so a batch takes about --batch-seconds (at least 2 calls), and
  agreed between the ranks (every rank must make the same calls);
- each *round* times one tpu batch and one Gloo batch back to back, alternating which goes first,
  so both see the same load; --rounds rounds per cell;
- a cell reports the median per-call bus bandwidth of each backend and the median of the
  per-round ratios tpu/gloo (paired, so a load spike that hits one round hits both sides), plus
  the ratio of the best rounds (best-of-N, the least disturbed figure).
Bus bandwidth follows the NCCL-tests convention: all_reduce moves 2(n-1)/n of the buffer per
rank, all_gather (n-1)/n of the output. The tpu figure includes everything a user pays: the
flush/stream ordering before the collective and the completion hand-off after it.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _batch(fn, calls: int, sync) -> float:
    """Seconds per call of `calls` back-to-back calls of fn, then sync()."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls


def _agree_max(value: int) -> int:
    t = torch.tensor([value])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # CPU tensor: Gloo
    return int(t.item())


def _measure(fns: dict, sync: dict, rounds: int, batch_seconds: float) -> dict:
    """Per-round seconds per call of each backend's fn (see the module docstring)."""
    # Calibrate: one warm-up call each, then the batch size from the slower backend (the best of
    # three short batches, so one load spike does not shrink every batch of the cell).
    per_call = 0.0
    for kind, fn in fns.items():
        _batch(fn, 1, sync[kind])
        per_call = max(per_call, min(_batch(fn, 2, sync[kind]) for _ in range(3)))
    calls = _agree_max(min(2000, max(2, int(batch_seconds / max(per_call, 1e-7)))))
    times = {kind: [] for kind in fns}
    order = list(fns)
    for r in range(rounds):
        for kind in (order if r % 2 == 0 else order[::-1]):
            dist.barrier()  # Gloo (CPU) barrier: both ranks start the batch together
            times[kind].append(_batch(fns[kind], calls, sync[kind]))
    times["calls"] = calls
    return times


def _worker(rank: int, world: int, port: int, sizes: list[int], rounds: int, batch_seconds: float) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    import torch_tpu  # noqa: F401  (registers the backend; the device count follows LOCAL_WORLD_SIZE)

    dev = torch.device("tpu", rank)
    torch.tpu.set_device(rank)
    dist.init_process_group("cpu:gloo,tpu:tpu", rank=rank, world_size=world)
    sync = {"tpu": lambda: torch.tpu.synchronize(dev), "gloo": lambda: None}
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        res = {}
        for name in ("all_reduce", "all_gather"):
            fns = {}
            for kind, device in (("tpu", dev), ("gloo", torch.device("cpu"))):
                if name == "all_reduce":
                    x = torch.ones(n, device=device)
                    fns[kind] = lambda x=x: dist.all_reduce(x)
                    factor = 2 * (world - 1) / world
                else:
                    x = torch.ones(n // world, device=device)
                    out = torch.empty(n // world * world, device=device)
                    fns[kind] = lambda x=x, out=out: dist.all_gather_into_tensor(out, x)
                    factor = (world - 1) / world
            times = _measure(fns, sync, rounds, batch_seconds)
            ratios = [g / t for t, g in zip(times["tpu"], times["gloo"])]
            res[name] = {
                "tpu": nbytes * factor / statistics.median(times["tpu"]) / 1e9,
                "gloo": nbytes * factor / statistics.median(times["gloo"]) / 1e9,
                "ratio": statistics.median(ratios),
                "best": min(times["gloo"]) / min(times["tpu"]),
                "calls": times["calls"],
                "us": (statistics.median(times["tpu"]) * 1e6, statistics.median(times["gloo"]) * 1e6),
            }
        rows.append((nbytes, res))
    if rank == 0:
        print(f"{rounds} rounds per cell; busbw GB/s = median over rounds; ratio = median of per-round tpu/gloo; "
              "best = best tpu round / best gloo round; us/call = median tpu/gloo; calls = calls per batch")
        print(f"{'size':>8} | {'all_reduce':^56} | {'all_gather_into_tensor':^56}")
        head = f"{'tpu':>8} {'gloo':>8} {'ratio':>7} {'best':>7} {'us/call':>13} {'calls':>6}"
        print(f"{'':>8} | {head} | {head}")
        for nbytes, res in rows:
            size = f"{nbytes // 1024} KiB" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB"
            cells = [f"{c['tpu']:8.3f} {c['gloo']:8.3f} {c['ratio']:6.2f}x {c['best']:6.2f}x "
                     f"{c['us'][0]:6.0f}/{c['us'][1]:<6.0f} {c['calls']:6d}"
                     for c in (res["all_reduce"], res["all_gather"])]
            print(f"{size:>8} | {cells[0]} | {cells[1]}")
        sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min-kib", type=int, default=4)
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=9, help="paired tpu/gloo batches per cell")
    p.add_argument("--batch-seconds", type=float, default=0.1, help="target duration of one batch")
    a = p.parse_args()
    sizes = []
    s = a.min_kib * 1024
    while s <= a.max_mib << 20:
        sizes.append(s)
        s *= 4
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Children import torch (which autoloads torch_tpu) before _worker runs: the device count
    # (LOCAL_WORLD_SIZE, so rank r uses tpu:r) must be in the environment they start with.
    os.environ.pop("TORCH_TPU_NUM_DEVICES", None)
    os.environ["LOCAL_WORLD_SIZE"] = str(a.ranks)
    mp.spawn(_worker, args=(a.ranks, port, sizes, a.rounds, a.batch_seconds), nprocs=a.ranks)


if __name__ == "__main__":
    main()
