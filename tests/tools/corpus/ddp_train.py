"""DDP under torchrun: NCCL process group, one GPU per local rank."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    device = f"cuda:{local_rank}"
    model = DDP(torch.nn.Linear(8, 8).to(device), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8, device=device)).sum().backward()
        opt.step()
    group = dist.new_group(ranks=list(range(world_size)), backend="nccl")
    dist.barrier(group)
    print(f"rank {dist.get_rank()} on {torch.cuda.current_device()} of {torch.cuda.device_count()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
