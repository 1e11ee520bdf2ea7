"""Forked subprocesses: a child forked after the parent used the device gets a clear
RuntimeError (its stream workers were not copied by fork) instead of hanging, as torch.cuda
does; DataLoader workers, which do not touch the device, keep working; spawn works."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_tpu


def run(code: str, mode: str, script: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter (from `script`, a file, where spawn needs to import it)."""
    env = dict(os.environ, TORCH_TPU_MODE=mode)
    args = ["-c", textwrap.dedent(code)]
    if script is not None:
        script.write_text(textwrap.dedent(code))
        args = [str(script)]
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_child_forked_after_the_device_ran_work_raises_instead_of_hanging(mode: str) -> None:
    out = run("""
        import os, torch, torch_tpu
        lin = torch.nn.Linear(32, 32).to("tpu")
        x = torch.randn(64, 32, device="tpu")
        lin(x).sum().backward()               # work on the stream worker
        expected = (x * 2 + 1).cpu()
        pid = os.fork()
        if pid == 0:
            assert torch.tpu._is_in_bad_fork()
            try:
                (x * 2 + 1).cpu()
            except RuntimeError as e:
                print("child:", e, flush=True)
                os._exit(0 if "forked subprocess" in str(e) and "spawn" in str(e) else 3)
            os._exit(4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert not torch.tpu._is_in_bad_fork()
        assert torch.equal((x * 2 + 1).cpu(), expected)   # the parent is unaffected
        print("parent ok")
    """, mode)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "child: torch_tpu: cannot use the 'tpu' device in a forked subprocess" in out.stdout
    assert "parent ok" in out.stdout


def test_a_child_forked_with_pending_fused_work_raises_instead_of_running_it() -> None:
    # The parent only recorded work (fused mode defers it; no stream worker has started): the
    # pending graph is the parent's, so the child gets the fork error rather than running it.
    out = run("""
        import os, torch, torch_tpu
        x = torch.ones(4).to("tpu") * 2   # recorded, not run
        pid = os.fork()
        if pid == 0:
            try:
                x.cpu()
            except RuntimeError as e:
                print("child:", e, flush=True)
                os._exit(0 if "forked subprocess" in str(e) else 3)
            os._exit(4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert x.cpu().tolist() == [2.0] * 4
        print("parent ok")
    """, "fused")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "child: torch_tpu: cannot use the 'tpu' device in a forked subprocess" in out.stdout
    assert "parent ok" in out.stdout


def test_a_child_forked_before_the_device_was_used_can_use_it() -> None:
    out = run("""
        import os, torch, torch_tpu
        pid = os.fork()
        if pid == 0:
            torch.manual_seed(0)
            lin = torch.nn.Linear(8, 8)
            x = torch.randn(4, 8)
            expected = lin(x).sum()
            expected.backward()
            dev = torch.nn.Linear(8, 8).to("tpu")
            dev.load_state_dict(lin.state_dict())
            got = dev(x.to("tpu")).sum()
            got.backward()
            same = torch.allclose(got.cpu(), expected) and torch.allclose(dev.weight.grad.cpu(), lin.weight.grad)
            os._exit(0 if not torch.tpu._is_in_bad_fork() and same else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        print("ok")
    """, "fused")
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_dataloader_workers_forked_from_a_training_process(mode: str) -> None:
    # The default start method on Linux is fork: workers make CPU batches, the parent trains.
    out = run("""
        import torch, torch_tpu
        torch.manual_seed(0)
        ds = torch.utils.data.TensorDataset(torch.randn(128, 16), torch.randn(128, 1))
        model = torch.nn.Linear(16, 1)
        ref = torch.nn.Linear(16, 1)
        ref.load_state_dict(model.state_dict())
        model = model.to("tpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for num_workers in (0, 2):
            # pin_memory: batches pinned by the loader's thread for the current accelerator (tpu).
            for x, y in torch.utils.data.DataLoader(ds, batch_size=32, num_workers=num_workers, pin_memory=True):
                assert x.is_pinned()
                for m, o, dev in ((model, opt, "tpu"), (ref, ref_opt, "cpu")):
                    loss = torch.nn.functional.mse_loss(m(x.to(dev, non_blocking=True)), y.to(dev, non_blocking=True))
                    o.zero_grad(); loss.backward(); o.step()
        torch.testing.assert_close(model.weight.cpu(), ref.weight.detach())
        print("ok")
    """, mode)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def test_spawned_processes_use_the_device(tmp_path: Path) -> None:
    out = run("""
        import torch, torch_tpu, torch.multiprocessing as mp

        def work(rank, q):
            q.put((torch.arange(4, device="tpu") * (rank + 1)).sum().item())

        if __name__ == "__main__":
            (torch.ones(3, device="tpu") * 2).cpu()   # the parent has started its threads
            ctx = mp.get_context("spawn")
            q = ctx.SimpleQueue()
            ps = [ctx.Process(target=work, args=(r, q)) for r in range(2)]
            for p in ps: p.start()
            for p in ps: p.join(60)
            assert all(p.exitcode == 0 for p in ps)
            assert sorted(q.get() for _ in ps) == [6, 12]
            print("ok")
    """, "fused", tmp_path / "spawn_main.py")
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def test_this_process_is_not_in_a_bad_fork() -> None:
    assert torch.tpu._is_in_bad_fork() is False
    assert torch_tpu._C._in_bad_fork() is False
