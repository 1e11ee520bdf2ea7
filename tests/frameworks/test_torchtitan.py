"""TorchTitan's llama3 debug model (varlen attention and its default FlexAttention; test sizes;
titan_run.py) trains on "tpu" unchanged: 10 steps on one process in each mode and under
torchrun with FSDP on 2 ranks, with losses compared to the same run on CPU."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_tpu

RUNNER = str(Path(__file__).with_name("titan_run.py"))
STEPS = 10


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(torch_tpu.__file__).parents[1]), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("TORCH_TPU_NUM_DEVICES", None)
    env.update(extra)
    return env


def _run(cmd: list[str], out: Path, **env: str) -> dict:
    proc = subprocess.run(cmd, env=_env(**env), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return json.loads(out.read_text())


def _torchrun(tmp: Path, assets: Path, device: str, ranks: int, mode: str = "strict", attn: str = "varlen") -> list[float]:
    """TorchTitan's own launch: torchrun, one process per rank (FSDP over them when 2)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp / f"{device}_{mode}_{ranks}_{attn}.json"
    extra = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"} if device == "cpu" and ranks == 1 else {}
    return _run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-addr",
                 "127.0.0.1", "--master-port", str(port), RUNNER, str(out), str(assets), "--device", device,
                 "--mode", mode, "--attn", attn, "--steps", str(STEPS)], out, **extra)["losses"]


def _single(tmp: Path, assets: Path, device: str, mode: str = "strict") -> list[float]:
    return _torchrun(tmp, assets, device, 1, mode)


@pytest.fixture(scope="module")
def cpu_losses(tmp_path_factory, titan_assets) -> list[float]:
    losses = _single(tmp_path_factory.mktemp("cpu"), titan_assets, "cpu")
    assert len(losses) == STEPS and losses[-1] < losses[0], losses
    return losses


def _close(got: list[float], want: list[float]) -> None:
    # 1e-3: ten AdamW steps amplify float32 rounding differences (matmul accumulation order).
    assert len(got) == len(want) == STEPS
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_llama3_debugmodel_one_process_matches_cpu(tmp_path, titan_assets, cpu_losses, mode: str) -> None:
    _close(_single(tmp_path, titan_assets, "tpu", mode), cpu_losses)


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
def test_llama3_debugmodel_flex_attention_matches_cpu(tmp_path, titan_assets, cpu_losses, mode: str) -> None:
    """TorchTitan's default attention backend (FlexAttention, compiled by TorchTitan with
    torch.compile's default backend) against the varlen CPU run: both causal per document.
    "compiled" is TorchTitan's compile.enable for the model and the loss (its default backend)."""
    _close(_torchrun(tmp_path, titan_assets, "tpu", 1, mode, attn="flex"), cpu_losses)


def test_llama3_debugmodel_fsdp_two_ranks_matches_cpu(tmp_path, titan_assets) -> None:
    # Each rank reads its own part of the data set, so the reference is the same 2-rank FSDP
    # run on CPU, not the single-process one (its collectives: titan_run.py).
    want = _torchrun(tmp_path, titan_assets, "cpu", 2)
    _close(_torchrun(tmp_path, titan_assets, "tpu", 2), want)
