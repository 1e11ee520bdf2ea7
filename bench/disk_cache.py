"""Start-up cost of a fresh process with a cold vs a warm program disk cache.

Each round starts a fresh interpreter that imports torch_tpu and runs the first training step of
the small GPT (forward, backward, AdamW step) on "tpu"; "cold" uses an empty cache directory,
"warm" the directory the cold run filled. Reports the first step's time inside the process
(where the disk tier acts; the second step, all in memory, is the floor) and the whole
process's wall time, as medians, and their ratios.

Run: .venv/bin/python bench/disk_cache.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, time
t0 = time.perf_counter()
import torch, torch_tpu
from torch_tpu.models import TinyGPT, synthetic_text
t_import = time.perf_counter() - t0
torch.manual_seed(0)
model = TinyGPT(vocab=128, dim=64, heads=4, layers=2, ctx=32).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
x, y = [t.to("tpu") for t in next(iter(synthetic_text(1, 8, 32, 128)))]
t1 = time.perf_counter()
_, loss = model(x, y)
loss.backward()
opt.step()
loss.item()
t_step = time.perf_counter() - t1
t2 = time.perf_counter()  # a second step: every program in memory (the floor)
_, loss = model(x, y)
loss.backward()
opt.step()
loss.item()
t_step2 = time.perf_counter() - t2
m = torch_tpu.metrics()
print(json.dumps({"import_s": t_import, "step_s": t_step, "step2_s": t_step2, "lowerings": m["programs_compiled"],
                  "misses": m["cache_misses"], "disk": torch_tpu.cache_stats()}))
"""


def run(cache_dir: str) -> dict:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    report["process_s"] = time.perf_counter() - t0
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cold, warm = [], []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as d:
            cold.append(run(d))
            warm.append(run(d))
    for name, runs in (("cold", cold), ("warm", warm)):
        print(f"{name}: first step {statistics.median(r['step_s'] for r in runs) * 1e3:7.1f} ms, "
              f"(second step {statistics.median(r['step2_s'] for r in runs) * 1e3:5.1f} ms), "
              f"process {statistics.median(r['process_s'] for r in runs):5.2f} s, "
              f"lowerings {runs[-1]['lowerings']}, disk hits {runs[-1]['disk']['hits']}, "
              f"entries written {runs[-1]['disk']['writes']}")
    step = statistics.median(r["step_s"] for r in cold) / statistics.median(r["step_s"] for r in warm)
    proc = statistics.median(r["process_s"] for r in cold) / statistics.median(r["process_s"] for r in warm)
    print(f"cold/warm: first step {step:.1f}x, whole process {proc:.2f}x")


if __name__ == "__main__":
    main()
