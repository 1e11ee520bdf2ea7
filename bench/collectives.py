"""Collective bandwidth: the tpu backend against Gloo on CPU tensors, in the same run.

    python bench/collectives.py [--ranks 2] [--min-kib 4] [--max-mib 64] [--seconds 0.3]

Spawns the ranks itself (local processes, loopback TCP), initializes one process group with
"cpu:gloo,tpu:tpu", and for each size times all_reduce (sum) and all_gather_into_tensor on
float32 tpu tensors (the tpu backend) and on CPU tensors (Gloo), alternating the two so both see
the same machine load. Prints the bus bandwidth of each (NCCL-tests convention: all_reduce moves
2(n-1)/n of the buffer per rank, all_gather (n-1)/n of the output) and the ratio tpu / gloo.
The tpu figure includes everything a user pays: the flush/stream ordering before the
collective and the completion hand-off after it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _time(fn, seconds: float) -> float:
    """Median seconds per call of fn over about `seconds` (after one warm-up call). Every rank
    runs the same number of calls (the largest any rank wants), or the collectives would not
    match up."""
    t0 = time.perf_counter()
    fn()
    want = torch.tensor([min(200, max(3, int(seconds / max(time.perf_counter() - t0, 1e-6))))])
    dist.all_reduce(want, op=dist.ReduceOp.MAX)  # CPU tensor: Gloo
    times = []
    for _ in range(int(want.item())):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _worker(rank: int, world: int, port: int, sizes: list[int], seconds: float) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    import torch_tpu  # noqa: F401  (registers the backend; the device count follows LOCAL_WORLD_SIZE)

    dev = torch.device("tpu", rank)
    torch.tpu.set_device(rank)
    dist.init_process_group("cpu:gloo,tpu:tpu", rank=rank, world_size=world)
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        res = {}
        for name in ("all_reduce", "all_gather"):
            per = {}
            for kind, device in (("tpu", dev), ("gloo", torch.device("cpu"))):
                if name == "all_reduce":
                    x = torch.ones(n, device=device)

                    def fn(x=x):
                        dist.all_reduce(x)
                    factor = 2 * (world - 1) / world
                else:
                    x = torch.ones(n // world, device=device)
                    out = torch.empty(n // world * world, device=device)

                    def fn(x=x, out=out):
                        dist.all_gather_into_tensor(out, x)
                    factor = (world - 1) / world
                dist.barrier()
                per[kind] = nbytes * factor / _time(fn, seconds) / 1e9
            res[name] = per
        rows.append((nbytes, res))
    if rank == 0:
        print(f"{'size':>9} | {'all_reduce busbw GB/s':>28} | {'all_gather busbw GB/s':>28}")
        print(f"{'':>9} | {'tpu':>8} {'gloo':>8} {'ratio':>9} | {'tpu':>8} {'gloo':>8} {'ratio':>9}")
        for nbytes, res in rows:
            size = f"{nbytes // 1024} KiB" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB"
            cells = []
            for name in ("all_reduce", "all_gather"):
                t, g = res[name]["tpu"], res[name]["gloo"]
                cells.append(f"{t:8.3f} {g:8.3f} {t / g:8.2f}x")
            print(f"{size:>9} | {cells[0]} | {cells[1]}")
        sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min-kib", type=int, default=4)
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--seconds", type=float, default=0.3, help="timing budget per measurement")
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
    mp.spawn(_worker, args=(a.ranks, port, sizes, a.seconds), nprocs=a.ranks)


if __name__ == "__main__":
    main()
