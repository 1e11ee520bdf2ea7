"""One offline vLLM run in its own process (vLLM's platform is chosen once per process).

    python tests/vllm/offline_run.py MODEL_DIR --platform tpu|cpu --prompts N --max-tokens M

prints one JSON line: the platform vLLM chose, the device of the weights and the KV cache,
the greedy token ids per prompt, and timings (init, first-token latency, generate).
`paths` holds the greedy tokens of three more prompts (3, 13 and 37 words, unseen by the
batch) run through each attention path: each alone (one request, nothing cached), each alone
again (one request, its prompt's full blocks cached), then all three batched (several
requests, cached prefixes).
`--platform cpu` selects vLLM's own CPU platform (VLLM_TARGET_DEVICE=cpu), the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--platform", choices=["tpu", "cpu"], required=True)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--min-len", type=int, default=3)
    ap.add_argument("--max-len", type=int, default=40)
    ap.add_argument("--ttft", action="store_true", help="also time one single-request run")
    args = ap.parse_args()
    if args.platform == "cpu":
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tiny_models import prompts, tokenizer_dir

    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    t0 = time.perf_counter()
    llm = LLM(model=args.model, tokenizer=str(tokenizer_dir(Path(args.model))), dtype="float32", kv_cache_memory_bytes=64 << 20,
              max_model_len=256, seed=0, enforce_eager=True)
    init_s = time.perf_counter() - t0
    greedy = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    texts = prompts(args.prompts, min_len=args.min_len, max_len=args.max_len)
    llm.generate(texts[:1], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)  # warm
    ttft = None
    if args.ttft:  # one request, one token: the time to its first token
        one = SamplingParams(temperature=0, max_tokens=1)
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            llm.generate(texts[:1], one, use_tqdm=False)
            runs.append(time.perf_counter() - t)
        ttft = min(runs)
    t = time.perf_counter()
    outs = llm.generate(texts, greedy, use_tqdm=False)
    gen_s = time.perf_counter() - t
    import random

    rng = random.Random(1)
    from tiny_models import WORDS
    more = [" ".join(rng.choice(WORDS) for _ in range(n)) for n in (3, 13, 37)]
    paths = {"alone_fresh": [], "alone_cached": []}
    for key in ("alone_fresh", "alone_cached"):
        for text in more:
            out = llm.generate([text], greedy, use_tqdm=False)[0]
            paths[key].append(list(out.outputs[0].token_ids))
    paths["batch_cached"] = [list(o.outputs[0].token_ids)
                             for o in llm.generate(more, greedy, use_tqdm=False)]
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    weight = next(runner.get_model().parameters())
    print(json.dumps({
        "platform": type(current_platform).__name__,
        "device_type": current_platform.device_type,
        "weight_device": str(weight.device),
        "kv_cache_device": str(runner.kv_caches[0].device),
        "token_ids": [list(o.outputs[0].token_ids) for o in outs],
        "paths": paths,
        "prompt_tokens": sum(len(o.prompt_token_ids) for o in outs),
        "generated_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
        "init_s": init_s, "generate_s": gen_s, "ttft_s": ttft,
    }), flush=True)


if __name__ == "__main__":
    main()
