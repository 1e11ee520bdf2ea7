"""Torch implementations, on tpu tensors, of the Triton kernels vLLM's model runner launches.

vLLM routes a platform's replacements through `vllm.triton_utils.dispatcher.register_kernels`;
each function here takes the kernel's launch arguments (same names, same order).
"""

from __future__ import annotations

import torch


def compute_slot_mapping(num_tokens: int, max_num_tokens: int, query_start_loc: torch.Tensor,
                         positions: torch.Tensor, block_table: torch.Tensor,
                         block_table_stride: int, slot_mapping: torch.Tensor,
                         KV_CACHE_BLOCK_SIZE: int, TOTAL_CP_WORLD_SIZE: int = 1,  # noqa: N803
                         TOTAL_CP_RANK: int = 0, CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,  # noqa: N803
                         PAD_ID: int = -1, BLOCK_SIZE: int = 1024) -> None:  # noqa: N803
    """slot_mapping[t] = block_table[req(t), pos(t) // bs] * bs + pos(t) % bs; PAD_ID after."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("torch_tpu vLLM platform: context parallelism is not supported")
    bs = KV_CACHE_BLOCK_SIZE
    if num_tokens > 0:
        dev = slot_mapping.device
        token = torch.arange(num_tokens, device=dev)
        ends = query_start_loc[1:].to(torch.int64)
        # The request of token t: how many requests end at or before t.
        req = (ends[None, :] <= token[:, None]).sum(dim=1)
        pos = positions[:num_tokens].to(torch.int64)
        table = block_table.view(-1, block_table_stride)
        block = table[req, pos // bs].to(torch.int64)
        slot_mapping[:num_tokens] = (block * bs + pos % bs).to(slot_mapping.dtype)
    if max_num_tokens > num_tokens:
        slot_mapping[num_tokens:max_num_tokens] = PAD_ID


OVERRIDES = {
    "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping,
}
