"""``torch.nn.attention.varlen.varlen_attn`` on "tpu" (TorchTitan's "varlen" attention backend).

PyTorch defines it as the custom ops ``torch_attn::_varlen_attn`` and
``torch_attn::_varlen_attn_backward``, whose one implementation calls
``aten._flash_attention_forward/_backward`` (lowered: torch_tpu/lowering/attention_varlen.py)
and keeps the dropout random state in a uint64 device tensor, a dtype tpu tensors do not take.
Custom ops let a backend register its own kernel per device (``torch.library.register_kernel``),
so we register "tpu" kernels that call the same aten ops and hold the (always zero: no dropout)
random state as a CPU tensor, which the backward never reads.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten


def _window(window_size: list[int] | None) -> tuple[int, int]:
    return (-1, -1) if window_size is None else (int(window_size[0]), int(window_size[1]))


def _forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seq_q: torch.Tensor,
             cu_seq_k: torch.Tensor | None, max_q: int, max_k: int, is_causal: bool = False,
             scale: float | None = None, window_size: list[int] | None = None, enable_gqa: bool = False,
             seqused_k: torch.Tensor | None = None, block_table: torch.Tensor | None = None,
             num_splits: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    left, right = _window(window_size)
    out, lse, *_ = aten._flash_attention_forward(
        query, key, value, cu_seq_q, cu_seq_k if cu_seq_k is not None else cu_seq_q, max_q, max_k, 0.0, is_causal,
        False, scale=scale, window_size_left=left, window_size_right=right, seqused_k=seqused_k,
        block_table=block_table, num_splits=num_splits)
    return out, lse, torch.zeros(2, dtype=torch.uint64)


def _backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              out: torch.Tensor, lse: torch.Tensor, cu_seq_q: torch.Tensor, cu_seq_k: torch.Tensor, max_q: int,
              max_k: int, is_causal: bool, rng_state: torch.Tensor, scale: float | None = None,
              window_size: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    left, right = _window(window_size)
    no_state = torch.zeros(2, dtype=torch.int64, device=query.device)
    unused = torch.empty(0, device=query.device)
    dq, dk, dv = aten._flash_attention_backward(
        grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, 0.0, is_causal, no_state, unused,
        scale=scale, window_size_left=left, window_size_right=right)
    return dq, dk, dv


def _register(module: Any) -> None:
    if getattr(module, "_torch_tpu_kernels", False):
        return
    torch.library.register_kernel("torch_attn::_varlen_attn", "tpu", _forward)
    torch.library.register_kernel("torch_attn::_varlen_attn_backward", "tpu", _backward)
    module._torch_tpu_kernels = True


ACTIONS = {"torch.nn.attention.varlen": _register}
