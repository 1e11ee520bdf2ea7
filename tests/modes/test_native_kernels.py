"""The host runtime's native tier: fused clusters compiled to C++ give the interpreter's bits.

Each test runs the same workload in fresh processes with TORCH_TPU_NATIVE_KERNELS set
differently (the policy is read once per process): `0` interprets every cluster, `sync` compiles
each cluster's kernel at its first run and waits for it, a number compiles in the background
after that many runs. Results are compared bit for bit (float tensors viewed as integers, so
NaN payloads, signed zeros and denormals count), and torch_tpu.metrics()["native_kernels"]
shows the kernels really ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

# Writes {name: tensor} (CPU) to argv[1] and the native-tier metrics to argv[2].
WORKLOAD = textwrap.dedent("""
    import json, sys
    import torch, torch.nn.functional as F
    import torch_tpu
    from torch_tpu.models import TinyGPT, synthetic_text

    torch_tpu.set_mode(sys.argv[3])
    torch.manual_seed(0)
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, -1e-40, 3e38,
                            -3e38, 1.0, -1.0, 0.5, 2.0, -2.5, 7.0, 1e-3])

    def data(shift, *shape):
        x = torch.randn(*shape)
        flat = x.view(-1)
        # Every special value in the first tile, met by another special and by ordinary values.
        flat[: special.numel()] = special.roll(shift)
        flat[100 : 100 + special.numel()] = special
        return x

    # 1005 elements: a last tile that is not a multiple of 8 or 16 lanes.
    a, b, c = data(0, 3, 335), data(3, 3, 335), data(7, 3, 335)
    bias = torch.randn(335)
    rows = torch.randn(64, 24)  # rows of 24: a per-row broadcast a 16-lane vector would straddle
    att = torch.randn(8, 4, 32, 32)

    def arithmetic(a, b, c, bias):
        out = {}
        t = (a + b) * 1.5 - c / (b.abs() + 0.25)
        out["chain"] = t
        out["neg_sign"] = -t.sign() * a + bias
        out["sqrt"] = (a * a + 1e-3).sqrt() + (b.abs() * 2).rsqrt() * 0.5
        out["max"] = torch.maximum(a * 2, b) * 0.5  # each op its own output: NaNs do not mask each other
        out["min"] = torch.minimum(c + 1, a) * 0.5
        out["compare"] = (a < b).float() + (a <= c).float() * 2 + (b > c).float() * 4 + (a >= 0).float() * 8 + \\
            (a == b).float() * 16 + (b != c).float() * 32
        out["logical"] = (torch.logical_and(a > 0, b < 0).float() + torch.logical_or(a, c).float() * 2 +
                          torch.logical_xor(a > b, c > 0).float() * 4 + torch.logical_not(a * 0).float() * 8)
        out["where"] = torch.where(a * b > c, a - b, c * 3) / 7
        out["finite"] = torch.isfinite(a * b).float() * 2 + (a + c).bool().float()
        out["transposed"] = (a.t().contiguous().t() * b + c) * 0.5  # a strided input
        out["bf16"] = ((a.bfloat16() + b.bfloat16()) * 3).float() + c  # rounded to bfloat16 after each op
        ab, bb = a.bfloat16(), b.bfloat16()
        out["bf16_chain"] = torch.where(ab > bb, ab * bb - 1, bb / (ab.abs() + 1)).sqrt() + ab
        out["f16"] = ((a.half() + b.half()) * 3).float() + c  # half rounding stays interpreted
        return out

    def row_clusters(rows, att):
        out = {}
        out["layer_norm"] = F.layer_norm(rows, (24,)) * 2 + 1
        out["softmax"] = torch.softmax(att * 0.125, -1) * 3
        out["log_softmax"] = F.log_softmax(att.reshape(256, 128), -1) - 1
        return out

    results = {}
    dev = lambda t: t.to("tpu")
    def run():
        outs = arithmetic(dev(a), dev(b), dev(c), dev(bias)) | row_clusters(dev(rows), dev(att))
        return {k: v.cpu() for k, v in outs.items()}

    if int(sys.argv[4]) > 1:  # background tier: run until the clusters are hot, wait for their kernels
        for _ in range(int(sys.argv[4])):
            run()
        assert torch_tpu.wait_native_kernels(timeout=120)
    results.update(run())
    # A few training steps of the small GPT: every cluster of a real step.
    model = TinyGPT(vocab=64, dim=32, heads=2, layers=1, ctx=16).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step, (x, y) in enumerate(synthetic_text(3, 4, 16, 64)):
        _, loss = model(x.to("tpu"), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        results[f"loss{step}"] = loss.detach().cpu()
    for name, p in model.named_parameters():
        results["param." + name] = p.detach().cpu()
    torch.save(results, sys.argv[1])
    with open(sys.argv[2], "w") as f:
        json.dump(torch_tpu.metrics()["native_kernels"], f)
""")


def run_workload(tmp_path: Path, tag: str, native: str, mode: str = "fused", repeats: int = 1,
                 env: dict | None = None) -> tuple[dict, dict, str]:
    out, stats = tmp_path / f"{tag}.pt", tmp_path / f"{tag}.json"
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    full_env = dict(os.environ, TORCH_TPU_NATIVE_KERNELS=native, TORCH_TPU_CACHE_DIR="off")
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, str(script), str(out), str(stats), mode, str(repeats)], env=full_env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out), json.loads(stats.read_text()), proc.stderr


def assert_same_bits(native: dict, interpreted: dict) -> None:
    assert native.keys() == interpreted.keys()
    for name, t in interpreted.items():
        n = native[name]
        assert n.dtype == t.dtype and n.shape == t.shape, name
        if t.is_floating_point():
            bits = {4: torch.int32, 2: torch.int16}[t.element_size()]
            assert torch.equal(n.view(bits), t.view(bits)), f"{name}: native and interpreted bits differ"
        else:
            assert torch.equal(n, t), name


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    results, stats, _ = run_workload(tmp_path_factory.mktemp("interp"), "interp", "0")
    assert stats["requested"] == 0, stats
    return results


def test_synchronous_native_kernels_give_the_interpreters_bits(tmp_path, interpreted):
    results, stats, _ = run_workload(tmp_path, "sync", "sync")
    assert stats["loaded"] >= 10 and stats["failed"] == 0, stats
    assert_same_bits(results, interpreted)


def test_strict_mode_matches_too(tmp_path):
    # Strict mode runs one op per program: only multi-op clusters (decompositions) get kernels.
    native, _, _ = run_workload(tmp_path, "strict_sync", "sync", mode="strict")
    interp, _, _ = run_workload(tmp_path, "strict_interp", "0", mode="strict")
    assert_same_bits(native, interp)


def test_background_kernels_replace_hot_clusters(tmp_path, interpreted):
    # After 3 runs a cluster asks for its kernel; later runs pick it up once it is loaded.
    results, stats, _ = run_workload(tmp_path, "background", "3", repeats=5)
    # The GPT steps after the wait may still be compiling theirs: only the waited-for ones count.
    assert stats["loaded"] >= 5 and stats["failed"] == 0, stats
    assert_same_bits(results, interpreted)


def test_without_a_compiler_clusters_keep_interpreting(tmp_path, interpreted):
    results, stats, stderr = run_workload(tmp_path, "nocxx", "sync", env={"CXX": "/nonexistent/c++"})
    assert stats["loaded"] == 0 and stats["failed"] == stats["requested"] > 0, stats
    assert "/nonexistent/c++" in stats["last_error"]
    assert stderr.count("native kernels for fused clusters are unavailable") == 1, stderr[-2000:]
    assert_same_bits(results, interpreted)


def test_a_second_process_loads_the_kernels_from_the_disk_tier(tmp_path, interpreted):
    cache = {"TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")}
    first, stats1, _ = run_workload(tmp_path, "disk1", "sync", env=cache)
    second, stats2, _ = run_workload(tmp_path, "disk2", "sync", env=cache)
    assert stats1["from_disk"] == 0 and stats1["loaded"] >= 10, stats1
    assert stats2["from_disk"] == stats2["loaded"] == stats1["loaded"] and stats2["compile_seconds"] == 0, stats2
    assert_same_bits(first, interpreted)
    assert_same_bits(second, interpreted)


def test_exiting_mid_compile_leaves_no_compiler_files_behind(tmp_path):
    # The process exits while its compiler runs (a stand-in that records its pid and sleeps):
    # the compiler is killed and its directory (its own temporary files included) removed.
    tmp, mark = tmp_path / "tmp", tmp_path / "compiler.pid"
    tmp.mkdir()
    slow_cxx = tmp_path / "slow-cxx"
    slow_cxx.write_text('#!/bin/sh\necho $$ > "$COMPILER_PID_FILE"\nexec sleep 300\n')
    slow_cxx.chmod(0o755)
    code = textwrap.dedent("""
        import os, time, torch, torch_tpu
        torch_tpu.set_mode("fused")
        x = torch.randn(1000, device="tpu")
        for k in range(4):
            ((x * (k + 2) + 1) * x - k).cpu()
        assert torch_tpu.metrics()["native_kernels"]["requested"] >= 1
        deadline = time.time() + 60
        while not os.path.exists(os.environ["COMPILER_PID_FILE"]) and time.time() < deadline:
            time.sleep(0.05)  # until the compiler is surely running
        assert os.path.getsize(os.environ["COMPILER_PID_FILE"]) > 0
    """)
    env = dict(os.environ, TORCH_TPU_NATIVE_KERNELS="1", TORCH_TPU_CACHE_DIR="off", TMPDIR=str(tmp),
               CXX=str(slow_cxx), COMPILER_PID_FILE=str(mark))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)  # not the 300 s sleep
    compiler_pid = int(mark.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(compiler_pid, 0)
    assert list(tmp.iterdir()) == []
