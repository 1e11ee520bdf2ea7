"""vLLM on torch_tpu's "tpu" platform against vLLM's own CPU platform, one after the other.

    .venv-vllm/bin/python bench/vllm_serve.py [--prompts 32] [--max-tokens 32]

Each platform runs in a child process (tests/vllm/offline_run.py; vLLM picks its platform
once per process) on the same random-init tiny Llama: offline throughput of a batch of
prompts (generated tokens / s, greedy) and the time to the first token of a single request
(best of 3). Prints both platforms' figures and the ratios tpu / cpu (targets: throughput
>= 0.8x, time to first token <= 1.5x).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "vllm"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    from vllm_helpers import offline_run
    from tiny_models import build_model

    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "llama", "llama")
        res = {}
        for platform in ("cpu", "tpu"):
            res[platform] = r = offline_run(model, platform, "--prompts", str(args.prompts),
                                            "--max-tokens", str(args.max_tokens), "--ttft")
            r["tok_s"] = r["generated_tokens"] / r["generate_s"]
            print(f"{platform}: {r['platform']}: {r['generated_tokens']} tokens in "
                  f"{r['generate_s']:.2f} s = {r['tok_s']:.1f} tok/s; "
                  f"time to first token {r['ttft_s'] * 1e3:.1f} ms", flush=True)
    same = res["cpu"]["token_ids"] == res["tpu"]["token_ids"]
    print(f"greedy tokens identical: {same}")
    print(f"throughput tpu/cpu: {res['tpu']['tok_s'] / res['cpu']['tok_s']:.2f}x (target >= 0.8x)")
    print(f"time to first token tpu/cpu: {res['tpu']['ttft_s'] / res['cpu']['ttft_s']:.2f}x "
          "(target <= 1.5x)")


if __name__ == "__main__":
    main()
