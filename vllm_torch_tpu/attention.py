"""Paged attention on "tpu" tensors, written with torch ops that lower through torch_tpu.

KV cache layout (vLLM's LBHNC, the CPU backend's): per layer `[num_blocks, num_kv_heads,
block_size, 2 * head_size]`, whose `[block_size * 2, head_size]` rows hold the block's keys
then its values. A step's metadata is built once on the host (numpy, from the runner's host
copy of the block table: no device read) and shared by every layer:

- KV write: one `index_copy_` per layer into the cache's rows (keys and values stacked, row
  indices made on the host once per step). The host runtime writes a scatter into its own
  operand in place (csrc/runtime/host/host_plan.cpp, plan_in_place_scatters), so only the
  rows written are touched. `index_copy_` (dim 0, one index list) takes ~17 us where the same
  write as `index_put_` takes ~40.
- Reads gather whole chunks, a block's keys (or values) of one head (`[block_size, head_size]`,
  contiguous), with `index_select`: 16x fewer indices than gathering rows, and `index_select`
  runs in a few us where advanced indexing (`x[i]`, `x[i, j]`) costs ~70 us on the host
  runtime whatever its size.
- One request (a single prompt's prefill, with or without a cached prefix, or one decode):
  one flash-attention op (`aten._flash_attention_forward`, bottom-right aligned causal, the
  key/value heads repeated inside the op for GQA) over the new keys and values as they are
  (no cached prefix) or over the request's cached keys (its blocks' chunks, as strided views).
- Several requests: keys and values of the blocks of the longest sequence gathered to
  `[reqs, kv_heads, blocks * block_size, head_size]` (one gather), a boolean causal/padding
  mask, and one `aten._scaled_dot_product_efficient_attention` op. A decode step (one query
  per request) takes the queries as the view `[reqs, kv_heads, group, head_size]` and writes
  the output through the same view: no gathers. Otherwise queries are padded to
  `[reqs, kv_heads, group * max_query_len]` by one row gather and the output gathered back to
  token order by another.

All index tensors are made on the host and copied in once per step; the cache is indexed as
the contiguous tensor it is (a gather through a strided key/value view of it made the host
runtime copy the whole view first). No CPU kernel runs: every op here is a tpu op.
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
    """One step's batch layout, shared by all layers (tensors on the device, made on the host)."""

    num_actual_tokens: int
    num_reqs: int
    max_query_len: int
    block_size: int
    # KV write: rows of the cache viewed as `[blocks * kv_heads * 2 * block_size, head_size]`
    # that the step's new keys (index 0) and values (index 1) go to, `[2, tokens, kv_heads]`
    # (None: no new tokens).
    write_rows: torch.Tensor | None
    # Chunks of the cache viewed as `[blocks * kv_heads * 2, block_size * head_size]` (one
    # chunk: a block's keys or values of one head) that attention reads, keys at index 0 and
    # values at index 1: `[2, reqs, kv_heads, blocks]`, the blocks of the longest sequence (one
    # request: its own blocks; None when nothing is cached, the new keys being all of them).
    kv_chunks: torch.Tensor | None = None
    seq_len: int = 0  # one request: its keys (the first seq_len of its blocks' rows)
    # Every request has one query token (a decode step): queries and output are views of
    # `[reqs, kv_heads, group, head_size]`, no gather.
    decode: bool = False
    host: dict | None = None  # host arrays the per-group-size index tensors are made from
    _by_group: dict | None = None

    def padded(self, group: int, kv_heads: int, device: torch.device
               ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        """Per group size (query heads per key/value head), built once per step: the rows of
        the queries viewed as `[tokens * heads, head_size]` that make the padded queries
        `[reqs, kv_heads, g*q]` (query slot j of group member i sits at column i * q + j), the
        boolean mask `[reqs, 1, g*q, seq]`, and the rows of the output viewed as
        `[reqs * kv_heads * g*q, head_size]` that go back to token order `[tokens, heads]`.
        A decode step needs the mask only (queries and output are views): the others are
        None. Row indices for `index_select`, which the host runtime runs in a few us, where
        advanced indexing `x[i, j]` costs ~70 us whatever its size."""
        key = (group, kv_heads)
        if self._by_group is None:
            self._by_group = {}
        hit = self._by_group.get(key)
        if hit is not None:
            return hit
        h = self.host
        q = self.max_query_len
        query_index, visible = h["query_index"], h["visible"]  # [reqs, q], [reqs, q, seq]
        reqs = visible.shape[0]
        mask = np.ascontiguousarray(np.broadcast_to(visible[:, None, None], (
            reqs, 1, group, q, visible.shape[2])).reshape(reqs, 1, group * q, -1))

        def dev(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(device)

        if self.decode:
            hit = (None, dev(mask), None)
        else:
            heads = kv_heads * group
            col = np.arange(group * q, dtype=np.int64)
            tok = query_index[:, None, col % q]  # [reqs, 1, g*q]
            head = (np.arange(kv_heads, dtype=np.int64)[:, None] * group + col[None, :] // q)[None]
            q_rows = (tok * heads + head).reshape(-1)  # [reqs * hkv * g*q]
            hs = np.arange(heads, dtype=np.int64)
            out_req = h["req_of_token"][:, None]  # [T, 1]
            out_col = (hs[None, :] % group) * q + h["pos_in_query"][:, None]  # [T, H]
            out_kvh = (hs // group)[None, :]
            out_rows = ((out_req * kv_heads + out_kvh) * (group * q) + out_col).reshape(-1)
            hit = (dev(q_rows), dev(mask), dev(out_rows))
        self._by_group[key] = hit
        return hit


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    """Builds `TpuAttentionMetadata` from vLLM's common per-step metadata, on the host."""

    def __init__(self, kv_cache_spec: AttentionSpec, layer_names: list[str], vllm_config,  # noqa: ANN001
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.num_kv_heads = kv_cache_spec.num_kv_heads
        self.runner = None  # TpuModelRunner sets itself here (its host block tables)

    def _host_block_table(self, device_table: torch.Tensor, num_reqs: int) -> np.ndarray:
        """The step's block table rows on the host: the runner's host copy of the device table
        (the one whose buffer `device_table` views), else a device read (one host sync)."""
        runner = self.runner
        batch = getattr(runner, "input_batch", None)
        for table in getattr(getattr(batch, "block_table", None), "block_tables", ()):
            buf = table.block_table
            if buf.gpu.data_ptr() == device_table.data_ptr() and buf.gpu.stride() == device_table.stride():
                return buf.np[:num_reqs]
        return device_table[:num_reqs].cpu().numpy()

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        m = common_attn_metadata
        bs = self.block_size
        num_reqs, num_tokens = m.num_reqs, m.num_actual_tokens
        qsl = m.query_start_loc_cpu[: num_reqs + 1].numpy().astype(np.int64)
        q_lens = np.diff(qsl)
        if m.seq_lens_cpu_upper_bound is not None:  # exact: no async scheduling, no spec decode
            seq_lens = m.seq_lens_cpu_upper_bound[:num_reqs].numpy().astype(np.int64)
        else:
            seq_lens = m.seq_lens[:num_reqs].cpu().numpy().astype(np.int64)
        ctx = seq_lens - q_lens
        max_q = max(int(q_lens.max()) if num_reqs else 1, 1)
        max_seq = int(seq_lens.max()) if num_reqs else 1
        num_blocks = max(-(-max_seq // bs), 1)
        table = self._host_block_table(m.block_table_tensor, num_reqs).astype(np.int64)
        dev = self.device
        hkv = self.num_kv_heads
        kv_of = np.array([0, bs], dtype=np.int64)

        def rows(blocks: np.ndarray, offsets: np.ndarray) -> np.ndarray:
            """Key row (kv 0) and value row (kv 1) of (block, head, offset)."""
            return (blocks * hkv * 2 * bs + offsets)  # + head * 2 * bs + kv * bs by the caller

        heads = np.arange(hkv, dtype=np.int64) * 2 * bs
        # KV write: token t of request r is position ctx[r] + (t - qsl[r]).
        write_rows = None
        if num_tokens > 0:
            req = np.repeat(np.arange(num_reqs, dtype=np.int64), q_lens)
            pos = ctx[req] + np.arange(num_tokens, dtype=np.int64) - qsl[req]
            base = rows(table[req, pos // bs], pos % bs)  # [tokens]
            w = kv_of[:, None, None] + base[None, :, None] + heads[None, None, :]
            write_rows = torch.from_numpy(np.ascontiguousarray(w)).to(dev)
        md = TpuAttentionMetadata(num_actual_tokens=num_tokens, num_reqs=num_reqs,
                                  max_query_len=max_q, block_size=bs, write_rows=write_rows)
        # Chunk (block, head, kv) of the cache viewed as `[-1, block_size * head_size]`: a
        # block's keys or values of one head, contiguous. Attention gathers whole chunks, 16x
        # fewer indices than rows (the host runtime's gather cost is per index).
        head_ids = np.arange(hkv, dtype=np.int64)
        kv_ids = np.arange(2, dtype=np.int64)

        def chunks(blocks: np.ndarray) -> np.ndarray:
            """`[2, *blocks.shape[:-1], kv_heads, blocks.shape[-1]]` chunk ids."""
            b = blocks[..., None, :]  # [..., 1, nblk]
            c = (b * hkv + head_ids[:, None]) * 2  # [..., hkv, nblk]
            return kv_ids.reshape((2,) + (1,) * c.ndim) + c[None]

        if num_reqs == 1:
            if ctx[0] > 0:
                md.seq_len = int(seq_lens[0])
                md.kv_chunks = torch.from_numpy(np.ascontiguousarray(
                    chunks(table[0, : -(-md.seq_len // bs)]))).to(dev)  # [2, hkv, nblk]
            return md
        md.decode = num_tokens == num_reqs and max_q == 1
        md.kv_chunks = torch.from_numpy(np.ascontiguousarray(
            chunks(table[:, :num_blocks]))).to(dev)  # [2, reqs, hkv, nblk]
        k_pos = np.arange(num_blocks * bs, dtype=np.int64)
        req_of_token = np.repeat(np.arange(num_reqs, dtype=np.int64), q_lens)
        pos_in_query = np.arange(num_tokens, dtype=np.int64) - qsl[req_of_token]
        query_index = np.minimum(qsl[:-1, None] + np.arange(max_q, dtype=np.int64)[None, :],
                                 max(num_tokens - 1, 0))
        # Query slot j of request r sits at position ctx[r] + j; key k is visible when k <= it.
        # Padding slots (j >= q_lens[r]) see key 0 so that their rows stay finite.
        q_pos = ctx[:, None] + np.arange(max_q, dtype=np.int64)[None, :]
        visible = k_pos[None, None, :] <= q_pos[:, :, None]
        md.host = {"query_index": query_index, "visible": visible, "req_of_token": req_of_token,
                   "pos_in_query": pos_in_query}
        return md


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
        """Write the step's keys/values into their slots: one `index_copy_` into the cache's
        rows (the row indices come from the step's metadata, made on the host)."""
        from vllm.forward_context import get_forward_context

        md = get_forward_context().attn_metadata
        if isinstance(md, dict):
            md = md.get(layer.layer_name)
        if md is None:
            return
        self._write_kv(key, value, kv_cache, md)

    @staticmethod
    def _write_kv(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                  md: TpuAttentionMetadata) -> None:
        if md.write_rows is None:
            return
        n = md.num_actual_tokens
        _, hkv, _, two_hs = kv_cache.shape  # [blocks, kv_heads, block_size, 2 * head_size]
        flat = kv_cache.view(-1, two_hs // 2)  # the cache's rows, contiguous
        kv = torch.stack((key[:n].view(n, hkv, -1), value[:n].view(n, hkv, -1)), dim=0)
        # [2 * tokens * kv_heads, head_size] rows in write_rows' order
        flat.index_copy_(0, md.write_rows.view(-1), kv.to(kv_cache.dtype).view(-1, two_hs // 2))

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
        if n == 0:
            return output
        hkv, g, h = self.num_kv_heads, self.group, self.num_heads
        out_view = output[:n].view(n, h, -1)
        query, key, value = query[:n], key[:n], value[:n]
        hs = self.head_size
        bs = md.block_size
        chunked = kv_cache.view(-1, bs * hs)  # [blocks * hkv * 2, bs * hs]: keys / values chunks
        if md.num_reqs == 1:
            if md.kv_chunks is None:  # nothing cached: the new keys are all the keys
                k, v = key.unsqueeze(0), value.unsqueeze(0)
            else:  # [2, hkv, nblk * bs, hs] -> [1, seq, hkv, hs] (strided views)
                kv = chunked.index_select(0, md.kv_chunks.view(-1)).view(2, hkv, -1, hs)
                kv = kv[:, :, : md.seq_len].transpose(1, 2)
                k, v = kv[0].unsqueeze(0), kv[1].unsqueeze(0)
            out = torch.ops.aten._flash_attention_forward(
                query.unsqueeze(0), k, v, None, None, n, k.shape[1], 0.0, True, False,
                scale=self.scale)[0]
            out_view.copy_(out.view(n, h, -1))
            return output
        q_rows, mask, out_rows = md.padded(g, hkv, query.device)
        reqs = md.num_reqs
        kv = chunked.index_select(0, md.kv_chunks.view(-1)).view(2, reqs, hkv, -1, hs)
        if md.decode:  # one query per request: [reqs, heads, hs] is [reqs, hkv, g, hs]
            q = query.reshape(reqs, hkv, g, hs)
        else:  # [reqs, hkv, g * q_len, head_size]
            q = query.reshape(n * h, hs).index_select(0, q_rows).view(reqs, hkv, -1, hs)
        out = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, kv[0], kv[1], mask, False, 0.0, False, scale=self.scale)[0]
        if md.decode:
            out_view.view(reqs, hkv, g, hs).copy_(out)
        else:
            out_view.copy_(out.reshape(-1, hs).index_select(0, out_rows).view(n, h, hs))
        return output
