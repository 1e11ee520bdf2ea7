"""The diffusers source of the sweep: tiny UNets, autoencoders and diffusion transformers.

Diffusers' own tests build each model from a small init dict (tests/models/... in the diffusers
repository, not shipped in the wheel); the dicts below follow those, shrunk where the test's
input would be slow on a 2-core machine. Each entry gives the model class, its constructor
arguments and a function making the forward inputs; nothing is downloaded.

Training step: these models return a prediction (`.sample`) rather than a loss, so the step
uses the denoising objective their training scripts use, the mean squared error between the
prediction and a fixed random target of the same shape (the "noise"), see `loss_target`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

SOURCE = "diffusers"
BATCH = 2


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1)


@dataclasses.dataclass
class DiffusersModel:
    """One tiny diffusers model: class, constructor arguments and an input maker."""

    name: str
    class_name: str
    kind: str  # the table's "head" column: what the model computes
    init: dict[str, Any]
    inputs: Callable[[torch.Generator], dict[str, Any]]


MODELS: list[DiffusersModel] = [
    # tests/models/unets/test_models_unet_2d.py (Unet2DModelTests), batch 2 instead of 4.
    DiffusersModel(
        "unet2d", "UNet2DModel", "noise prediction",
        dict(block_out_channels=(4, 8), norm_num_groups=2, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
             up_block_types=("AttnUpBlock2D", "UpBlock2D"), attention_head_dim=3, out_channels=3, in_channels=3,
             layers_per_block=2, sample_size=32),
        lambda g: {"sample": torch.randn(BATCH, 3, 32, 32, generator=g), "timestep": torch.tensor([10])}),
    # tests/models/unets/test_models_unet_2d_condition.py: cross-attention on text states.
    DiffusersModel(
        "unet2d-condition", "UNet2DConditionModel", "noise prediction (cross-attention)",
        dict(block_out_channels=(4, 8), norm_num_groups=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
             up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=8, attention_head_dim=2,
             out_channels=4, in_channels=4, layers_per_block=1, sample_size=16),
        lambda g: {"sample": torch.randn(BATCH, 4, 16, 16, generator=g), "timestep": torch.tensor([10]),
                   "encoder_hidden_states": torch.randn(BATCH, 4, 8, generator=g)}),
    # tests/models/autoencoders/test_models_autoencoder_kl.py (get_autoencoder_kl_config); the
    # forward decodes the posterior's mode (sample_posterior=False), so it is deterministic.
    DiffusersModel(
        "autoencoder-kl", "AutoencoderKL", "encode + decode",
        dict(block_out_channels=[2, 4], in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
             up_block_types=["UpDecoderBlock2D"] * 2, latent_channels=4, norm_num_groups=2),
        lambda g: {"sample": torch.randn(BATCH, 3, 32, 32, generator=g)}),
]

BY_NAME = {m.name: m for m in MODELS}


def build(name: str) -> torch.nn.Module:
    """The tiny model `name`, initialized under the caller's seed."""
    import diffusers
    m = BY_NAME[name]
    return getattr(diffusers, m.class_name)(**m.init)


def make_inputs(name: str) -> dict[str, Any]:
    """Forward inputs for `name` (fixed generator: the same on every call)."""
    return BY_NAME[name].inputs(_gen())


def loss_target(prediction: torch.Tensor) -> torch.Tensor:
    """The fixed regression target of the training step (on CPU; moved by the caller)."""
    g = torch.Generator().manual_seed(2)
    return torch.randn(prediction.shape, generator=g, dtype=prediction.dtype)


def version() -> str:
    import diffusers
    return diffusers.__version__
