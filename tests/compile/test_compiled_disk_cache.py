"""Compiled graphs go through the program cache's disk tier: a second process starts warm.

Two subprocesses share a TORCH_TPU_CACHE_DIR: the first lowers and stores its forward and
backward graphs and a compiled optimizer step, the second loads them (no lowering) and
computes the same values. The forward returns views of its inputs (saved transposed weights)
and of its new tensors (saved q, k, v), which the stored programs keep.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import json, torch, torch_tpu
from torch_tpu.models import TinyGPT
torch.manual_seed(0)
model = TinyGPT(vocab=64, dim=32, heads=4, layers=1, ctx=16).to("tpu")
g = torch.Generator().manual_seed(1)
idx = torch.randint(0, 64, (2, 16), generator=g).to("tpu")
loss = torch.compile(model, backend="tpu")(idx, idx)[1]
loss.backward()
grad = model.head.weight.grad.sum().item()
opt = torch.optim.AdamW(model.parameters(), lr=0.1)
step = torch.compile(opt.step, backend="tpu")  # writes its CPU step counts: host outputs
step()
step()
s = torch_tpu.compile.stats()
print(json.dumps({"loss": loss.item(), "grad": grad, "weight": model.head.weight.sum().item(),
                  "steps": opt.state[model.head.weight]["step"].item(),
                  "compiled": s["graphs_compiled"], "loaded": s["graphs_loaded"],
                  "fallbacks": s["fallbacks"], "disk": torch_tpu.cache_stats()}))
"""


def _run(cache_dir: Path) -> dict:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_compiled_graphs_from_disk(tmp_path):
    cold = _run(tmp_path)
    warm = _run(tmp_path)
    assert cold["fallbacks"] == warm["fallbacks"] == 0
    assert cold["compiled"] >= 2 and cold["loaded"] == 0  # forward and backward lowered, stored
    assert warm["compiled"] == 0 and warm["loaded"] == cold["compiled"]  # nothing lowered again
    assert warm["disk"]["hits"] >= cold["compiled"]
    # Same programs, same inputs: bit-identical results.
    assert warm["loss"] == cold["loss"] and warm["grad"] == cold["grad"]
    assert warm["weight"] == cold["weight"] and warm["steps"] == cold["steps"] == 2
