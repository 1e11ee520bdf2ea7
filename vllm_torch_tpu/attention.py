"""Paged attention on "tpu" tensors, written with torch ops that lower through torch_tpu.

KV cache layout (vLLM's LBHNC, the CPU backend's): per layer `[num_blocks, num_kv_heads,
block_size, 2 * head_size]`, whose `[block_size * 2, head_size]` rows hold the block's keys
then its values. A step's metadata (built once, shared by every layer) pads the batch to
`[num_reqs, max_query_len]` queries against `[num_reqs, ceil(max_seq_len / block_size) *
block_size]` keys gathered through the block table, with an additive causal mask; each layer
is then two batched matmuls and a float32 softmax. No CPU kernel runs: every op here is a
tpu op (gather, matmul, softmax, index_put), so it runs wherever torch_tpu runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheLayout


class TpuAttentionBackend(AttentionBackend):
    """vLLM attention backend for torch_tpu (decoder self-attention, MHA and GQA)."""

    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "TORCH_TPU_ATTN"

    @staticmethod
    def get_impl_cls() -> type[TpuAttentionImpl]:
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[TpuAttentionMetadataBuilder]:
        return TpuAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int]:  # noqa: ANN001
        return [8, 16, 32, 64, 128]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any head size

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        return (KVCacheLayout.LBHNC,)

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class TpuAttentionMetadata:
    """One step's batch layout, shared by all layers (every tensor lives on the device)."""

    num_actual_tokens: int
    max_query_len: int
    num_kv_blocks: int  # blocks gathered per request: ceil(max_seq_len / block_size)
    block_table: torch.Tensor  # [num_reqs, num_kv_blocks] int64
    query_index: torch.Tensor  # [num_reqs, max_query_len] int64: flat token of each query slot
    output_index: torch.Tensor  # [num_actual_tokens] int64: padded query slot of each token
    mask: torch.Tensor  # [num_reqs, 1, 1, max_query_len, num_kv_blocks * block_size] additive
    slot_mapping: torch.Tensor


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    """Builds `TpuAttentionMetadata` from vLLM's common per-step metadata."""

    def __init__(self, kv_cache_spec: AttentionSpec, layer_names: list[str], vllm_config,  # noqa: ANN001
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        m = common_attn_metadata
        num_reqs, num_tokens = m.num_reqs, m.num_actual_tokens
        max_q = max(int(m.max_query_len), 1)
        num_blocks = max(-(-int(m.max_seq_len) // self.block_size), 1)
        qsl = m.query_start_loc_cpu[: num_reqs + 1].numpy().astype(np.int64)
        q_lens = np.diff(qsl)
        # Host-side index arithmetic on num_reqs / num_tokens integers, copied once per step.
        req_of_token = np.repeat(np.arange(num_reqs, dtype=np.int64), q_lens)
        output_index = req_of_token * max_q + (np.arange(num_tokens, dtype=np.int64) - qsl[req_of_token])
        query_index = np.minimum(qsl[:-1, None] + np.arange(max_q, dtype=np.int64)[None, :],
                                 max(num_tokens - 1, 0))
        dev = self.device
        seq_lens = m.seq_lens[:num_reqs].to(torch.int64)
        q_lens_dev = torch.from_numpy(q_lens).to(dev)
        # Position of each padded query slot in its sequence; key j is visible when j <= it.
        q_pos = (seq_lens - q_lens_dev)[:, None] + torch.arange(max_q, device=dev)[None, :]
        k_pos = torch.arange(num_blocks * self.block_size, device=dev)
        visible = k_pos[None, None, :] <= q_pos[:, :, None]
        mask = torch.zeros(visible.shape, dtype=torch.float32, device=dev).masked_fill(
            ~visible, float("-inf"))
        return TpuAttentionMetadata(
            num_actual_tokens=num_tokens,
            max_query_len=max_q,
            num_kv_blocks=num_blocks,
            block_table=m.block_table_tensor[:num_reqs, :num_blocks].to(torch.int64),
            query_index=torch.from_numpy(query_index).to(dev),
            output_index=torch.from_numpy(output_index).to(dev),
            mask=mask[:, None, None],
            slot_mapping=m.slot_mapping,
        )


def _split_cache(kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Key and value views `[num_blocks, num_kv_heads, block_size, head_size]` of one layer."""
    num_blocks, num_kv_heads, block_size, _ = kv_cache.shape
    kv = kv_cache.view(num_blocks, num_kv_heads, block_size * 2, -1)
    return kv[:, :, :block_size], kv[:, :, block_size:]


class TpuAttentionImpl(AttentionImpl):
    """Causal self-attention over the paged KV cache (see the module docstring)."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: list[float] | None, sliding_window: int | None,
                 kv_cache_dtype: str, logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None) -> None:
        unsupported = {"alibi_slopes": alibi_slopes, "sliding_window": sliding_window,
                       "logits_soft_cap": logits_soft_cap or None, "sinks": sinks}
        for name, value in unsupported.items():
            if value is not None:
                raise NotImplementedError(f"TpuAttentionBackend: {name} is not supported yet")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"TpuAttentionBackend: attention type {attn_type!r} "
                                      "is not supported (decoder self-attention only)")
        if kv_cache_dtype != "auto":
            raise NotImplementedError(f"TpuAttentionBackend: kv_cache_dtype={kv_cache_dtype!r} "
                                      "is not supported (auto only)")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.group = num_heads // num_kv_heads
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type

    def do_kv_cache_update(self, layer: torch.nn.Module, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Write the step's keys/values into their slots (padding slots, -1, go to the
        reserved null block 0, which no request reads)."""
        n = min(key.shape[0], slot_mapping.shape[0])
        key_cache, value_cache = _split_cache(kv_cache)
        block_size = key_cache.shape[2]
        slots = slot_mapping[:n].to(torch.int64).clamp(min=0)
        blocks, offsets = slots // block_size, slots % block_size
        key_cache[blocks, :, offsets] = key[:n].to(key_cache.dtype)
        value_cache[blocks, :, offsets] = value[:n].to(value_cache.dtype)

    def forward(self, layer: AttentionLayer, query: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor, kv_cache: torch.Tensor,
                attn_metadata: TpuAttentionMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        """query `[tokens, heads, head_size]` -> output (written in place)."""
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("TpuAttentionBackend: fused output quantization")
        if attn_metadata is None:  # profiling run
            return output
        md = attn_metadata
        n = md.num_actual_tokens
        key_cache, value_cache = _split_cache(kv_cache)
        num_reqs, num_blocks = md.block_table.shape
        hkv, hd, g, q_len = self.num_kv_heads, self.head_size, self.group, md.max_query_len
        seq = num_blocks * key_cache.shape[2]

        def gather(cache: torch.Tensor) -> torch.Tensor:  # -> [reqs, kv_heads, seq, head_size]
            return cache[md.block_table].permute(0, 2, 1, 3, 4).reshape(num_reqs, hkv, seq, -1)

        k, v = gather(key_cache), gather(value_cache)
        q = query[md.query_index]  # [reqs, q_len, heads, head_size]
        q = q.view(num_reqs, q_len, hkv, g, hd).permute(0, 2, 3, 1, 4).reshape(num_reqs, hkv, g * q_len, hd)
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * self.scale
        scores = scores.view(num_reqs, hkv, g, q_len, seq) + md.mask
        probs = torch.softmax(scores, dim=-1).view(num_reqs, hkv, g * q_len, seq)
        out = torch.matmul(probs, v.float())  # [reqs, kv_heads, g * q_len, head_size_v]
        hv = out.shape[-1]
        out = out.view(num_reqs, hkv, g, q_len, hv).permute(0, 3, 1, 2, 4).reshape(num_reqs * q_len, hkv * g, hv)
        output[:n].copy_(out[md.output_index].to(output.dtype).view(output[:n].shape))
        return output
