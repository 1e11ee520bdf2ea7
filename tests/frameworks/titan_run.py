"""Runs TorchTitan's llama3 debug model for a few steps and writes the losses (and tokens/s) as
JSON: ``python titan_run.py OUT.json ASSETS_DIR --device tpu|cpu [--mode strict|fused|compiled]
[--steps N] [--seq-len L] [--batch B]``, alone or under torchrun (FSDP over the ranks).

TorchTitan itself is unchanged. The config is its ``llama3_debugmodel_varlen_attn()`` (the
debug model with the "varlen" attention backend), or with ``--attn flex`` its
``llama3_debugmodel()`` (the default "flex" backend: FlexAttention under TorchTitan's own
``torch.compile``, which torch_tpu routes to the tpu backend; causal within each packed
document, as varlen, so the CPU reference is the varlen run: CPU's FlexAttention has no
backward). SDPA is no longer offered for language models. Both with test-sized
settings: offline tokenizer and data (assets.py), no checkpointing, validation or activation
checkpointing. Two test instruments, identical on both devices: the parameters are
overwritten after the trainer built the model with values drawn on the CPU from a fixed seed
(TorchTitan initializes on the device, and the tpu and CPU generators draw different
numbers), and the loss TorchTitan logs each step is recorded. ``--device cpu`` makes
TorchTitan, which supports accelerators only, see "cpu" as the available device type.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("assets")
    p.add_argument("--device", choices=["tpu", "cpu"], default="tpu")
    p.add_argument("--mode", choices=["strict", "fused", "compiled"], default="strict")
    p.add_argument("--attn", choices=["varlen", "flex"], default="varlen")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    return p.parse_args()


def main() -> None:
    args = _args()
    # TorchTitan 0.3.0 calls torch.distributed.set_timeout, public only in torch newer than our
    # pinned 2.13, which has it as _set_pg_timeout (same arguments). A version bridge, the same
    # for the CPU and tpu runs.
    if not hasattr(torch.distributed, "set_timeout"):
        from torch.distributed.distributed_c10d import _set_pg_timeout

        torch.distributed.set_timeout = _set_pg_timeout
    if args.device == "cpu":
        _cpu_as_device_type()
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # FSDP2 reduce-scatters with PREMUL_SUM, which Gloo lacks: the CPU reference's
            # collectives go through the tpu process-group backend, which takes CPU tensors
            # (its collectives are checked against Gloo in tests/distributed).
            import torch_tpu  # noqa: F401

            torch.distributed.Backend.default_device_backend_map["cpu"] = "tpu"
    else:
        import torch_tpu

        torch_tpu.set_mode("fused" if args.mode == "fused" else "strict")
    from torchtitan.models.llama3.config_registry import llama3_debugmodel, llama3_debugmodel_varlen_attn
    from torchtitan.tools.logging import init_logger

    init_logger()
    cfg = llama3_debugmodel() if args.attn == "flex" else llama3_debugmodel_varlen_attn()
    cfg.hf_assets_path = os.path.join(args.assets, "tokenizer")
    cfg.dataloader.dataset_path = os.path.join(args.assets, "data")
    cfg.training.seq_len = args.seq_len
    cfg.training.local_batch_size = args.batch
    cfg.training.steps = args.steps
    cfg.lr_scheduler.warmup_steps = 2
    cfg.checkpoint.enable = False
    cfg.validator.enable = False
    cfg.metrics.log_freq = 1
    # TorchTitan 0.3.0's default SPMD backend ("spmd_types") hands fully_shard arguments only a
    # torch newer than 2.13 takes; "partial_dtensor" is its DTensor path for model-parallel axes
    # with FSDP2 as torch 2.13 has it.
    cfg.parallelism.spmd_backend = "partial_dtensor"
    cfg.dump_folder = os.path.join(os.path.dirname(os.path.abspath(args.out)), "titan_dump")
    cfg.activation_checkpoint = None
    if args.mode == "compiled":
        cfg.compile.enable = True
        cfg.compile.components = ["model", "loss"]
        # TorchTitan refuses any backend but "inductor" and "aot_eager" around FlexAttention;
        # torch.compile's default routes tpu graphs to the tpu backend (compile/default_route.py).
        cfg.compile.backend = "inductor" if args.attn == "flex" else "tpu"
    trainer = cfg.build()
    _same_init(trainer)
    losses: list[float] = []
    times: list[float] = []
    log = trainer.metrics_processor.log

    def record(step, global_avg_loss, *a, **k):
        losses.append(float(global_avg_loss))
        times.append(time.perf_counter())
        return log(step, global_avg_loss, *a, **k)

    trainer.metrics_processor.log = record
    trainer.train()
    tokens = args.batch * args.seq_len * int(os.environ.get("WORLD_SIZE", "1"))
    # tokens/s over the steps after the first two (compilation, caches warming up)
    rate = tokens * (len(times) - 3) / (times[-1] - times[2]) if len(times) > 3 else float("nan")
    if int(os.environ.get("RANK", "0")) == 0:
        with open(args.out, "w") as f:
            json.dump({"losses": losses, "tokens_per_s": rate}, f)
    trainer.close()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _cpu_as_device_type() -> None:
    """The CPU baseline: TorchTitan supports accelerators only. It asks torch._utils for the
    device type and module at import; answer "cpu" and a torch.cpu with the few device-memory
    queries its memory monitor makes (no device memory: zeros)."""
    import types

    import torch._utils

    cpu = types.SimpleNamespace(**{k: getattr(torch.cpu, k) for k in dir(torch.cpu) if not k.startswith("__")})
    cpu.get_device_name = lambda *a: "cpu"
    cpu.current_device = lambda: 0  # torch.cpu answers "cpu"; a barrier wants an index
    cpu.get_device_properties = lambda *a: types.SimpleNamespace(total_memory=1 << 40, name="cpu")
    cpu.reset_peak_memory_stats = lambda *a: None
    cpu.empty_cache = lambda: None
    cpu.memory_stats = lambda *a: {}
    torch._utils._get_available_device_type = lambda: "cpu"
    torch._utils._get_device_module = lambda device_type=None: cpu
    _cpu_varlen_reference()


def _varlen_probs(q, k, cu_q, cu_k, is_causal, scale):
    """Softmax of the block-causal scores over packed documents, float32 [H, Tq, Tk]: a mask
    (same document, causal) from the offsets; the reference for the tpu lowering."""
    doc_q = (cu_q[1:, None] <= torch.arange(q.shape[0])[None]).sum(0)
    doc_k = (cu_k[1:, None] <= torch.arange(k.shape[0])[None]).sum(0)
    mask = doc_q[:, None] == doc_k[None, :]
    if is_causal:
        mask &= torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril()
    sc = scale if scale is not None else q.shape[-1] ** -0.5
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * sc
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1), sc


def _cpu_varlen_reference() -> None:
    """varlen_attn has no CPU kernel (it calls flash attention's CUDA op): CPU kernels for its
    custom ops from _varlen_probs, the backward written out (softmax's gradient)."""
    import torch.nn.attention.varlen  # noqa: F401  (defines the custom ops)

    def fwd(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, scale=None, window_size=None,
            enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
        p, _ = _varlen_probs(query, key, cu_seq_q, cu_seq_k if cu_seq_k is not None else cu_seq_q, is_causal, scale)
        out = torch.einsum("hqk,khd->qhd", p, value.float()).to(query.dtype)
        lse = torch.zeros(query.shape[1], query.shape[0])  # unused by the backward below
        return out, lse, torch.zeros(2, dtype=torch.uint64)

    def bwd(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, rng_state,
            scale=None, window_size=None):
        p, sc = _varlen_probs(query, key, cu_seq_q, cu_seq_k, is_causal, scale)
        g, q, k, v = (t.float() for t in (grad_out, query, key, value))
        dv = torch.einsum("hqk,qhd->khd", p, g)
        dp = torch.einsum("qhd,khd->hqk", g, v)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        dq = torch.einsum("hqk,khd->qhd", ds, k) * sc
        dk = torch.einsum("hqk,qhd->khd", ds, q) * sc
        return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)

    torch.library.register_kernel("torch_attn::_varlen_attn", "cpu", fwd)
    torch.library.register_kernel("torch_attn::_varlen_attn_backward", "cpu", bwd)


def _same_init(trainer) -> None:
    """Every parameter from a CPU generator with a fixed seed, in name order; sharded (DTensor)
    parameters take their shard of the same full values."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for model in trainer.model_parts:
            for name, p in sorted(model.named_parameters()):
                full = torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.02
                if name.endswith("norm.weight") or ".norm" in name and name.endswith("weight"):
                    full = torch.ones(p.shape)
                if isinstance(p, DTensor):
                    p.copy_(distribute_tensor(full.to(p.device_mesh.device_type), p.device_mesh, p.placements))
                else:
                    p.copy_(full)


if __name__ == "__main__":
    sys.exit(main())
