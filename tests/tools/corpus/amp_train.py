"""Mixed precision on CUDA: torch.cuda.amp's GradScaler and autocast."""

import torch
from torch import nn
from torch.cuda.amp import GradScaler, autocast


def main(steps: int = 30) -> None:
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = GradScaler(2.0**10)
    x = torch.randn(32, 16, device=device)
    target = torch.randint(0, 4, (32,), device=device)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with autocast(dtype=torch.float16):
            logits = model(x)
        loss = nn.functional.cross_entropy(logits.float(), target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    with torch.cuda.amp.autocast():
        assert model(x).dtype == torch.float16
    print(f"RESULT first={losses[0]:.6f} last={losses[-1]:.6f}")


if __name__ == "__main__":
    main()
