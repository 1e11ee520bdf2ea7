"""Accelerate and device_map="auto" find the tpu device unchanged (torch_tpu.integrations.accelerate):
Accelerator().device, a training loop through accelerator.prepare/backward against the same
loop on CPU, and from_pretrained(device_map="auto")."""

from __future__ import annotations

import pytest
import torch

import torch_tpu  # noqa: F401

accelerate = pytest.importorskip("accelerate", reason="needs accelerate (requirements-dev.txt)")
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState  # noqa: E402
from accelerate.utils import get_max_memory  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch):
    monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_accelerator_picks_tpu_and_cpu_true_still_means_cpu() -> None:
    assert Accelerator().device == torch.device("tpu")
    AcceleratorState._reset_state(reset_partial_state=True)
    assert Accelerator(cpu=True).device == torch.device("cpu")


def test_accelerate_env_variable_still_wins(monkeypatch) -> None:
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cpu")
    assert Accelerator().device == torch.device("cpu")


def _loop(accelerator: Accelerator | None) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, generator=g), torch.randint(0, 3, (), generator=g)) for _ in range(32)]
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    if accelerator is not None:
        model, opt, loader = accelerator.prepare(model, opt, loader)
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        if accelerator is not None:
            accelerator.backward(loss)
        else:
            loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_accelerate_training_loop_matches_cpu() -> None:
    accelerator = Accelerator()
    got = _loop(accelerator)
    assert accelerator.device.type == "tpu"
    torch.testing.assert_close(torch.tensor(got), torch.tensor(_loop(None)), rtol=1e-5, atol=1e-6)


def test_max_memory_lists_tpu_devices_first() -> None:
    mem = get_max_memory()
    keys = list(mem)
    assert keys[0] == 0 and mem[0] == torch.tpu.mem_get_info(0)[0]
    assert "cpu" in keys
    assert get_max_memory({0: 1000, "cpu": 2000}) == {0: 1000, "cpu": 2000}  # the user's answer stands


def test_from_pretrained_device_map_auto(tmp_path) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(tmp_path, safe_serialization=True)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="auto")
    assert {p.device for p in loaded.parameters()} == {torch.device("tpu", 0)}
    ids = torch.tensor([[5, 9, 11, 3, 7, 8]])
    with torch.no_grad():
        want = model(ids).logits
        got = loaded(ids.to("tpu")).logits.cpu()
    # rtol 1e-4: a whole transformer's float32 logits (matmul accumulation order differs from CPU).
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
