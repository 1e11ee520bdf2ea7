"""Tiny random-init checkpoints and an offline tokenizer for the vLLM plugin tests and bench.

No hub access here: the tokenizer is a WordLevel model built from a fixed vocabulary with the
`tokenizers` library, and the models are random-init Llama / Qwen2 configs saved with
`save_pretrained`. The weights use a large init range so that the logits are well separated
and greedy decoding is not decided by rounding (the CPU and tpu attention kernels sum in a
different order).
"""

from __future__ import annotations

from pathlib import Path

WORDS = [f"w{i}" for i in range(500)]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(out: Path) -> None:
    """Save a WordLevel tokenizer (whitespace split, 500 words + specials) into `out`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
    vocab = {tok: i for i, tok in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_model(out: Path, arch: str = "llama", *, layers: int = 2, hidden: int = 128,
                seed: int = 0) -> Path:
    """Save a random-init `arch` ("llama" or "qwen2") checkpoint into `out`, its tokenizer into
    `tokenizer_dir(out)`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    common = dict(vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=1024, initializer_range=0.5, bos_token_id=1,
                  eos_token_id=2, tie_word_embeddings=False, torch_dtype="float32")
    torch.manual_seed(seed)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        raise ValueError(f"unknown arch {arch!r} (llama or qwen2)")
    model.save_pretrained(out)
    # In a folder of its own: with the model's config.json beside it, transformers maps
    # model_type "qwen2" to Qwen2Tokenizer, which ignores this vocabulary.
    build_tokenizer(tokenizer_dir(out))
    return out


def tokenizer_dir(model_dir: Path) -> Path:
    """Where `build_model` saved the checkpoint's tokenizer."""
    return Path(model_dir) / "tokenizer"


def prompts(n: int, seed: int = 0, min_len: int = 3, max_len: int = 40) -> list[str]:
    """`n` prompts of different lengths made of vocabulary words."""
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_len, max_len)))
            for _ in range(n)]


if __name__ == "__main__":
    import sys

    build_model(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "llama")
