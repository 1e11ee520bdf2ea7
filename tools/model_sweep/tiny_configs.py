"""Which Hugging Face architectures the sweep covers, and a tiny configuration for each.

Transformers' own tests make tiny models with per-model "tester" classes that are not shipped
in the wheel, so the configuration is derived generically here: start from the config class
defaults and shrink every size-like attribute the library uses (layer counts, widths, heads,
vocabulary, image/audio sizes) through a table of known attribute names, recursively for
composite configs (text_config, vision_config, encoder/decoder). A few families need an
explicit override, kept in FAMILY_OVERRIDES with the reason. Dropout-like probabilities are
set to 0 so that CPU and device compute the same function in train mode.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# Task heads in the order an architecture's representative class is picked: an encoder-decoder
# model is tested through its seq2seq head rather than its decoder-only CausalLM class, and an
# encoder (BERT-style) through its masked-LM head rather than its LM-head decoder variant.
HEADS: list[tuple[str, str]] = [
    ("seq2seq-lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("speech-seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("causal-lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("image-classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("ctc", "MODEL_FOR_CTC_MAPPING_NAMES"),
    ("audio-classification", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES"),
    ("sequence-classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
]

HIDDEN = 32
HEADS_N = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS_N
FFN = 64
LAYERS = 2
VOCAB = 128

# attribute name -> tiny value (applied when the default is an int larger than the tiny value).
_INT_SIZES: dict[str, int] = {
    # depth
    "num_hidden_layers": LAYERS, "num_layers": LAYERS, "n_layer": LAYERS, "n_layers": LAYERS,
    "encoder_layers": LAYERS, "decoder_layers": LAYERS, "num_decoder_layers": LAYERS,
    "num_encoder_layers": LAYERS, "num_adapter_layers": 1, "first_k_dense_replace": 1,
    "num_nextn_predict_layers": 0, "max_window_layers": LAYERS,
    # width
    "hidden_size": HIDDEN, "d_model": HIDDEN, "n_embd": HIDDEN, "embed_dim": HIDDEN,
    "embedding_size": HIDDEN, "output_hidden_size": HIDDEN, "classifier_proj_size": 16,
    "intermediate_size": FFN, "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN, "d_ff": FFN,
    "ffn_dim": FFN, "n_inner": FFN, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "shared_intermediate_size": 32, "projection_dim": HIDDEN, "pooler_output_size": HIDDEN,
    "hidden_dim": HIDDEN, "word_embed_proj_dim": HIDDEN, "d_inner": FFN,
    # attention
    "num_attention_heads": HEADS_N, "n_head": HEADS_N, "n_heads": HEADS_N, "num_heads": HEADS_N,
    "encoder_attention_heads": HEADS_N, "decoder_attention_heads": HEADS_N,
    "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "d_kv": HEAD_DIM, "d_head": HEAD_DIM,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": HEAD_DIM, "qk_nope_head_dim": HEAD_DIM,
    "v_head_dim": HEAD_DIM, "qk_head_dim": 2 * HEAD_DIM, "index_head_dim": HEAD_DIM, "index_n_heads": 2,
    "index_topk": 4, "linear_key_head_dim": HEAD_DIM, "linear_value_head_dim": HEAD_DIM,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "rotary_dim": HEAD_DIM,
    "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16,
    # mixture of experts
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_topk": 2, "n_shared_experts": 1, "num_shared_experts": 1, "n_group": 1, "topk_group": 1,
    # vocabulary and positions
    "vocab_size": VOCAB, "max_position_embeddings": 128, "n_positions": 128, "n_ctx": 128,
    "max_source_positions": 16, "max_target_positions": 32, "max_2d_position_embeddings": 128,
    # vision
    "image_size": 32, "patch_size": 4, "encoder_stride": 4, "num_channels": 3,
    # audio
    "num_mel_bins": 16, "input_feat_per_channel": 16, "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4, "tdnn_dim": 32, "xvector_output_dim": 16,
    "num_codevectors_per_group": 8, "codevector_dim": 16, "proj_codevector_dim": 16,
    # state-space models
    "state_size": 8, "mamba_d_state": 8, "mamba_n_heads": 4, "mamba_d_head": 8, "time_step_rank": 4,
    "mamba_chunk_size": 8, "chunk_size": 8, "conv_kernel": 4,
    # misc
    "num_labels": 2, "block_size": 8, "window_size": 4, "attention_window": 4,
}

# List-valued sizes (per-stage widths/depths of hierarchical vision models, conv stacks).
_LIST_SIZES: dict[str, str] = {
    "depths": "ones", "hidden_sizes": "widths", "embed_dims": "widths", "dims": "widths",
    "num_heads": "heads", "conv_dim": "const32", "tdnn_dim": "const32", "channels": "widths",
    "encoder_hidden_sizes": "widths", "decoder_hidden_sizes": "widths", "neck_hidden_sizes": "widths",
    "num_attention_heads": "heads", "depth": "ones", "sr_ratios": "keep", "layer_types": "truncate",
    "mlp_layer_types": "truncate", "block_repeats": "ones", "stage_depths": "ones",
}

_ZERO_FLOAT_MARKERS = ("dropout", "drop_path", "drop_connect", "layerdrop", "drop_rate", "mask_time_prob",
                       "mask_feature_prob", "stochastic_depth", "attn_pdrop", "resid_pdrop",
                       "embd_pdrop", "hidden_pdrop", "attention_pdrop", "summary_first_dropout")

_TOKEN_ID_MARKERS = ("_token_id", "_token_index", "_id")

# Families whose generic shrink is not a valid configuration; each entry says why.
FAMILY_OVERRIDES: dict[str, dict[str, Any]] = {
    # The encoder downsamples the feature sequence 4x per conv layer; 2 layers need >= 16 frames.
    "speech_to_text": {"max_source_positions": 64, "num_conv_layers": 2},
    # Whisper's encoder requires exactly 2 * max_source_positions input frames.
    "whisper": {"max_source_positions": 16},
    # Reformer's chunked attention needs the sequence length to be a multiple of the chunk
    # lengths and its axial position embedding shape to multiply to the sequence length.
    "reformer": {"axial_pos_shape": [4, 4], "axial_pos_embds_dim": [16, 16], "lsh_attn_chunk_length": 4,
                 "local_attn_chunk_length": 4, "attn_layers": ["local", "lsh"], "max_position_embeddings": 16},
    # EfficientNet's top convolution has round_filters(1280) channels (scaled by
    # width_coefficient) while its batch norm and classifier use hidden_dim: the two must agree
    # (1280 * 0.25 = 320); depth_coefficient 0.5 halves the block repeats (16 -> 10 blocks).
    "efficientnet": {"width_coefficient": 0.25, "depth_coefficient": 0.5, "hidden_dim": 320},
    # Swin's relative-position bias is sized for window_size at init, but a stage whose feature
    # map is smaller than the window attends over the whole (smaller) map: 32x32 images in
    # 4x4 patches give 8/4/2 maps over three stages, so windows of 2 fit every stage.
    "swin": {"depths": [1, 1, 1], "num_heads": [2, 2, 2], "window_size": 2},
    "donut-swin": {"depths": [1, 1, 1], "num_heads": [2, 2, 2], "window_size": 2},
    # BiT's group norms use num_groups groups of the (tiny) bottleneck width 16 / 4 = 4 channels.
    "bit": {"num_groups": 2},
    # LeViT's patch embedding always downsamples 16x (four stride-2 convs) while its attention
    # biases are sized from image_size // patch_size: patch_size must be 16 (64x64 -> 4x4 tokens).
    "levit": {"patch_size": 16, "image_size": 64},
    # CvT indexes the per-layer drop-path rates by stage number, so stage i needs >= i + 1
    # layers; its embed_dim is a per-stage list (not a shrunk int attribute).
    "cvt": {"depth": [1, 2, 3], "embed_dim": [16, 32, 64]},
    # MobileViTv2 downsamples 32x and then unfolds 2x2 patches: 64x64 images leave a 2x2 map;
    # width_multiplier scales its (otherwise fixed) attention widths 128-256.
    "mobilevitv2": {"image_size": 64, "width_multiplier": 0.25, "n_attn_blocks": [1, 1, 1]},
    # Funnel's pooling needs block sizes that halve the (short) sequence at most twice.
    "funnel": {"block_sizes": [1, 1], "num_decoder_layers": 1},
}


def _is_config(v: Any) -> bool:
    from transformers import PretrainedConfig
    return isinstance(v, PretrainedConfig)


def _shrink_list(kind: str, value: list, n_layers: int) -> list:
    if kind == "ones":
        return [1] * len(value)
    if kind == "widths":
        return [16 * (2 ** min(i, 2)) for i in range(len(value))]
    if kind == "heads":
        return [2] * len(value)
    if kind == "const32":
        return [32] * len(value)
    if kind == "truncate":
        return list(value[:n_layers])
    return value


def shrink(config: Any, model_type: str | None = None) -> Any:
    """Shrink a config in place (recursively through sub-configs) and return it."""
    d = config.to_dict() if hasattr(config, "to_dict") else {}
    n_layers = LAYERS
    for name, value in list(vars(config).items()):
        if name.startswith("_"):
            continue
        if _is_config(value):
            shrink(value)
            continue
        if isinstance(value, dict) and name.endswith("_config") and "model_type" in value:
            continue  # serialized sub-config; the live object is handled above
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and name in _INT_SIZES:
            tiny = _INT_SIZES[name]
            if value > tiny or name in ("num_labels",):
                setattr(config, name, tiny)
        elif isinstance(value, list) and name in _LIST_SIZES and value and all(
                isinstance(x, (int, str)) for x in value):
            setattr(config, name, _shrink_list(_LIST_SIZES[name], value, n_layers))
        elif isinstance(value, float) and any(m in name for m in _ZERO_FLOAT_MARKERS):
            setattr(config, name, 0.0)
        elif (isinstance(value, (list, tuple)) and value and all(isinstance(x, float) for x in value)
              and any(m in name for m in _ZERO_FLOAT_MARKERS)):  # per-stage rates (CvT)
            setattr(config, name, [0.0] * len(value))
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        # Special token ids of the full-size vocabulary would index past the tiny one.
        specials = sorted(n for n, v in vars(config).items()
                          if isinstance(v, int) and not isinstance(v, bool) and n.endswith(_TOKEN_ID_MARKERS)
                          and n not in ("num_labels",) and v >= vocab)
        for i, n in enumerate(specials):
            setattr(config, n, vocab - 1 - i)
        for n in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            v = getattr(config, n, None)
            if isinstance(v, list):
                setattr(config, n, [min(x, vocab - 1) for x in v])
    if getattr(config, "pad_token_id", "absent") is None:
        config.pad_token_id = 0
    if model_type in FAMILY_OVERRIDES:
        for k, v in FAMILY_OVERRIDES[model_type].items():
            setattr(config, k, v)
    _ = d
    return config


def tiny_config(model_type: str) -> Any:
    """A tiny configuration for `model_type`, re-validated by constructing it from a dict."""
    from transformers import AutoConfig, CONFIG_MAPPING
    cls = CONFIG_MAPPING[model_type]
    config = shrink(cls(), model_type)
    # Rebuilding from the dict re-runs __post_init__ (derived sizes such as head_dim, layer
    # type lists) on the shrunk values; fall back to the patched object when it refuses.
    try:
        rebuilt = AutoConfig.for_model(model_type, **_plain_dict(config))
        shrink(rebuilt, model_type)
        return rebuilt
    except Exception:
        return config


def _plain_dict(config: Any) -> dict:
    d = config.to_dict()
    for k in ("model_type", "transformers_version", "architectures"):
        d.pop(k, None)
    return d


@dataclasses.dataclass
class Target:
    """One architecture of the sweep: the model type and the head class chosen to test it.

    `source` is the library the model comes from (tools/model_sweep/sources.py); for
    transformers the model type is the config's, for other sources a name the source defines.
    """

    model_type: str
    head: str
    class_name: str
    source: str = "transformers"


def architectures(include: set[str] | None = None) -> list[Target]:
    """Every architecture (model type) of the installed transformers with a task head we test."""
    from transformers.models.auto import modeling_auto
    chosen: dict[str, Target] = {}
    for head, mapping_name in HEADS:
        mapping = getattr(modeling_auto, mapping_name, {})
        for model_type, class_name in mapping.items():
            if isinstance(class_name, (list, tuple)):
                class_name = class_name[0]
            if model_type not in chosen:
                chosen[model_type] = Target(model_type, head, class_name)
    targets = sorted(chosen.values(), key=lambda t: t.model_type)
    if include is not None:
        targets = [t for t in targets if t.model_type in include]
    return targets
