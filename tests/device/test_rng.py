"""Random number generation: seeding, state save/restore, generators (OpenReg: test_rng.py)."""

from __future__ import annotations

import pytest
import torch


def _draw() -> torch.Tensor:
    return torch.randn(64, device="tpu").cpu()


def test_manual_seed_reproducible() -> None:
    torch.tpu.manual_seed(1234)
    a = _draw()
    b = _draw()
    torch.tpu.manual_seed(1234)
    torch.testing.assert_close(_draw(), a, rtol=0, atol=0)
    torch.testing.assert_close(_draw(), b, rtol=0, atol=0)
    assert not torch.equal(a, b)
    torch.tpu.manual_seed(4321)
    assert not torch.equal(_draw(), a)


def test_manual_seed_all_and_torch_manual_seed() -> None:
    torch.tpu.manual_seed_all(7)
    a = _draw()
    torch.manual_seed(7)  # seeds every device's default generator too
    assert torch.tpu.initial_seed() == 7
    torch.testing.assert_close(_draw(), a, rtol=0, atol=0)


def test_initial_seed_and_seed() -> None:
    torch.tpu.manual_seed(99)
    assert torch.tpu.initial_seed() == 99
    torch.tpu.seed()
    s = torch.tpu.initial_seed()
    assert s != 99
    a = _draw()
    torch.tpu.manual_seed(s)
    torch.testing.assert_close(_draw(), a, rtol=0, atol=0)


def test_rng_state_restore_replays() -> None:
    torch.tpu.manual_seed(5)
    _draw()
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = _draw()
    u = torch.rand(10, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    torch.testing.assert_close(_draw(), a, rtol=0, atol=0)
    torch.testing.assert_close(torch.rand(10, device="tpu").cpu(), u, rtol=0, atol=0)
    assert torch.equal(torch.tpu.get_rng_state_all()[0], torch.tpu.get_rng_state())
    torch.tpu.set_rng_state_all([state])
    torch.testing.assert_close(_draw(), a, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="RNG state"):
        torch.tpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_rng_state_is_independent_of_execution_timing() -> None:
    # Strict mode queues work; the numbers depend only on the (seed, offset) reserved at call time.
    torch.tpu.manual_seed(11)
    queued = [torch.rand(32, device="tpu") for _ in range(3)]
    torch.tpu.manual_seed(11)
    for q in queued:
        torch.testing.assert_close(torch.rand(32, device="tpu").cpu(), q.cpu(), rtol=0, atol=0)


def test_explicit_generator() -> None:
    g = torch.Generator(device="tpu")
    assert g.device == torch.device("tpu:0")
    g.manual_seed(3)
    a = torch.randn(16, device="tpu", generator=g).cpu()
    g.manual_seed(3)
    torch.testing.assert_close(torch.randn(16, device="tpu", generator=g).cpu(), a, rtol=0, atol=0)
    # A private generator does not advance the default one.
    torch.tpu.manual_seed(3)
    before = torch.tpu.get_rng_state()
    torch.randn(16, device="tpu", generator=g)
    assert torch.equal(torch.tpu.get_rng_state(), before)
    state = g.get_state()
    x = torch.rand(8, device="tpu", generator=g).cpu()
    g.set_state(state)
    torch.testing.assert_close(torch.rand(8, device="tpu", generator=g).cpu(), x, rtol=0, atol=0)


def test_default_generators_and_fork_rng() -> None:
    gens = torch.tpu.default_generators
    assert len(gens) == torch.tpu.device_count()
    torch.tpu.manual_seed(21)
    with torch.random.fork_rng(device_type="tpu"):
        inside = _draw()
    torch.testing.assert_close(_draw(), inside, rtol=0, atol=0)


def test_distributions_are_plausible() -> None:
    torch.tpu.manual_seed(0)
    n = torch.randn(20000, device="tpu").cpu()
    u = torch.rand(20000, device="tpu").cpu()
    assert abs(n.mean().item()) < 0.05 and abs(n.std().item() - 1.0) < 0.05
    assert 0.0 <= u.min().item() and u.max().item() < 1.0 and abs(u.mean().item() - 0.5) < 0.02
    r = torch.randint(0, 10, (5000,), device="tpu").cpu()
    assert r.min().item() == 0 and r.max().item() == 9


def test_randperm_is_a_permutation() -> None:
    torch.tpu.manual_seed(0)
    p = torch.randperm(50, device="tpu")
    assert p.is_tpu and p.dtype == torch.int64
    assert sorted(p.cpu().tolist()) == list(range(50))
    torch.tpu.manual_seed(0)
    assert torch.equal(torch.randperm(50, device="tpu").cpu(), p.cpu())


def test_dropout_uses_tpu_rng() -> None:
    torch.tpu.manual_seed(8)
    x = torch.ones(1000, device="tpu")
    a = torch.nn.functional.dropout(x, 0.5, training=True).cpu()
    torch.tpu.manual_seed(8)
    b = torch.nn.functional.dropout(x, 0.5, training=True).cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert set(a.unique().tolist()) <= {0.0, 2.0}
    assert 400 < (a == 0).sum().item() < 600
