"""Picks the device at run time: the classic availability branch."""

import torch
from torch.utils.data import DataLoader, TensorDataset

if torch.cuda.is_available():
    device = "cuda"
else:
    device = "cpu"
fallback_device = "cuda" if torch.cuda.is_available() else "cpu"


def evaluate(model: torch.nn.Module, device: str = "cuda") -> float:
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4, pin_memory=True,
                        pin_memory_device="cuda")
    total = 0.0
    for (batch,) in loader:
        batch = batch.to(device, non_blocking=True)
        if batch.is_cuda:
            total += model(batch).sum().item()
    return total


if __name__ == "__main__":
    m = torch.nn.Linear(4, 1).to(device)
    print(evaluate(m, device), torch.device(device).type == "cuda")
