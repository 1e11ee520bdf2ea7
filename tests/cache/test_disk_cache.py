"""The program cache's disk tier across processes: a fresh process reuses programs an earlier one
compiled (no Python lowering), survives damaged entries, shares the directory safely with a
concurrent process, and refuses directories other users can write.

Each case runs fresh interpreters with their own TORCH_TPU_CACHE_DIR (a tmp_path), because the
disk tier is configured once per process at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Ops chosen to cover: elementwise with a runtime scalar, a reduction with baked int arguments,
# a contraction, an in-place op (output into an argument), a multi-output op (a list-like
# return), a string argument, and arange, whose lowering bakes its scalars (the marker entry).
CHILD = textwrap.dedent(
    """
    import json, torch, torch_tpu
    torch.manual_seed(0)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    x, y = a.to("tpu"), b.to("tpu")
    pairs = {
        "add": ((x + y * 2.5), a + b * 2.5),
        "sum": (x.sum(1, keepdim=True), a.sum(1, keepdim=True)),
        "matmul": (x @ y.T, a @ b.T),
        "div_floor": (torch.div(x, y, rounding_mode="floor"), torch.div(a, b, rounding_mode="floor")),
        "arange": (torch.arange(3, 11, 2, device="tpu"), torch.arange(3, 11, 2)),
        "arange_float": (torch.arange(0.5, 3.0, 0.5, device="tpu"), torch.arange(0.5, 3.0, 0.5)),
        "max": (x.max(0).values, a.max(0).values),
    }
    z = x.clone(); z.mul_(3.0)
    pairs["inplace"] = (z, a * 3.0)
    bad = [k for k, (t, c) in pairs.items() if not torch.allclose(t.cpu(), c, atol=1e-5, rtol=1e-5)]
    torch.manual_seed(1)
    rand = (torch.rand(6, device="tpu") + torch.randn(6, device="tpu")).cpu().tolist()  # rng programs
    print(json.dumps({"bad": bad, "rand": rand, "metrics": {k: v for k, v in torch_tpu.metrics().items() if k != "fallbacks"},
                      "disk": torch_tpu.cache_stats()}))
    """
)


def start(cache_dir: str | os.PathLike) -> subprocess.Popen:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir))
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(proc: subprocess.Popen) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"child failed:\n{out}\n{err}"
    report = json.loads(out.strip().splitlines()[-1])
    assert report["bad"] == [], f"results differ from CPU: {report['bad']}"
    return report, err


def run(cache_dir: str | os.PathLike) -> tuple[dict, str]:
    return finish(start(cache_dir))


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.rglob("*.tpp"))


def test_a_fresh_process_reuses_programs_without_lowering(tmp_path: Path) -> None:
    root = tmp_path / "new"  # created by the cache, privately
    cold, _ = run(root)
    assert cold["disk"]["enabled"]
    assert cold["disk"]["directory"].startswith(str(root))
    assert (root.stat().st_mode & 0o777) == 0o700
    assert (Path(cold["disk"]["directory"]).stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o077) == 0 for p in entries(root))
    assert cold["metrics"]["programs_compiled"] > 0
    assert cold["disk"]["hits"] == 0
    # One entry per compiled program, plus arange's "bakes scalars" markers.
    assert cold["disk"]["writes"] >= cold["metrics"]["programs_compiled"]
    assert len(entries(root)) == cold["disk"]["writes"]

    warm, _ = run(root)
    assert warm["metrics"]["programs_compiled"] == 0, "a warm process must not lower anything in Python"
    assert warm["metrics"]["cache_misses"] == cold["metrics"]["cache_misses"]
    assert warm["disk"]["hits"] >= warm["metrics"]["cache_misses"]  # markers add a hit each
    assert warm["disk"]["writes"] == 0
    assert warm["disk"]["corrupt"] == 0
    assert warm["rand"] == cold["rand"], "a stored random program draws the same numbers for the same seed"


def test_damaged_entries_warn_are_recompiled_and_rewritten(tmp_path: Path) -> None:
    cold, _ = run(tmp_path)
    files = entries(tmp_path)
    assert len(files) >= 3
    files[0].write_bytes(files[0].read_bytes()[:-7])  # truncated
    data = bytearray(files[1].read_bytes())
    data[-1] ^= 0xFF  # a flipped payload byte
    files[1].write_bytes(bytes(data))
    files[2].write_bytes(b"")  # empty

    damaged, err = run(tmp_path)
    assert "corrupt" in err and "program disk cache" in err, err
    assert damaged["disk"]["corrupt"] == 3
    assert damaged["metrics"]["programs_compiled"] >= 1
    assert damaged["disk"]["writes"] >= 3  # each damaged entry was written again

    again, err = run(tmp_path)
    assert again["disk"]["corrupt"] == 0 and again["metrics"]["programs_compiled"] == 0, err


def test_concurrent_processes_share_one_directory(tmp_path: Path) -> None:
    procs = [start(tmp_path) for _ in range(3)]
    reports = [finish(p)[0] for p in procs]
    assert all(r["disk"]["enabled"] for r in reports)
    assert not list(tmp_path.rglob(".tmp.*")), "temporary files must be renamed or removed"
    warm, _ = run(tmp_path)
    assert warm["metrics"]["programs_compiled"] == 0
    assert warm["disk"]["corrupt"] == 0


def test_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    report, err = run(shared)
    assert "refusing" in err and "writable by group or others" in err, err
    assert not report["disk"]["enabled"]
    assert report["metrics"]["programs_compiled"] > 0
    assert list(shared.iterdir()) == []


@pytest.mark.parametrize("value", ["off", ""])
def test_the_disk_tier_can_be_switched_off(tmp_path: Path, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # an empty value must not mean "the current directory"
    report, _ = run(value)
    assert not report["disk"]["enabled"]
    assert report["disk"]["writes"] == 0
    assert list(tmp_path.iterdir()) == []


def test_a_malformed_size_bound_names_the_variable(tmp_path: Path) -> None:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_CACHE_MAX_BYTES="lots")
    proc = subprocess.run([sys.executable, "-c", "import torch_tpu"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0 and "TORCH_TPU_CACHE_MAX_BYTES" in proc.stderr, proc.stderr


def test_cache_stats_in_this_process() -> None:
    import torch_tpu

    stats = torch_tpu.cache_stats()
    assert set(stats) >= {"enabled", "directory", "hits", "misses", "writes", "corrupt", "evictions", "bytes",
                          "max_bytes"}
    # The suite's conftest points the disk tier at a temporary directory, never at ~/.cache.
    if stats["enabled"]:
        assert stats["directory"].startswith(os.environ["TORCH_TPU_CACHE_DIR"])
    assert stats["max_bytes"] == 1 << 30 or "TORCH_TPU_CACHE_MAX_BYTES" in os.environ


# gelu on a tpu tensor arrives as aten::gelu.out (a structured op), which runs the lowering
# registered for aten::gelu: a replaced lowering must change that call's disk key too.
GELU_CHILD = textwrap.dedent(
    """
    import json, sys, torch, torch_tpu
    from torch_tpu.lowering import registry
    if sys.argv[1] == "planted":
        orig = registry.LOWERINGS[registry.op_key(torch.ops.aten.gelu.default)]
        def gelu_plus_half(b, x, approximate="none"):
            y = orig(b, x, approximate)
            return b.binary("add", y, b.full(0.5, y.dtype, y.shape))
        registry.register_lowering(torch.ops.aten.gelu.default)(gelu_plus_half)
    x = torch.linspace(-2, 2, 128).reshape(4, 32)
    diff = (torch.nn.functional.gelu(x.to("tpu")).cpu() - torch.nn.functional.gelu(x)).abs().max().item()
    print(json.dumps({"diff": diff}))
    """
)


def _gelu_diff(cache_dir: Path, which: str) -> float:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir))
    proc = subprocess.run([sys.executable, "-c", GELU_CHILD, which], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])["diff"]


@pytest.mark.parametrize("first", ["clean", "planted"])
def test_a_replaced_lowering_never_shares_disk_entries_with_the_original(tmp_path: Path, first: str) -> None:
    expected = {"clean": 0.0, "planted": 0.5}
    second = "planted" if first == "clean" else "clean"
    for which in (first, second, first):
        assert _gelu_diff(tmp_path, which) == pytest.approx(expected[which], abs=1e-6), which
