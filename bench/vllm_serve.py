"""vLLM on torch_tpu's "tpu" platform against vLLM's own CPU platform, one after the other.

    .venv-vllm/bin/python bench/vllm_serve.py [--prompts 32] [--max-tokens 32] [--rounds 3]
        [--cpu-threads N]

Each platform runs in a child process (tests/vllm/offline_run.py; vLLM picks its platform
once per process) on the same random-init tiny Llama: offline throughput of a batch of
prompts (generated tokens / s, greedy) and the time to the first token of a single request
(best of 3). Prints both platforms' figures and the ratios tpu / cpu (targets: throughput
>= 0.8x, time to first token <= 1.5x) per round, then the median ratios over the rounds. On a
shared machine the CPU platform's figures swing by 10x or more with the load (its OpenMP
threads wait for each other when one is descheduled), so rounds alternate the platforms and a
single round says little. `--cpu-threads 1` runs the CPU platform with OMP_NUM_THREADS=1: on
a loaded machine that reference stays near its unloaded speed (the stronger baseline there).
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
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu-threads", type=int, default=None,
                    help="OMP_NUM_THREADS of the CPU platform's process (default: vLLM's choice)")
    args = ap.parse_args()
    from vllm_helpers import offline_run
    from tiny_models import build_model

    import statistics

    tput, ttft, same = [], [], True
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "llama", "llama")
        for rnd in range(1, args.rounds + 1):
            res = {}
            for platform in ("cpu", "tpu"):
                env = ({"OMP_NUM_THREADS": str(args.cpu_threads)}
                       if platform == "cpu" and args.cpu_threads else None)
                res[platform] = r = offline_run(model, platform, "--prompts", str(args.prompts),
                                                "--max-tokens", str(args.max_tokens), "--ttft",
                                                env=env)
                r["tok_s"] = r["generated_tokens"] / r["generate_s"]
                print(f"round {rnd} {platform}: {r['platform']}: {r['generated_tokens']} tokens in "
                      f"{r['generate_s']:.2f} s = {r['tok_s']:.1f} tok/s; "
                      f"time to first token {r['ttft_s'] * 1e3:.1f} ms", flush=True)
            same = same and res["cpu"]["token_ids"] == res["tpu"]["token_ids"]
            tput.append(res["tpu"]["tok_s"] / res["cpu"]["tok_s"])
            ttft.append(res["tpu"]["ttft_s"] / res["cpu"]["ttft_s"])
            print(f"round {rnd}: throughput tpu/cpu {tput[-1]:.2f}x, time to first token tpu/cpu "
                  f"{ttft[-1]:.2f}x", flush=True)
    print(f"greedy tokens identical: {same}")
    print(f"throughput tpu/cpu: median {statistics.median(tput):.2f}x over {len(tput)} round(s) "
          "(target >= 0.8x)")
    print(f"time to first token tpu/cpu: median {statistics.median(ttft):.2f}x over {len(ttft)} "
          "round(s) (target <= 1.5x)")

if __name__ == "__main__":
    main()
