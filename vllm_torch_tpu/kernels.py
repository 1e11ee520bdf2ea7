"""Torch implementations, on tpu tensors, of the Triton kernels vLLM's model runner launches.

vLLM routes a platform's replacements through `vllm.triton_utils.dispatcher.register_kernels`;
each function here takes the kernel's launch arguments (same names, same order).
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

# Model runners whose host-side step state (block tables, query offsets, computed-token
# counts) the kernels may read instead of computing from device tensors (TpuModelRunner).
_RUNNERS: "weakref.WeakSet" = weakref.WeakSet()


def register_runner(runner: object) -> None:
    _RUNNERS.add(runner)


# `_host_slot_mapping`'s answer when the owning runner's attention never reads the slot mapping.
_UNUSED = np.empty(0, dtype=np.int64)


def _host_slot_mapping(num_tokens: int, max_num_tokens: int, num_reqs: int,
                       block_table: torch.Tensor, bs: int, pad_id: int) -> np.ndarray | None:
    """The slot mapping from the runner's host copies (block table rows, query offsets and
    computed-token counts the device tensors were copied from), `_UNUSED` if the owning
    runner's attention backends never read it, or None if no registered runner owns
    `block_table`."""
    for runner in list(_RUNNERS):
        batch = getattr(runner, "input_batch", None)
        for table in getattr(getattr(batch, "block_table", None), "block_tables", ()):
            if table.block_table.gpu.data_ptr() != block_table.data_ptr():
                continue
            if getattr(runner, "slot_mapping_unused", False):
                return _UNUSED
            qsl = runner.query_start_loc.np[: num_reqs + 1].astype(np.int64)
            q_lens = np.diff(qsl)
            if int(qsl[-1]) != num_tokens:
                return None
            req = np.repeat(np.arange(num_reqs, dtype=np.int64), q_lens)
            pos = (batch.num_computed_tokens_cpu[:num_reqs].astype(np.int64)[req]
                   + np.arange(num_tokens, dtype=np.int64) - qsl[req])
            out = np.full(max_num_tokens, pad_id, dtype=np.int64)
            out[:num_tokens] = table.block_table.np[req, pos // bs].astype(np.int64) * bs + pos % bs
            return out
    return None


def compute_slot_mapping(num_tokens: int, max_num_tokens: int, query_start_loc: torch.Tensor,
                         positions: torch.Tensor, block_table: torch.Tensor,
                         block_table_stride: int, slot_mapping: torch.Tensor,
                         KV_CACHE_BLOCK_SIZE: int, TOTAL_CP_WORLD_SIZE: int = 1,  # noqa: N803
                         TOTAL_CP_RANK: int = 0, CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,  # noqa: N803
                         PAD_ID: int = -1, BLOCK_SIZE: int = 1024) -> None:  # noqa: N803
    """slot_mapping[t] = block_table[req(t), pos(t) // bs] * bs + pos(t) % bs; PAD_ID after.

    Computed on the host from the runner's copies of the inputs when a registered runner owns
    the block table (the usual case), else with device ops on the device tensors. Not computed
    at all (the buffer keeps stale values) when that runner says nothing reads it
    (`TpuModelRunner.slot_mapping_unused`: every layer on TpuAttentionBackend, which writes
    the KV cache by row indices of its own metadata, and no KV connector or speculative
    decoding)."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("torch_tpu vLLM platform: context parallelism is not supported")
    bs = KV_CACHE_BLOCK_SIZE
    if max_num_tokens > 0 and slot_mapping.dtype == torch.int64:
        host = _host_slot_mapping(num_tokens, max_num_tokens, query_start_loc.shape[0] - 1,
                                  block_table, bs, PAD_ID)
        if host is _UNUSED:  # TpuAttentionBackend writes by its own row indices
            return
        if host is not None:  # one host -> device copy instead of ~12 device ops
            slot_mapping[:max_num_tokens].copy_(torch.from_numpy(host))
            return
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
