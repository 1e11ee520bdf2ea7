"""Offline assets for TorchTitan runs: a byte-level BPE tokenizer trained here on generated text,
and a local text dataset (json lines with a "text" field, what TorchTitan's c4_test loader
reads). Nothing comes from a hub; the same seed gives the same files."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("the a model device tensor graph train step loss token layer attention weight gradient "
         "shard rank batch value program kernel memory stream cache fused strict compiled host "
         "runtime lowering sequence position vector matrix sum mean norm scale query key head").split()
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def _sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(20, 120))]
        out.append(" ".join(words).capitalize() + ".")
    return out


def build(root: Path, vocab_size: int = 512) -> tuple[Path, Path]:
    """Writes root/tokenizer (tokenizer.json, tokenizer_config.json) and root/data (data.jsonl);
    returns both directories."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok_dir, data_dir = root / "tokenizer", root / "data"
    tok_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    docs = _sentences(400)
    with open(data_dir / "data.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    tok.save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": False}))
    return tok_dir, data_dir
