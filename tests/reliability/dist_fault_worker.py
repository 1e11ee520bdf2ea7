"""Rank process for tests/reliability/test_distributed_faults.py (launched without torchrun, one
process per rank, backend "tpu", like tests/distributed/test_distributed.py's killed-rank test).

``python dist_fault_worker.py SCENARIO OUT_DIR`` prints one JSON line {"rank", "scenario", ...}
to stdout when it finishes the scenario:
- midkill: both ranks all_reduce 16 MiB tensors in a loop; rank 1 SIGKILLs itself from a timer
  thread 1.5 s in, in the middle of a collective; rank 0 reports the exception its loop ended
  with and how long after the kill it came;
- mismatch: rank 0 all_reduces 4 elements, rank 1 5 elements; each reports what it got;
- mismatch_dtype: both all_reduce 4 elements, rank 0 float32, rank 1 int32 (the same bytes);
- mismatch_gather: all_gather_into_tensor with 4 + rank input elements (each rank's output is
  consistent with its own input);
- premul: all_reduce and reduce_scatter_tensor with ReduceOp.PREMUL_SUM, and reduce with it
  (refused); reports the values and the refusal;
- save: DDP training in fused mode; after step 2 rank 0 alone torch.saves the state dict, then
  both train step 3 and meet at a barrier; rank 1 reports its parameters as of step 2.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

import torch_tpu

RANK = int(os.environ["RANK"])
DEV = torch.device("tpu", 0)


def report(**fields: object) -> None:
    print(json.dumps({"rank": RANK, **fields}), flush=True)


def midkill() -> None:
    t = torch.ones(4 << 20, device=DEV)
    dist.all_reduce(t)
    t.cpu()
    if RANK == 1:
        threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    start = time.monotonic()
    n = 0
    try:
        for n in range(100_000):
            dist.all_reduce(t)
            if n % 4 == 0:
                t.cpu()
        report(scenario="midkill", raised=False, iterations=n)
    except Exception as e:  # noqa: BLE001 - what the test asserts on
        report(scenario="midkill", raised=True, error=f"{type(e).__name__}: {str(e)[:500]}",
               seconds_after_kill=time.monotonic() - start - 1.5, iterations=n)


def collective_outcome(scenario: str, collective: Callable[[], torch.Tensor]) -> None:
    """Runs one collective and reports the value it left, or the error it raised."""
    try:
        result = collective()
        report(scenario=scenario, raised=False, value=result.cpu().tolist())
    except Exception as e:  # noqa: BLE001 - what the test asserts on
        report(scenario=scenario, raised=True, error=f"{type(e).__name__}: {str(e)[:1500]}")


def all_reduced(t: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(t)
    return t


def mismatch() -> None:
    t = torch.ones(4 + RANK, device=DEV)
    collective_outcome("mismatch", lambda: all_reduced(t))


def mismatch_dtype() -> None:
    t = torch.ones(4, device=DEV, dtype=torch.float32 if RANK == 0 else torch.int32)
    collective_outcome("mismatch_dtype", lambda: all_reduced(t))


def mismatch_gather() -> None:
    inp = torch.ones(4 + RANK, device=DEV)
    out = torch.empty(2 * (4 + RANK), device=DEV)

    def gathered() -> torch.Tensor:
        dist.all_gather_into_tensor(out, inp)
        return out

    collective_outcome("mismatch_gather", gathered)


def premul() -> None:
    t = torch.full((4,), float(RANK + 1), device=DEV)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    inp = torch.arange(4, dtype=torch.float32, device=DEV) + 10 * RANK
    out = torch.empty(2, device=DEV)
    dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(0.25))
    try:
        dist.reduce(torch.ones(2, device=DEV), dst=0, op=dist._make_nccl_premul_sum(0.5))
        refused = ""
    except Exception as e:  # noqa: BLE001 - what the test asserts on
        refused = f"{type(e).__name__}: {e}"
    report(scenario="premul", all_reduce=t.cpu().tolist(), reduce_scatter=out.cpu().tolist(),
           input_after=inp.cpu().tolist(), refused=refused[:500])


def save(out_dir: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch_tpu.set_mode("fused")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(DEV))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(RANK)
    for step in range(3):
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
        loss = torch.nn.functional.mse_loss(model(x.to(DEV)), y.to(DEV))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1:
            if RANK == 0:
                torch.save(model.module.state_dict(), os.path.join(out_dir, "rank0.pt"))
            else:
                snapshot = {k: v.detach().cpu().tolist() for k, v in model.module.state_dict().items()}
    dist.barrier()
    torch.tpu.synchronize()
    report(scenario="save", finished=True, **({"state": snapshot} if RANK == 1 else {}))


def main() -> None:
    scenario, out_dir = sys.argv[1], sys.argv[2]
    timeout = datetime.timedelta(seconds=float(os.environ.get("TPU_TEST_PG_TIMEOUT", "10")))
    torch.tpu.set_device(0)
    dist.init_process_group("tpu", device_id=DEV, timeout=timeout)
    if scenario == "midkill":
        midkill()
        os._exit(0)  # the group has a dead member: no orderly teardown
    elif scenario.startswith("mismatch"):
        {"mismatch": mismatch, "mismatch_dtype": mismatch_dtype, "mismatch_gather": mismatch_gather}[scenario]()
        os._exit(0)  # a group whose collectives failed: no orderly teardown
    elif scenario == "premul":
        premul()
        dist.destroy_process_group()
    else:
        save(out_dir)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
