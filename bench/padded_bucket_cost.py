"""What running padded costs: a compiled GPT-2 training step at one length, by its exact program
and by its bucket's padded program, in one process (docs/notes/padded-buckets.md).

The graph is learned at four lengths first (padded buckets need the learned graph), then each
way runs 3 warm-up steps and times 10. Run on the runtime under test, e.g. XLA's CPU plugin:
    TORCH_TPU_RUNTIME=pjrt TORCH_TPU_PJRT_PLUGIN=<plugin .so> python bench/padded_bucket_cost.py --len 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import torch_tpu
from torch_tpu.compile import padded_buckets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dynamic_shapes import model  # noqa: E402  (the same GPT-2 as bench/dynamic_shapes.py)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--len", type=int, default=300, help="the timed length")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = model(a.width, a.layers, 512).to("tpu")
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    f = torch.compile(m, backend="tpu")

    def step(n: int) -> float:
        t0 = time.perf_counter()
        x = torch.randint(0, 2048, (2, n)).to("tpu")
        loss = f(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        return time.perf_counter() - t0

    padded_buckets.set_buckets(None)
    for n in (100, 140, 170, 190):
        step(n)
    res = {}
    for way, buckets in (("exact", None), ("padded", "on")):
        padded_buckets.set_buckets(buckets)
        for _ in range(3):
            step(a.len)
        res[way] = statistics.median(step(a.len) for _ in range(10))
    bucket = padded_buckets.bucket_for(a.len, padded_buckets.default_buckets())
    print(f"GPT-2 width {a.width}, {a.layers} layers, length {a.len} (bucket {bucket}), "
          f"runtime {torch_tpu._C._runtime_name()}: exact {1e3 * res['exact']:.1f} ms/step, "
          f"padded {1e3 * res['padded']:.1f} ms/step, padded/exact {res['padded'] / res['exact']:.2f}x")


if __name__ == "__main__":
    main()
