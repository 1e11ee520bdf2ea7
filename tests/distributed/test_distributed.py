"""torch.distributed on "tpu": the tpu c10d backend under torchrun, 2 processes on loopback.

Launching processes costs seconds, so each launch runs many checks (tests/distributed/worker.py
writes one JSON line per check and rank) and the tests here assert on those lines:
- one `torchrun --nproc-per-node 2` launch: every collective and dtype against CPU/Gloo, the
  MPMD case in strict and fused mode, DDP, FSDP2 and 2-way tensor parallel training of TinyGPT
  against single-process CPU training, DCP save/load on 2 ranks;
- the DCP checkpoint loaded again in this (single) process, as a full state dict;
- two torchrun "nodes" (`--nnodes 2`, c10d rendezvous on 127.0.0.1) running the collectives;
- a killed rank: rank 1 exits, rank 0's next collective raises within the timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import torch_tpu  # noqa: F401  (registers the backend)

WORKER = str(Path(__file__).with_name("worker.py"))
LAUNCH_TIMEOUT = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(torch_tpu.__file__).parents[1]), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"  # two ranks share the cores
    env.pop("TORCH_TPU_NUM_DEVICES", None)  # the default follows LOCAL_WORLD_SIZE
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)  # example_worker.py gets torch_tpu by autoload only
    env.update(extra)
    return env


def _torchrun(args: list[str], out: Path, phases: str, **env: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch.distributed.run", *args, WORKER, str(out), phases]
    return subprocess.Popen(cmd, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(procs: list[subprocess.Popen]) -> str:
    logs = []
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0] + "\n<killed: launch timeout>")
    return "\n".join(logs)


def _results(out: Path, ranks: int) -> list[dict[str, dict]]:
    res = []
    for r in range(ranks):
        f = out / f"rank{r}.jsonl"
        lines = f.read_text().splitlines() if f.exists() else []
        res.append({d["check"]: d for d in map(json.loads, lines)})
    return res


def _assert_check(results: list[dict[str, dict]], name: str, log: str, ranks=None) -> None:
    for r, res in enumerate(results):
        if ranks is not None and r not in ranks:
            continue
        assert name in res, f"rank {r} did not record {name!r}; output:\n{log[-4000:]}"
        assert res[name]["ok"], f"rank {r}: {name}: {res[name]['detail']}"


@pytest.fixture(scope="module")
def main_launch(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist_main")
    port = _free_port()
    p = _torchrun(["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)],
                  out, "collectives,mpmd,ddp,fsdp,tp,dcp")
    log = _finish([p])
    return out, _results(out, 2), log, p.returncode


COLLECTIVE_CHECKS = (
    ["tpu_backend_selected", "backend_selected", "send_recv", "coalesced", "async_work_and_future",
     "issue_order_mixed_paths", "fused_mode_flushes", "barrier", "object_collectives"]
    + [f"{c}_{dt}" for dt in ("float32", "bfloat16", "int32")
       for c in ("all_reduce_sum", "all_reduce_min", "all_reduce_max", "all_reduce_product", "broadcast", "all_gather", "all_gather_into_tensor",
                 "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_uneven",
                 "all_to_all_single_uneven",
                 "gather_scatter_reduce")]
    + [f"{c}_{dt}" for dt in ("float32", "bfloat16") for c in ("all_reduce_avg", "reduce_scatter_tensor_avg")]
)


@pytest.mark.parametrize("name", COLLECTIVE_CHECKS)
def test_collective_matches_gloo(main_launch, name):
    _, results, log, _ = main_launch
    _assert_check(results, name, log)


@pytest.mark.parametrize("name", ["mpmd_strict", "mpmd_fused"])
def test_mpmd_barrier(main_launch, name):
    _, results, log, _ = main_launch
    _assert_check(results, name, log)


@pytest.mark.parametrize("name", ["ddp_tinygpt", "fsdp2_tinygpt", "tp_tinygpt"])
def test_training_matches_single_process(main_launch, name):
    _, results, log, _ = main_launch
    _assert_check(results, name, log)


def test_dcp_save_load(main_launch):
    out, results, log, _ = main_launch
    _assert_check(results, "dcp_save_load_2_ranks", log)
    # Load the 2-rank checkpoint in this single process, into a full (unsharded) state dict.
    import torch.distributed.checkpoint as dcp

    from torch_tpu.models import TinyGPT

    expected = torch.load(out / "expected_state.pt")
    torch.manual_seed(1)
    model = TinyGPT(vocab=64, dim=32, heads=4, layers=2, ctx=16).to("tpu")
    sd = model.state_dict()
    dcp.load(sd, checkpoint_id=str(out / "ckpt"), no_dist=True)
    model.load_state_dict(sd)
    for k, v in model.state_dict().items():
        assert torch.equal(v.cpu(), expected[k]), k


def test_launch_exits_cleanly(main_launch):
    _, results, log, rc = main_launch
    _assert_check(results, "done", log)
    assert rc == 0, log[-4000:]


def test_unchanged_examples(tmp_path):
    """FSDP2 and FSDP2 + tensor parallel (attention on DTensors) written as PyTorch's examples
    are, with no tpu-specific call: the DeviceMesh sets each rank's device (example_worker.py)."""
    port = _free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(port), str(Path(__file__).with_name("example_worker.py")), str(tmp_path)]
    p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = _finish([p])
    results = _results(tmp_path, 2)
    for name in ("accelerator_is_tpu", "not_initialized_before_the_mesh", "mesh_set_the_device",
                 "fsdp2_example_matches_cpu", "fsdp2_tp_sdpa_matches_cpu", "done"):
        _assert_check(results, name, log)
    assert p.returncode == 0, log[-4000:]


def test_two_nodes_rendezvous(tmp_path):
    """Two torchrun agents ("nodes") meet at a c10d rendezvous endpoint on 127.0.0.1."""
    port = _free_port()
    procs = [_torchrun(["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(i), "--rdzv-backend", "c10d",
                        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "tpu-test"], tmp_path, "mpmd",
                       TPU_TEST_BACKEND="")
             for i in range(2)]
    log = _finish(procs)
    results = _results(tmp_path, 2)
    # No backend argument: init_process_group(device_id=tpu) picks "tpu" by itself.
    for name in ("tpu_backend_selected", "mpmd_strict", "mpmd_fused", "done"):
        _assert_check(results, name, log)
    assert all(p.returncode == 0 for p in procs), log[-4000:]


def test_killed_rank_raises(tmp_path):
    """Rank 1 exits mid-job; rank 0's next collective raises instead of hanging. This launch uses
    init_process_group("tpu") alone, so CPU tensors go through the tpu backend too."""
    port = _free_port()
    procs = []
    for r in range(2):
        env = _env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), TPU_TEST_PG_TIMEOUT="20", TPU_TEST_BACKEND="tpu")
        procs.append(subprocess.Popen([sys.executable, WORKER, str(tmp_path), "killed"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    start = time.monotonic()
    log = _finish(procs)
    results = _results(tmp_path, 1)
    _assert_check(results, "tpu_backend_cpu_tensors", log)
    _assert_check(results, "killed_rank_raises", log)
    detail = results[0]["killed_rank_raises"]["detail"]
    assert "rank 0" in detail or "Connection" in detail or "timed out" in detail.lower(), detail
    assert time.monotonic() - start < 60, f"took {time.monotonic() - start:.0f}s: {detail}"
    assert procs[1].returncode == 3
