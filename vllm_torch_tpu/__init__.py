"""vLLM platform plugin for torch_tpu: `vllm serve` and `LLM(...).generate` on the "tpu" device.

vLLM calls `register()` through the `vllm.platform_plugins` entry point; see docs/vllm.md.
"""


def register() -> str | None:
    """Name the platform class when torch_tpu imports and has a device, else None."""
    try:
        import torch
        import torch_tpu  # noqa: F401
    except ImportError:
        return None
    if not torch.tpu.is_available():
        return None
    return "vllm_torch_tpu.platform.TpuPlatform"
