"""Concurrency: Python threads training on "tpu" at once, a thread synchronizing the device in a
loop meanwhile, and DataLoader worker processes feeding tpu training.

- four threads train four separate small models (different seeds and data) at the same time,
  while a fifth calls torch.tpu.synchronize() in a loop; every model's losses and final
  parameters are bit-equal to the same model trained alone in one thread (each thread's ops are
  in its own order on the stream; the other threads only interleave with them);
- DataLoader with 2 workers started by spawn (processes that import torch_tpu themselves and
  never touch the device) feeding tpu training equals the same training fed with
  num_workers=0, bit for bit.

Forked DataLoader workers (the default start method) and a forked child that uses the device
after the parent did (a clear RuntimeError in the child) are covered by
tests/device/test_fork.py and not repeated here.
"""

from __future__ import annotations

import threading

import pytest
import torch

import torch_tpu

STEPS = 15


def _train(seed: int, steps: int = STEPS) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Trains a small MLP with AdamW on tpu; returns the losses and the final parameters."""
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    model = model.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(steps)]
    losses = []
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_threads_training_at_once_match_single_thread_runs(mode: str) -> None:
    with torch_tpu.mode(mode):
        _threads_at_once(mode)


def _threads_at_once(mode: str) -> None:
    seeds = [11, 12, 13, 14]
    alone = {s: _train(s) for s in seeds}
    results: dict[int, tuple[list[float], dict[str, torch.Tensor]]] = {}
    errors: list[BaseException] = []
    stop = threading.Event()
    syncs = [0]

    def trainer(seed: int) -> None:
        try:
            results[seed] = _train(seed)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def synchronizer() -> None:
        try:
            while not stop.is_set():
                torch.tpu.synchronize()
                syncs[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    sync_thread = threading.Thread(target=synchronizer)
    sync_thread.start()
    threads = [threading.Thread(target=trainer, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    stop.set()
    sync_thread.join(60)
    assert not any(t.is_alive() for t in threads + [sync_thread]), "a thread hung"
    assert not errors, errors
    assert syncs[0] > 0
    for s in seeds:
        losses, state = results[s]
        assert losses == alone[s][0], (s, losses, alone[s][0])
        for k, v in state.items():
            assert torch.equal(v, alone[s][1][k]), (s, k)
    assert alone[seeds[0]][0][-1] < alone[seeds[0]][0][0]  # the models do train


class _Squares(torch.utils.data.Dataset):
    """Deterministic CPU samples (picklable, for spawned workers)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        x = torch.randn(16, generator=g)
        return x, (x * x).sum(0, keepdim=True)


def _loader_train(num_workers: int) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kwargs = {"multiprocessing_context": "spawn", "persistent_workers": False} if num_workers else {}
    losses = []
    for x, y in torch.utils.data.DataLoader(_Squares(), batch_size=8, num_workers=num_workers, **kwargs):
        loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses + model.weight.detach().cpu().flatten().tolist()


@pytest.mark.timeout(300)
def test_spawned_dataloader_workers_feed_fused_training() -> None:
    with torch_tpu.mode("fused"):
        want = _loader_train(0)
        got = _loader_train(2)
    assert len(got) == 8 + 16
    assert got == want
