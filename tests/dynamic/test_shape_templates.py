"""Per-op lowering reuse across sizes (torch_tpu/lowering/shape_templates.py).

Every case runs an op family at a sweep of sizes on "tpu" and on CPU. Reuse is checked twice:
the values equal CPU's, and with verification on (set_verify, as TORCH_TPU_VERIFY=1 does) every
graph reused at a new size is compared with the graph the lowering builds for that call, so a
learned graph that differs from its lowering at any size of the sweep fails the test.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.lowering import bridge, shape_templates

# Sizes no other test uses (so each is a program-cache miss), small ones after large ones: a
# graph learned at large sizes must hold at 2 and 3 too.
SIZES = [41, 43, 47, 53, 59, 2, 3, 97, 301]


@pytest.fixture(autouse=True)
def fresh_templates():
    shape_templates.reset()
    shape_templates.set_verify(True)
    yield
    shape_templates.set_verify(False)
    shape_templates.reset()


def _grads(fn: Callable, inputs: list[torch.Tensor], device: str) -> list[torch.Tensor]:
    xs = [x.detach().to(device).requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*xs)
    out.float().square().sum().backward()
    return [out.detach().cpu()] + [x.grad.cpu() for x in xs if x.grad is not None]


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


CASES: dict[str, tuple[Callable[[int], list[torch.Tensor]], Callable]] = {
    "broadcast_pointwise": (lambda n: [_rand(n, 5), _rand(5), _rand(n, 1)],
                            lambda a, b, c: torch.where(a > 0, F.gelu(a * b), torch.tanh(a + c))),
    "linear": (lambda n: [_rand(3, n, 7), _rand(9, 7), _rand(9)], F.linear),
    "bmm": (lambda n: [_rand(2, n, 7), _rand(2, 7, n)], torch.bmm),
    "reductions": (lambda n: [_rand(n, 6)], lambda a: a.sum(0) + a.amax(0) * 2),
    "softmax": (lambda n: [_rand(2, n, n)], lambda a: torch.softmax(a, -1) + torch.log_softmax(a, 1)),
    "layer_norm": (lambda n: [_rand(2, n, 16), _rand(16), _rand(16)],
                   lambda a, w, b: F.layer_norm(a, (16,), w, b)),
    "cross_entropy": (lambda n: [_rand(n, 11), torch.randint(0, 11, (n,))], F.cross_entropy),
    "embedding": (lambda n: [torch.randint(0, 13, (2, n)), _rand(13, 8)],
                  lambda i, w: F.embedding(i, w).sum(1)),
    "index_select": (lambda n: [_rand(n, 4), torch.randint(0, 2, (n,))],
                     lambda a, i: a.index_select(0, i)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_equal_cpu_and_graphs_equal_their_lowering_at_every_size(name: str) -> None:
    make, fn = CASES[name]
    torch.manual_seed(0)
    for n in SIZES:
        inputs = make(n)
        want = _grads(fn, inputs, "cpu")
        got = _grads(fn, inputs, "tpu")
        for w, g in zip(want, got, strict=True):
            # float32 sums (softmax, norms, the squared loss) add in another order than CPU's:
            # 1e-5 apart at these sizes, so float32's default rtol (1.3e-6) is too tight.
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, msg=lambda m: f"n={n}: {m}")
    assert shape_templates.stats()["reused"] > 0, f"{name}: no per-op graph was reused across sizes"


def test_an_affine_function_of_one_size_is_a_slot() -> None:
    # The embedding gradient of [2, n] indices flattens them to 2n rows: no argument has that
    # size, but it is 2 * n + 0 at every size, so the graph is learned and reused (and, with
    # verification on, compared with its lowering at every size).
    op = torch.ops.aten.embedding_dense_backward
    for n in SIZES:
        grad, idx = _rand(2, n + 200, 8), torch.randint(0, 13, (2, n + 200))  # sizes of its own
        got = op(grad.to("tpu"), idx.to("tpu"), 13, -1, False).cpu()
        torch.testing.assert_close(got, op(grad, idx, 13, -1, False), rtol=1e-4, atol=1e-4)
    assert shape_templates.stats()["learned"] >= 1
    assert shape_templates.stats()["reused"] >= len(SIZES) - 3


def test_a_size_computed_from_two_varying_sizes_is_not_a_slot() -> None:
    # [m, n] indices flatten to m * n rows with both m and n changing: no affine function of one
    # size gives it, so the signature is rejected and every size is lowered (values equal CPU).
    op = torch.ops.aten.embedding_dense_backward
    for m, n in [(3, 211), (5, 213), (7, 217), (11, 219)]:
        grad, idx = _rand(m, n, 8), torch.randint(0, 13, (m, n))
        got = op(grad.to("tpu"), idx.to("tpu"), 13, -1, False).cpu()
        torch.testing.assert_close(got, op(grad, idx, 13, -1, False), rtol=1e-4, atol=1e-4)
    assert shape_templates.stats()["rejected"] >= 1
    assert shape_templates.stats()["reused"] == 0


def test_layers_of_different_widths_share_a_signature_and_learn_the_token_count() -> None:
    # A model's linear layers are one signature (addmm of [tokens, k] by [k, out]); calls
    # alternate between layers, and the token count changes per batch. The learned graph must
    # not pin the token count of the batch it was learned in: after two batches, every layer
    # at a new token count is reused.
    torch.manual_seed(0)
    widths = [(16, 48), (16, 64), (64, 16)]
    layers = [(_rand(o, k), _rand(o)) for k, o in widths]
    for step, tokens in enumerate([223, 241, 257, 263, 269]):
        before = shape_templates.stats()["reused"]
        for (k, _), (w, b) in zip(widths, layers):
            x = _rand(tokens, k)
            got = F.linear(x.to("tpu"), w.to("tpu"), b.to("tpu")).cpu()
            torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-4, atol=1e-4)
        if step >= 2:
            assert shape_templates.stats()["reused"] - before == len(widths), f"batch {step}"


def test_sizes_that_did_not_vary_while_learning_are_pinned() -> None:
    # Learned with the width fixed at 6: a call with width 10 is lowered, not reused.
    for n in (61, 67, 71):
        (_rand(n, 6).to("tpu") * 3).cpu()
    assert shape_templates.stats()["learned"] >= 1
    before = shape_templates.stats()["reused"]
    x = _rand(73, 10)
    torch.testing.assert_close((x.to("tpu") * 3).cpu(), x * 3)
    assert shape_templates.stats()["reused"] == before


def test_a_differing_reuse_raises_under_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    for n in (79, 83, 89):
        (_rand(n, 2).to("tpu") - 1).cpu()
    real = shape_templates._instantiate

    def off_by_one(t, sizes):  # a wrong learned graph: every slot one too large
        return real(t, [s + 1 for s in sizes])

    monkeypatch.setattr(shape_templates, "_instantiate", off_by_one)
    with pytest.raises(RuntimeError, match="reused across sizes for aten::sub"):
        (_rand(101, 2).to("tpu") - 1).cpu()


def test_turned_off_every_miss_is_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    shape_templates.set_enabled(False)
    try:
        calls = []
        real = bridge._lower
        monkeypatch.setattr(bridge, "_lower", lambda *a: calls.append(1) or real(*a))
        for n in (103, 107, 109, 113):
            (_rand(n, 2).to("tpu") / 3).cpu()
        assert len(calls) == 4 and shape_templates.stats()["reused"] == 0
    finally:
        shape_templates.set_enabled(True)


def test_metrics_report_reuses() -> None:
    for n in (127, 131, 137, 139):
        (_rand(n).to("tpu").exp()).cpu()
    assert torch_tpu.metrics()["shape_templates"]["reused"] >= 1
