"""TorchTitan's llama3 debug model: training tokens/s on "tpu" (strict, fused, compiled) as
ratios to the same run on CPU, in the same session.

Run: make bench-frameworks (or .venv-frameworks/bin/python bench/frameworks.py [--steps N]
[--seq-len L] [--batch B] [--modes strict,fused,compiled] [--attn varlen,flex]).

Each configuration is one TorchTitan run of tests/frameworks/titan_run.py in a fresh process
(TorchTitan picks its device type at import), one after another on the same machine: CPU first,
then each mode. tokens/s counts the steps after the third (compilation and caches warming up).
The largest loss difference from CPU's run is printed beside each ratio (the same model must
have been trained). The CPU run's attention is titan_run.py's reference kernel for varlen_attn
(PyTorch has none on CPU): the same [T, T] block-causal computation our lowering does. With
``--attn flex`` the tpu runs use TorchTitan's default FlexAttention instead (the same mask; CPU
stays varlen: its FlexAttention has no backward). Target: fused >= 1.0x CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "frameworks"))


def _run(out: Path, assets: Path, device: str, mode: str, args: argparse.Namespace, attn: str = "varlen") -> dict:
    with socket.socket() as sock:  # TorchTitan's own launch: torchrun (one process)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
           "--master-port", str(port), str(ROOT / "tests" / "frameworks" / "titan_run.py"), str(out), str(assets),
           "--device", device, "--mode", mode, "--steps", str(args.steps), "--seq-len", str(args.seq_len),
           "--batch", str(args.batch), "--attn", attn]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # CPU baseline: torch_tpu not loaded at all
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        if device == "cpu":
            raise SystemExit(f"cpu failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "Error" in line and "lspci" not in line]
        return {"error": errors[-1].strip() if errors else f"exit status {proc.returncode}"}
    return json.loads(out.read_text())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--modes", default="strict,fused,compiled")
    p.add_argument("--attn", default="varlen", help="tpu attention backends, comma-separated: varlen, flex")
    args = p.parse_args()
    import assets as titan_assets

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        titan_assets.build(tmp_path / "assets")
        cpu = _run(tmp_path / "cpu.json", tmp_path / "assets", "cpu", "strict", args)
        print(f"TorchTitan llama3 debugmodel, batch {args.batch} x {args.seq_len} tokens, {args.steps} steps")
        print(f"{'config':18s} {'tokens/s':>10s} {'vs CPU':>8s}  max |loss - CPU loss|")
        print(f"{'cpu varlen':18s} {cpu['tokens_per_s']:10.0f} {1.0:7.2f}x")
        for attn in args.attn.split(","):
            for mode in args.modes.split(","):
                name = f"tpu {mode} {attn}"
                r = _run(tmp_path / f"{mode}_{attn}.json", tmp_path / "assets", "tpu", mode, args, attn)
                if "error" in r:
                    print(f"{name:18s} failed: {r['error'][:160]}")
                    continue
                diff = max(abs(a - b) for a, b in zip(r["losses"], cpu["losses"]))
                print(f"{name:18s} {r['tokens_per_s']:10.0f} {r['tokens_per_s'] / cpu['tokens_per_s']:7.2f}x  {diff:.2e}")


if __name__ == "__main__":
    main()
