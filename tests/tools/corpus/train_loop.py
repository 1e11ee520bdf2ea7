"""A plain CUDA training loop: an MLP regressing a fixed random target."""

import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True  # speed up convolutions


def main(steps: int = 30) -> None:
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 16).to("cuda")
    y = torch.randn(64, 1).to(device="cuda:0", non_blocking=True)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    print(f"peak memory {torch.cuda.max_memory_allocated()} bytes on {torch.cuda.get_device_name()}")
    print(f"RESULT first={losses[0]:.6f} last={losses[-1]:.6f}")


if __name__ == "__main__":
    main()
