"""Steps/s of Hugging Face models (forward, and a training step) on "tpu" strict and fused vs
native CPU eager, all in one process, printed as ratios.

Run: PYTHONPATH=. .venv/bin/python bench/models.py [--steps N] [--rounds N] [--models gpt2,llama,bert,t5,vit]

Models: GPT-2, Llama, BERT, T5 and ViT at "tiny but not trivial" sizes (width 128, 4 layers,
4 heads, vocabulary 1000, batch 4 x 64 tokens; ViT on 64x64 images, patch 8), random init.
A training step is forward + loss.backward + AdamW step. Each configuration warms up first
(until a step compiles nothing new and the host runtime's native cluster kernels are built, as
in a long run; see TORCH_TPU_NATIVE_KERNELS below); then rounds time --steps steps on each
device in turn, so a load spike on the shared machine hits all of them alike, and each ratio is
the median of the per-round ratios. The peak columns are the device memory 3 back-to-back steps
take above what was allocated before them (strict and fused).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from collections.abc import Callable

# A fused cluster gets its native kernel after TORCH_TPU_NATIVE_KERNELS runs (64: one per step
# here, so a long training run has them from its 64th step on). The benchmark times a few dozen
# steps, so it asks after 2 runs and waits for the background compiles: the steady state.
os.environ.setdefault("TORCH_TPU_NATIVE_KERNELS", "2")

import torch  # noqa: E402

import torch_tpu  # noqa: E402

BATCH, SEQ, VOCAB, WIDTH, LAYERS, HEADS = 4, 64, 1000, 128, 4, 4


def build(name: str) -> tuple[torch.nn.Module, dict]:
    import transformers as tf
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (BATCH, SEQ), generator=g)
    if name == "gpt2":
        m = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
                                             n_positions=SEQ, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0))
        return m, {"input_ids": ids, "labels": ids}
    if name == "llama":
        m = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=4 * WIDTH,
                                               num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                               num_key_value_heads=HEADS // 2, max_position_embeddings=SEQ))
        return m, {"input_ids": ids, "labels": ids}
    if name == "bert":
        m = tf.BertForMaskedLM(tf.BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS,
                                             num_attention_heads=HEADS, intermediate_size=4 * WIDTH,
                                             max_position_embeddings=SEQ, hidden_dropout_prob=0,
                                             attention_probs_dropout_prob=0))
        return m, {"input_ids": ids, "labels": ids}
    if name == "t5":
        m = tf.T5ForConditionalGeneration(tf.T5Config(vocab_size=VOCAB, d_model=WIDTH, d_kv=WIDTH // HEADS,
                                                      d_ff=4 * WIDTH, num_layers=LAYERS // 2,
                                                      num_decoder_layers=LAYERS // 2, num_heads=HEADS,
                                                      dropout_rate=0, decoder_start_token_id=0))
        return m, {"input_ids": ids, "labels": ids}
    if name == "vit":
        m = tf.ViTForImageClassification(tf.ViTConfig(image_size=64, patch_size=8, hidden_size=WIDTH,
                                                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                                      intermediate_size=4 * WIDTH, num_labels=10,
                                                      hidden_dropout_prob=0, attention_probs_dropout_prob=0))
        return m, {"pixel_values": torch.randn(BATCH, 3, 64, 64, generator=g),
                   "labels": torch.randint(0, 10, (BATCH,), generator=g)}
    raise ValueError(name)


def compiles() -> int:
    """Programs and fused graphs compiled so far in this process."""
    m = torch_tpu.metrics()
    return m["programs_compiled"] + m["fused"]["graphs_compiled"]


def make_step(model: torch.nn.Module, inputs: dict, device: str, mode: str, train: bool,
              warmup: int = 2, max_warmup: int = 20) -> Callable[[], torch.Tensor]:
    """A warmed-up step of a copy of `model` on `device` (in `mode` there)."""
    model = copy.deepcopy(model).to(device)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if train else None
    model.train(train)

    def step() -> torch.Tensor:
        if not train:
            with torch.no_grad():
                return model(**inputs).logits
        loss = model(**inputs).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    # Warm up until a step compiles nothing (fused mode's graphs settle after a step or two;
    # timing them earlier measures compilation, not steps).
    with torch_tpu.mode(mode):
        for i in range(max_warmup):
            before = compiles()
            step().sum().item()
            if i + 1 >= warmup and compiles() == before:
                break
        torch_tpu.wait_native_kernels()
        step().sum().item()  # runs with the native kernels
    return step


def steps_per_second(step: Callable[[], torch.Tensor], mode: str, steps: int) -> float:
    with torch_tpu.mode(mode):
        t0 = time.perf_counter()
        for _ in range(steps):
            out = step()
        out.sum().item()  # wait for the device
        return steps / (time.perf_counter() - t0)


def peak_mib(step: Callable[[], torch.Tensor], mode: str, steps: int = 3) -> float:
    """Peak device memory (MiB) of `steps` back-to-back steps above what was allocated before
    them (the model, its gradients and optimizer state, the other devices' copies)."""
    with torch_tpu.mode(mode):
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        for _ in range(steps):
            out = step()
        out.sum().item()
        return (torch.tpu.max_memory_allocated() - base) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5, help="steps per timed round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; each times every device once")
    ap.add_argument("--models", default="gpt2,llama,bert,t5,vit")
    args = ap.parse_args()
    import transformers
    transformers.logging.set_verbosity_error()
    print(f"{'model':6} {'what':8} {'cpu':>8} {'strict':>8} {'fused':>8} {'strict/cpu':>11} {'fused/cpu':>10}"
          f" {'fused/strict':>13} {'peak MiB strict':>16} {'fused':>6}   (steps/s, medians)")
    runs = (("cpu", "cpu", "strict"), ("strict", "tpu", "strict"), ("fused", "tpu", "fused"))
    for name in args.models.split(","):
        model, inputs = build(name)
        for train in (False, True):
            steps = {label: make_step(model, inputs, device, mode, train) for label, device, mode in runs}
            # Devices alternate within each round, so a load spike on the shared machine hits
            # them alike; each ratio is the median of the per-round ratios.
            sps: dict[str, list[float]] = {label: [] for label, _, _ in runs}
            for _ in range(args.rounds):
                for label, _, mode in runs:
                    sps[label].append(steps_per_second(steps[label], mode, args.steps))
            med = {k: statistics.median(v) for k, v in sps.items()}

            def ratio(a: str, b: str) -> float:
                return statistics.median(x / y for x, y in zip(sps[a], sps[b]))

            what = "train" if train else "forward"
            peaks = {label: peak_mib(steps[label], mode) for label, device, mode in runs if device == "tpu"}
            print(f"{name:6} {what:8} {med['cpu']:8.2f} {med['strict']:8.2f} {med['fused']:8.2f} "
                  f"{ratio('strict', 'cpu'):10.2f}x {ratio('fused', 'cpu'):9.2f}x "
                  f"{ratio('fused', 'strict'):12.2f}x {peaks['strict']:16.1f} {peaks['fused']:6.1f}", flush=True)


if __name__ == "__main__":
    main()
