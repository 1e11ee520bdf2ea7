"""``torch_tpu.diagnose.parity`` and ``python -m torch_tpu check`` (docs/diagnostics.md, "check").

Planted bugs (a wrong lowering registered for one ATen op) run in a child process with the disk
tier off; see tests/tools/check_targets.py for why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.diagnose import parity
from torch_tpu.diagnose.parity_ops import support_of
from torch_tpu.tools import check

sys.path.insert(0, str(Path(__file__).parent))
import check_targets  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TARGETS = Path(__file__).with_name("check_targets.py")


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": "off", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "torch_tpu", "check", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_clean_model_passes_every_mode():
    model, x = check_targets.make_model()
    r = parity(model, x)
    assert r.ok, r.format()
    assert [m.mode for m in r.modes] == ["strict", "fused", "compiled"]
    assert not r.unsupported and r.traced_ops > 0
    for m in r.modes:
        assert m.ok and m.divergence is None and m.error is None
        assert m.max_abs < 1e-4
    # The model itself is left alone: still on the CPU, in the mode it came in, without grads.
    assert all(p.device.type == "cpu" and p.grad is None for p in model.parameters())
    assert model.training


def test_clean_model_passes_with_train_and_kwargs():
    model, args, kwargs = check_targets.make_model_kwargs()
    r = parity(model, args, kwargs, train=True)
    assert r.ok, r.format()
    assert r.train and all(m.ok for m in r.modes)


@pytest.mark.parametrize("target,op,phase,flags", [
    ("planted_gelu", "aten::gelu", "forward", []),
    ("planted_gelu_backward", "aten::gelu_backward", "backward", ["--train"]),
])
def test_planted_wrong_lowering_is_located_in_every_mode(target, op, phase, flags):
    p = _cli(f"{TARGETS}:{target}", "--json", *flags)
    assert p.returncode == 1, p.stdout + p.stderr
    r = json.loads(p.stdout)
    assert not r["ok"] and not r["unsupported"]
    assert [m["mode"] for m in r["modes"]] == ["strict", "fused", "compiled"]
    for m in r["modes"]:
        assert not m["ok"] and m["error"] is None, m
        d = m["divergence"]
        assert (d["module"], d["cls"], d["phase"]) == ("mlp.act", "GELU", phase), m
        assert d["op"]["op"] == op and d["op"]["phase"] == phase, m
        # gelu + 0.5 is off by exactly 0.5; the doubled gradient by the gradient itself.
        if phase == "forward":
            assert d["op"]["max_abs"] == pytest.approx(0.5, rel=1e-5)
        else:
            assert d["op"]["max_rel"] == pytest.approx(1.0, rel=1e-5)


def test_planted_bug_text_report():
    p = _cli(f"{TARGETS}:planted_gelu", "--modes", "strict")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "strict    DIVERGES" in p.stdout
    assert "module: mlp.act (GELU), call 0, forward" in p.stdout
    assert "op:     aten::gelu (" in p.stdout
    assert p.stdout.rstrip().endswith("check: FAILED (strict diverge(s) or fail(s))")


def test_unsupported_op_listed_before_running():
    model, x = check_targets.make_unsupported()
    assert support_of(torch.ops.parity_test.mystery.default) is None
    assert support_of(torch.ops.aten.gelu.default) == "lowering"
    assert support_of(torch.ops.aten.view.default) == "kernel"
    r = parity(model, x)
    assert not r.ok and r.modes == []  # nothing ran: every mode would stop at the op
    assert [(u.op, u.count, u.modules, u.phase) for u in r.unsupported] == [
        ("parity_test::mystery", 1, [""], "forward")]
    assert "parity_test::mystery  x1 (forward) in (model)" in r.format()


def test_cli_exit_codes_and_json(capsys):
    assert check.main([f"{TARGETS}:make_model", "--modes", "strict,fused", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["ok"] and [m["mode"] for m in r["modes"]] == ["strict", "fused"]
    assert check.main([f"{TARGETS}:make_unsupported", "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert [u["op"] for u in r["unsupported"]] == ["parity_test::mystery"]
    assert check.main([f"{TARGETS}:make_unsupported", "--dry-run"]) == 1
    assert "parity_test::mystery" in capsys.readouterr().out
    assert check.main([f"{TARGETS}:make_model", "--dry-run"]) == 0
    assert "unsupported ops: none" in capsys.readouterr().out
    # Usage errors: exit status 2 with the reason on stderr.
    assert check.main([f"{TARGETS}:no_such_factory"]) == 2
    assert "no function 'no_such_factory'" in capsys.readouterr().err
    assert check.main([f"{TARGETS}:not_a_factory"]) == 2
    assert "must return (model, inputs)" in capsys.readouterr().err
    assert check.main(["missing/file.py:make"]) == 2
    assert check.main([f"{TARGETS}:make_model", "--modes", "eager"]) == 2
    assert "unknown mode" in capsys.readouterr().err


def test_hf_model_kwargs_and_model_output():
    transformers = pytest.importorskip("transformers", reason="Hugging Face transformers is not installed")
    cfg = transformers.GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 97, (2, 7))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False}
    r = parity(model, inputs, modes=["strict", "compiled"], train=True)
    assert r.ok, r.format()
    assert not r.unsupported and r.traced_ops > 100
