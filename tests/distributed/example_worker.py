"""Worker for tests/distributed/test_distributed.py::test_unchanged_examples: training scripts
written as PyTorch's examples write them for CUDA, with "cuda" replaced by the current
accelerator and nothing tpu-specific: no torch.tpu.set_device and no init_process_group (the
DeviceMesh does both, from LOCAL_RANK, because torch.tpu.is_initialized() is False until then).

``python example_worker.py OUT_DIR`` under torchrun with 2 ranks writes one JSON line per check
to OUT_DIR/rank<r>.jsonl, like worker.py:
- fsdp2: FSDP2 (fully_shard per block) with Adam's foreach kernels, losses vs CPU;
- tp_sdpa: a 2-D mesh (dp=1, tp=2), attention with q/k/v column-parallel as DTensors
  (use_local_output=False, as TorchTitan's plan), so scaled_dot_product_attention runs on
  DTensors, plus fully_shard on the dp dimension; losses and gradients vs CPU.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import torch
import torch.nn.functional as F
from torch import nn

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
_out = open(os.path.join(sys.argv[1], f"rank{RANK}.jsonl"), "a")


def record(name: str, ok: bool, detail: str = "") -> None:
    _out.write(json.dumps({"check": name, "ok": ok, "detail": detail}) + "\n")
    _out.flush()


def check(name: str, fn) -> None:
    try:
        fn()
        record(name, True)
    except Exception:  # noqa: BLE001
        record(name, False, traceback.format_exc())


class Attention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.hd = dim // heads
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, -1, self.hd).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = Attention(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm(x))
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


STEPS = 4


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 64, (4, 12), generator=g), torch.randint(0, 64, (4, 12), generator=g))
            for _ in range(STEPS)]


def _train(model: nn.Module, device: str | torch.device) -> list[float]:
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)  # foreach kernels by default on an accelerator
    losses = []
    for x, y in _batches():
        logits = model(x.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = Model()
    losses = _train(model, "cpu")
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _full(v: torch.Tensor) -> torch.Tensor:
    return v.full_tensor() if isinstance(v, torch.distributed.tensor.DTensor) else v


def _compare(losses, model, ref) -> None:
    ref_losses, ref_state = ref
    # 1e-3: Adam steps amplify rounding differences, and the sharded runs sum gradients in another order.
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-3, atol=1e-3)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(_full(v).cpu(), ref_state[k], rtol=1e-3, atol=1e-3, msg=lambda m, k=k: f"{k}: {m}")


def phase_fsdp2(device_type: str, ref) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device_type, (WORLD,))
    record("mesh_set_the_device", torch.accelerator.current_device_index() == LOCAL_RANK,
           f"current {torch.accelerator.current_device_index()}, LOCAL_RANK {LOCAL_RANK}")
    torch.manual_seed(0)
    model = Model().to(device_type)  # "tpu": the rank's device, which the mesh made current
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    check("fsdp2_example_matches_cpu", lambda: _compare(_train(model, device_type), model, ref))


def phase_tp_sdpa(device_type: str, ref) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device_type, (1, WORLD), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Model().to(device_type)
    plan = {}
    for i in range(len(model.blocks)):
        for w in ("wq", "wk", "wv"):
            plan[f"blocks.{i}.attn.{w}"] = ColwiseParallel(use_local_output=False)
        plan[f"blocks.{i}.attn.wo"] = RowwiseParallel(input_layouts=torch.distributed.tensor.Shard(-1))
        plan[f"blocks.{i}.mlp.0"] = ColwiseParallel()
        plan[f"blocks.{i}.mlp.2"] = RowwiseParallel(output_layouts=Replicate())
    parallelize_module(model, mesh["tp"], plan)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    check("fsdp2_tp_sdpa_matches_cpu", lambda: _compare(_train(model, device_type), model, ref))


def main() -> None:
    device_type = torch.accelerator.current_accelerator().type
    record("accelerator_is_tpu", device_type == "tpu", device_type)
    record("not_initialized_before_the_mesh", not torch.tpu.is_initialized())
    ref = _reference()
    phase_fsdp2(device_type, ref)
    phase_tp_sdpa(device_type, ref)
    torch.distributed.destroy_process_group()
    record("done", True)
    _out.close()


if __name__ == "__main__":
    main()
