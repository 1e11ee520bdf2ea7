"""CI subset of the model coverage sweep (tools/model_sweep): a fixed, representative set of
architectures runs forward and one AdamW training step on "tpu" in strict and fused modes and
must match CPU. The full sweep (every architecture) is `python -m tools.model_sweep.sweep`.

The subset spans the families the sweep covers: decoder LMs (GPT-2, Llama, Qwen2), an encoder
(BERT), encoder-decoders (T5, BART), vision (ViT, ConvNeXt), speech (Whisper, Moonshine) and
diffusers' image models (a UNet2D with self-attention blocks, the AutoencoderKL of latent diffusion,
a class-conditioned diffusion transformer, DiT), and the two that compute in complex numbers:
Llama 4 (rotary embeddings through torch.polar and view_as_complex) and FNet (token mixing by FFT).
timm is not in the subset: it cannot be imported without torchvision (docs/model-coverage.md).
CTC heads (Wav2Vec2) wait for a ctc_loss lowering; the batch-norm CNNs (ResNet, MobileNet) are
out because their tiny train step is ill-conditioned (batch norm over 2 samples: CPU float32
itself differs from float64 as much as the device does, see docs/model-coverage.md).
"""

from __future__ import annotations

import pytest

from tools.model_sweep.check import run_target
from tools.model_sweep.sources import all_targets

SUBSET = ["gpt2", "llama", "qwen2", "bert", "t5", "bart", "vit", "convnext", "whisper", "moonshine",
          "unet2d", "autoencoder-kl", "dit", "llama4_text", "fnet"]
TARGETS = {t.model_type: t for t in all_targets(set(SUBSET))}


@pytest.mark.parametrize("model_type", SUBSET)
def test_model_matches_cpu(model_type):
    rec = run_target(TARGETS[model_type])
    assert "setup_error" not in rec, rec.get("setup_error")
    failures = {f"{mode} {kind}": rec[mode][kind] for mode in ("strict", "fused") for kind in ("forward", "train")
                if rec[mode][kind]["class"] != "pass"}
    assert not failures, failures
