"""Worker and model runner for the "tpu" device.

The honest route that vLLM's own CPU platform takes: reuse vLLM's V1 GPU model runner (input
batching, scheduling glue, sampler) with a device of our own. Unlike the CPU runner, the
device-side buffers stay on "tpu": token ids, positions, block tables and slot mappings are
copied host -> tpu each step, the weights and the KV cache are tpu tensors, and sampling runs
on tpu. `TpuWorker` takes vLLM's CPU worker's lifecycle (no CUDA graphs, no sleep mode) with
torch.tpu's memory queries in place of the host's NUMA-node ones.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn as nn
import torch_tpu  # noqa: F401

import vllm_torch_tpu.custom_ops  # noqa: F401  (registers the out-of-tree custom ops)

from vllm.logger import init_logger
from vllm.model_executor.model_loader import get_model
from vllm.platforms import current_platform
from vllm.utils.mem_utils import format_gib
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment

logger = init_logger(__name__)


class TpuModelRunner(GPUModelRunner):
    """vLLM's V1 model runner with its device tensors on "tpu"."""

    def __init__(self, vllm_config, device: torch.device) -> None:  # noqa: ANN001
        if device.type != "tpu":
            raise ValueError(f"TpuModelRunner needs a tpu device, got {device}")
        super().__init__(vllm_config, device)
        self.use_cuda_graph = False
        # Whether nothing reads the per-step slot mapping (set once the attention backends are
        # known): then the slot-mapping kernel skips it (kernels.py).
        self.slot_mapping_unused = False
        self._host_position_inputs()
        from vllm_torch_tpu.kernels import register_runner

        register_runner(self)  # the slot-mapping kernel reads our host block tables

    def _host_position_inputs(self) -> None:
        """Keep the inputs of the positions and sequence lengths on the host.

        vLLM's `_prepare_inputs` copies the request index of every token, its offset in the
        query, the scheduled-token counts and the computed-token counts to the device, one
        staged copy each, only to combine them there (`positions = num_computed_tokens[
        req_indices] + query_pos`, `seq_lens = num_computed_tokens + num_scheduled_tokens`):
        a ~70 us advanced-indexing program, a convert and two adds. With those four on the
        host (the "device" side of their buffers is the host tensor, as vLLM's CPU runner does
        for all of them) the same lines compute on the host and each result reaches the
        device in one copy. Nothing else reads them on the device without speculative
        decoding or decode context parallelism (the paths that do: async drafts' corrections,
        DCP dummy runs), so that is when this applies.
        """
        if self.speculative_config is not None or self.parallel_config.decode_context_parallel_size > 1:
            return
        for buf in (self.req_indices, self.query_pos, self.num_scheduled_tokens):
            buf.gpu = buf.cpu
        self.num_computed_tokens = torch.zeros_like(self.num_computed_tokens, device="cpu")

    def load_model(self, load_dummy_weights: bool = False) -> None:
        """Load the checkpoint straight onto the device (vLLM's loader, target device tpu)."""
        if load_dummy_weights:
            raise ValueError("TpuModelRunner: dummy weights (elastic EP scale-up) are not supported")
        logger.info("Loading model %s onto %s", self.model_config.model, self.device)
        self.model = get_model(vllm_config=self.vllm_config)
        if self.lora_config:
            raise NotImplementedError("TpuModelRunner: LoRA is not supported yet")

    def get_model(self) -> nn.Module:
        return self.model

    def initialize_metadata_builders(self, kv_cache_config, kernel_block_sizes: list[int]) -> None:  # noqa: ANN001
        """vLLM's builders; ours also get the runner, to read its host copy of the block table."""
        super().initialize_metadata_builders(kv_cache_config, kernel_block_sizes)
        from vllm_torch_tpu.attention import TpuAttentionBackend

        ours = True
        for groups in self.attn_groups:
            for group in groups:
                ours = ours and issubclass(group.backend, TpuAttentionBackend)
                for builder in group.metadata_builders:
                    if hasattr(builder, "runner"):
                        builder.runner = self
        # TpuAttentionBackend writes keys/values by row indices it makes from the host block
        # table; the slot mapping is read only by other backends, KV connectors and drafters.
        self.slot_mapping_unused = (ours and bool(self.attn_groups)
                                    and self.vllm_config.kv_transfer_config is None
                                    and self.speculative_config is None)

    def initialize_kv_cache(self, kv_cache_config, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        """vLLM's, then the block tables stay on the host when only our attention reads them."""
        super().initialize_kv_cache(kv_cache_config, *args, **kwargs)
        if self.slot_mapping_unused:
            # Every reader of the block table (TpuAttentionMetadataBuilder and the slot-mapping
            # kernel) takes the host copy it finds by the device table's data_ptr; aliasing the
            # device side to the host tensor (as vLLM's CPU runner does) keeps that lookup and
            # drops the per-step staged copy of the table.
            for table in self.input_batch.block_table.block_tables:
                table.block_table.gpu = table.block_table.cpu

    def warming_up_model(self) -> None:
        """Nothing to compile: the model runs eagerly (per-op programs are cached on first use)."""

    def _sync_device(self) -> None:
        torch.tpu.synchronize()

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        """Zero newly allocated full-attention blocks (stale data under partial writes)."""
        if not block_ids:
            return
        index = torch.tensor(block_ids, dtype=torch.int64, device=self.device)
        seen: set[int] = set()
        for group in self.kv_cache_config.kv_cache_groups:
            if not isinstance(group.kv_cache_spec, FullAttentionSpec):
                continue
            for name in group.layer_names:
                ctx = self.compilation_config.static_forward_context.get(name)
                kv = getattr(ctx, "kv_cache", None)
                if isinstance(kv, torch.Tensor) and kv.data_ptr() not in seen:
                    seen.add(kv.data_ptr())
                    kv.index_fill_(0, index, 0)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        return sampled_token_ids.tolist()  # a host read: waits for the step's queued work


class TpuWorker(CPUWorker):
    """One engine worker on one tpu device."""

    def __init__(self, vllm_config, local_rank: int, rank: int,  # noqa: ANN001
                 distributed_init_method: str, is_driver_worker: bool = False) -> None:
        # CPUWorker.__init__ binds host NUMA memory; we only want the base Worker's setup.
        Worker.__init__(self, vllm_config, local_rank, rank, distributed_init_method,
                        is_driver_worker=is_driver_worker)
        self.parallel_config.disable_custom_all_reduce = True

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager:
        """No sleep-mode memory pool: weights and KV cache come from torch_tpu's allocator."""
        return nullcontext()

    def init_device(self) -> None:
        self.device = torch.device("tpu", self.local_rank)
        current_platform.set_device(self.device)
        init_worker_distributed_environment(self.vllm_config, self.rank,
                                            self.distributed_init_method, self.local_rank,
                                            current_platform.dist_backend)
        set_random_seed(self.model_config.seed)
        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def determine_available_memory(self) -> int:
        """KV cache bytes: `kv_cache_memory_bytes` if given (checked against free device
        memory), else `gpu_memory_utilization` of the device's capacity less what is
        allocated now (the weights)."""
        free, total = torch.tpu.mem_get_info(self.device)
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit is not None:
            if explicit > free:
                raise ValueError(
                    f"kv_cache_memory_bytes ({format_gib(explicit)} GiB) exceeds the free memory "
                    f"of {self.device} ({format_gib(free)}/{format_gib(total)} GiB); lower it or "
                    "raise TORCH_TPU_HOST_MEMORY")
            return explicit
        used = torch.tpu.memory_allocated(self.device)
        budget = int(total * self.cache_config.gpu_memory_utilization) - used
        if budget <= 0:
            raise ValueError(
                f"gpu_memory_utilization={self.cache_config.gpu_memory_utilization} of "
                f"{self.device} ({format_gib(total)} GiB) leaves nothing for the KV cache after "
                f"{format_gib(used)} GiB of weights; raise it or set kv_cache_memory_bytes")
        logger.info("KV cache: %s GiB of %s (%s GiB allocated)", format_gib(budget), self.device,
                    format_gib(used))
        return budget
