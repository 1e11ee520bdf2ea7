"""Out-of-tree implementations of vLLM custom ops that cost fewer device programs on "tpu".

Every torch op on a tpu tensor is one device program in strict mode (~10-15 us of host and
worker time each on the host runtime), so for small batches the op count is the cost.

`TpuRotaryEmbedding` (vLLM's `RotaryEmbedding`, Neox style, whole head rotated): vLLM's
`forward_native` spends ~17 programs per layer (a cos/sin gather, then per query and key
two muls, a sub/add and two concatenations). Here the tables C = `[cos, cos]` and
S = `[-sin, sin]` are gathered once per step (per positions tensor and cache), and the queries and
keys, which are neighbouring column ranges of the same qkv projection output, are rotated
together as one strided `[tokens, heads + kv_heads, head_size]` view:
`x * C + swap_halves(x) * S`, 4 programs per layer (C and S: one gather per step from a
table made once). The values are the same bits as
`forward_native`'s: `x1 * cos + x2 * (-sin)` rounds as `x1 * cos - x2 * sin` does. Any other
configuration (GPT-J style, partial rotary, no key, separate tensors) takes `forward_native`.

`TpuRMSNorm` (vLLM's `RMSNorm`): `F.rms_norm`, which torch_tpu runs as one program
(`aten._fused_rms_norm`, csrc/aten/rms_norm.cpp), where vLLM's native formula (float32 copy,
pow, mean, add, rsqrt, two muls) costs 7; with a residual, one add more. Float32 activations
and weight only: there both compute `x * rsqrt(mean(x^2) + eps) * w` in float32 (up to the
summation order of the mean). In lower precisions vLLM rounds to the weight's dtype before
the weight multiply and F.rms_norm does not, so those take `forward_native`, as do a weightless
norm and a variance over part of the hidden size.
"""

from __future__ import annotations

import torch

from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding


def _neighbours(query: torch.Tensor, key: torch.Tensor, head_size: int) -> torch.Tensor | None:
    """`[tokens, q_heads + kv_heads, head_size]` view over query and key when key's columns
    directly follow query's in one buffer (qkv.split(...) of a linear output), else None."""
    if query.dim() != 2 or key.dim() != 2 or query.dtype != key.dtype:
        return None
    if query.shape[0] != key.shape[0] or query.stride() != key.stride() or query.stride(1) != 1:
        return None
    qw, kw = query.shape[1], key.shape[1]
    if qw % head_size or kw % head_size:
        return None
    if key.data_ptr() != query.data_ptr() + qw * query.element_size():
        return None
    if query.untyped_storage().data_ptr() != key.untyped_storage().data_ptr():
        return None
    return query.as_strided((query.shape[0], (qw + kw) // head_size, head_size),
                            (query.stride(0), head_size, 1))


@RotaryEmbedding.register_oot
class TpuRotaryEmbedding(RotaryEmbedding):
    """vLLM's RotaryEmbedding with a tpu path of fewer programs (see the module docstring)."""

    _tables_key: tuple | None = None
    _tables: tuple[torch.Tensor, torch.Tensor] | None = None

    def _cos_sin(self, positions: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`[tokens, 1, head_size]` tables C = [cos, cos], S = [-sin, sin] for `positions`: one
        gather per step from a table made once per cache, reused by every layer of the step
        (same positions tensor, same contents version)."""
        table = _TABLES.get((cache.data_ptr(), cache.dtype))
        if table is None:  # [max_positions, 2, head_size]
            half = cache.shape[-1] // 2
            cos, sin = cache[:, :half], cache[:, half:]
            table = torch.stack((torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1)), 1)
            _TABLES[(cache.data_ptr(), cache.dtype)] = table
        key = (positions.data_ptr(), positions.shape[0], positions._version, table.data_ptr())
        cached = _STEP_TABLES.get(key)
        if cached is None:
            cs = table.index_select(0, positions.flatten())  # [tokens, 2, head_size]
            cached = (cs[:, 0:1], cs[:, 1:2])
            _STEP_TABLES.clear()
            _STEP_TABLES[key] = cached
        return cached

    def forward_oot(self, positions: torch.Tensor, query: torch.Tensor,
                    key: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if (query.device.type != "tpu" or key is None or not self.is_neox_style
                or self.rotary_dim != self.head_size or self.head_size % 2):
            return self.forward_native(positions, query, key)
        qk = _neighbours(query, key, self.head_size)
        if qk is None:
            return self.forward_native(positions, query, key)
        cache = self._match_cos_sin_cache_dtype(query)
        c, s = self._cos_sin(positions, cache)
        half = self.head_size // 2
        swapped = qk.roll(half, dims=-1)  # [x2, x1]
        out = qk * c + swapped * s  # [x1 cos - x2 sin, x2 cos + x1 sin]
        nq = query.shape[1] // self.head_size
        tokens = query.shape[0]
        return out[:, :nq].reshape(tokens, -1), out[:, nq:].reshape(tokens, -1)


_STEP_TABLES: dict = {}  # the current step's C and S (one entry)
_TABLES: dict = {}  # per cos/sin cache: [max_positions, 2, head_size] of C and S rows


@RMSNorm.register_oot
class TpuRMSNorm(RMSNorm):
    """vLLM's RMSNorm as one `F.rms_norm` program on tpu (see the module docstring)."""

    def forward_oot(self, x: torch.Tensor, residual: torch.Tensor | None = None
                    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        w = self.weight.data
        if (x.device.type != "tpu" or x.dtype != torch.float32 or w.dtype != torch.float32
                or not self.has_weight or self.variance_size_override is not None
                or (residual is not None and residual.dtype != torch.float32)):
            return self.forward_native(x, residual)
        if residual is None:
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, self.variance_epsilon)
        x = x + residual
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, self.variance_epsilon), x
