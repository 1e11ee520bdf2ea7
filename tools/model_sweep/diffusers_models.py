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
    # tests/models/autoencoders/test_models_vq.py: vector quantization (nearest codebook entry,
    # straight-through gradient) between the encoder and the decoder.
    DiffusersModel(
        "vq-model", "VQModel", "encode + quantize + decode",
        dict(block_out_channels=[8, 16], norm_num_groups=8, in_channels=3, out_channels=3,
             down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2, latent_channels=3),
        lambda g: {"sample": torch.randn(BATCH, 3, 32, 32, generator=g)}),
    # tests/models/autoencoders/test_models_autoencoder_tiny.py, one block per level.
    DiffusersModel(
        "autoencoder-tiny", "AutoencoderTiny", "encode + decode",
        dict(in_channels=3, out_channels=3, encoder_block_out_channels=[32, 32], decoder_block_out_channels=[32, 32],
             num_encoder_blocks=[1, 1], num_decoder_blocks=[1, 1]),
        lambda g: {"sample": torch.randn(BATCH, 3, 32, 32, generator=g)}),
    # tests/models/unets/test_models_unet_1d.py (the temporal UNet of diffusion policies).
    DiffusersModel(
        "unet1d", "UNet1DModel", "noise prediction (1-D)",
        dict(block_out_channels=(8, 8, 16, 16), in_channels=14, out_channels=14, time_embedding_type="positional",
             use_timestep_embedding=True, flip_sin_to_cos=False, freq_shift=1.0, out_block_type="OutConv1DBlock",
             mid_block_type="MidResTemporalBlock1D", down_block_types=("DownResnetBlock1D",) * 4,
             up_block_types=("UpResnetBlock1D",) * 3, act_fn="swish"),
        lambda g: {"sample": torch.randn(BATCH, 14, 16, generator=g), "timestep": torch.tensor([10] * BATCH)}),
    # tests/models/transformers/test_models_dit_transformer2d.py: class-conditioned DiT (adaLN-zero).
    DiffusersModel(
        "dit", "DiTTransformer2DModel", "noise prediction (class-conditioned transformer)",
        dict(in_channels=4, out_channels=8, activation_fn="gelu-approximate", num_attention_heads=2,
             attention_head_dim=4, attention_bias=True, num_layers=1, norm_type="ada_norm_zero", num_embeds_ada_norm=8,
             patch_size=2, sample_size=8),
        lambda g: {"hidden_states": torch.randn(BATCH, 4, 8, 8, generator=g),
                   "timestep": torch.randint(0, 1000, (BATCH,), generator=g),
                   "class_labels": torch.randint(0, 4, (BATCH,), generator=g)}),
    # tests/models/transformers/test_models_pixart_transformer2d.py: text-conditioned, adaLN-single.
    DiffusersModel(
        "pixart", "PixArtTransformer2DModel", "noise prediction (cross-attention transformer)",
        dict(sample_size=8, num_layers=1, patch_size=2, attention_head_dim=2, num_attention_heads=2, in_channels=4,
             cross_attention_dim=8, out_channels=8, attention_bias=True, activation_fn="gelu-approximate",
             num_embeds_ada_norm=8, norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6,
             use_additional_conditions=False, caption_channels=None),
        lambda g: {"hidden_states": torch.randn(BATCH, 4, 8, 8, generator=g),
                   "timestep": torch.randint(0, 1000, (BATCH,), generator=g),
                   "encoder_hidden_states": torch.randn(BATCH, 8, 8, generator=g),
                   "added_cond_kwargs": {"aspect_ratio": None, "resolution": None}}),
    # tests/models/transformers/test_models_transformer_sd3.py (MMDiT, joint attention), 8x8 latents.
    DiffusersModel(
        "sd3", "SD3Transformer2DModel", "noise prediction (MMDiT)",
        dict(sample_size=8, patch_size=1, in_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=4,
             caption_projection_dim=32, joint_attention_dim=32, pooled_projection_dim=64, out_channels=4),
        lambda g: {"hidden_states": torch.randn(BATCH, 4, 8, 8, generator=g),
                   "encoder_hidden_states": torch.randn(BATCH, 8, 32, generator=g),
                   "pooled_projections": torch.randn(BATCH, 64, generator=g),
                   "timestep": torch.randint(0, 1000, (BATCH,), generator=g)}),
    # tests/models/transformers/test_models_transformer_flux.py (batch 1 and position ids without
    # a batch dimension, as there): double- and single-stream blocks with 3-axis RoPE.
    DiffusersModel(
        "flux", "FluxTransformer2DModel", "flow prediction (Flux)",
        dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
             num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8]),
        lambda g: {"hidden_states": torch.randn(1, 16, 4, generator=g),
                   "encoder_hidden_states": torch.randn(1, 8, 32, generator=g),
                   "pooled_projections": torch.randn(1, 32, generator=g),
                   "img_ids": torch.randn(16, 3, generator=g), "txt_ids": torch.randn(8, 3, generator=g),
                   "timestep": torch.tensor([1.0])}),
]

BY_NAME = {m.name: m for m in MODELS}


def build(name: str) -> torch.nn.Module:
    """The tiny model `name`, initialized under the caller's seed."""
    import diffusers
    m = BY_NAME[name]
    model = getattr(diffusers, m.class_name)(**m.init)
    _no_random_drops(model)
    return model


def _no_random_drops(model: torch.nn.Module) -> None:
    """Zero train-mode randomness (dropout, the class-label drop of classifier-free guidance).

    CPU and the device draw different random numbers, so a train step that drops activations
    or labels at random could not be compared (like the transformers configs' dropout = 0).
    """
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if isinstance(getattr(mod, "dropout_prob", None), float):  # embeddings.LabelEmbedding
            mod.dropout_prob = 0.0


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
