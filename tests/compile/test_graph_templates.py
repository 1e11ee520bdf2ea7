"""Dynamic-shape graphs lowered once per class of sizes (torch_tpu/compile/graph_templates.py).

A graph Dynamo traced with a symbolic length learns from three lowerings how its IR depends on
the length, then writes each new length into the learned graph instead of lowering. These tests
train a small causal transformer at many lengths (multiples of 32 included: the attention's
log-sum-exp is padded to them) with every instance checked against a fresh lowering, and compare
losses and gradients with CPU.
"""

from __future__ import annotations

import pytest
import sympy
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_tpu
from torch_tpu.compile import graph_templates, stats
from torch_tpu.compile.lower_graph import LoweredGraph
from torch_tpu.lowering import shape_templates


@pytest.fixture(autouse=True)
def _fresh_dynamo_and_verify():
    torch._dynamo.reset()
    was = shape_templates.verifying()
    shape_templates.set_verify(True)  # every instance is compared with a fresh lowering
    yield
    shape_templates.set_verify(was)
    torch._dynamo.reset()


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int = 50, width: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Embedding(256, width)
        self.ln = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.mlp = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, s = ids.shape
        x = self.emb(ids) + self.pos(torch.arange(s, device=ids.device))
        q, k, v = self.qkv(self.ln(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1)
        x = x + a
        x = x + F.gelu(self.mlp(x), approximate="tanh")
        logits = self.head(x)
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def test_training_at_many_lengths_instantiates_learned_graphs_equal_to_cpu():
    torch.manual_seed(0)
    ref = TinyLM()
    model = TinyLM().to("tpu")
    model.load_state_dict(ref.state_dict())
    step = torch.compile(model, backend="tpu")
    before = stats()
    for n in (20, 33, 47, 64, 96, 70, 128, 81, 150, 31, 192, 17):
        ids = torch.randint(0, 50, (2, n))
        want = ref(ids)
        want.backward()
        got = step(ids.to("tpu"))
        got.backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(ref.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-5, msg=name)
            p.grad = q.grad = None
    after = stats()
    assert after["graph_templates"] - before["graph_templates"] >= 2  # forward and backward
    assert after["graph_instances"] - before["graph_instances"] >= 6
    assert after["shape_limit_hits"] == before["shape_limit_hits"]  # no length ran eagerly


def test_graph_with_an_op_outside_the_trusted_list_is_lowered_per_size():
    def f(x):
        return torch.cumsum(x, 0) * 2

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    before = stats()
    for n in (3, 5, 7, 9, 11):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert stats()["graph_instances"] == before["graph_instances"]


def test_templates_off_lowers_every_size():
    def f(x):
        return (torch.tanh(x) * x).sum(-1)

    compiled = torch.compile(f, backend="tpu")  # the second size marks dim 0 dynamic
    shape_templates.set_enabled(False)
    try:
        before = stats()
        for n in (3, 5, 7, 9, 11):
            x = torch.randn(n, 4)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x), rtol=1e-5, atol=1e-5)
        after = stats()
    finally:
        shape_templates.set_enabled(True)
    assert after["graph_instances"] == before["graph_instances"]
    assert after["specializations"] - before["specializations"] == 4  # 3 compiled static


def test_pointwise_graph_learns_after_three_sizes():
    def f(x):  # not the graph of the test above: the backend's program cache would serve it
        return (torch.sigmoid(x) * x).sum(-1)

    compiled = torch.compile(f, backend="tpu")  # the second size marks dim 0 dynamic
    before = stats()
    for n in (3, 5, 7, 9, 11, 40):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x), rtol=1e-5, atol=1e-5)
    after = stats()
    assert after["graph_templates"] - before["graph_templates"] == 1
    assert after["graph_instances"] - before["graph_instances"] == 2  # 5, 7, 9 lowered; 11 and 40 not


def _graph(nodes: list[tuple]) -> LoweredGraph:
    return LoweredGraph(nodes, [(len(nodes) - 1, -1)], [("n", 0)], 0, 1)


def test_fits_affine_and_ceiling_functions_of_the_size():
    s = sympy.Symbol("s", integer=True, positive=True)
    t = graph_templates.GraphTemplate([32 * sympy.ceiling(s / 32)])

    def lowering(n: int) -> LoweredGraph:
        padded = -(-n // 32) * 32
        return _graph([(0, (), 6, (2, n), (0,), ()), (1, (0,), 6, (2 * n + 1, padded), (padded - n, 7), (0.5,))])

    assert not t.observe(40, lowering(40)) and not t.observe(57, lowering(57))
    assert t.instance(70) is None
    assert t.observe(100, lowering(100))  # the third size confirms
    for n in (33, 63, 65, 200, 511):
        assert graph_templates._fields(t.instance(n)) == graph_templates._fields(lowering(n))
    assert t.instance(64) is None  # a multiple of 32 is its own class: not learned yet


def test_a_graph_that_changes_beyond_the_fitted_functions_is_never_instantiated():
    t = graph_templates.GraphTemplate([])

    def lowering(n: int) -> LoweredGraph:  # n * n: no affine fit
        return _graph([(0, (), 6, (n * n,), (0,), ())])

    for n in (3, 4, 5, 6, 7, 8):
        t.observe(n, lowering(n))
    assert t.instance(9) is None


def test_check_raises_when_an_instance_differs_from_its_lowering():
    a = _graph([(0, (), 6, (4,), (0,), ())])
    b = _graph([(0, (), 6, (5,), (0,), ())])
    graph_templates.check(a, a, 4)
    with pytest.raises(RuntimeError, match="reused across sizes differs"):
        graph_templates.check(a, b, 5)


def test_metrics_report_template_counts():
    m = torch_tpu.metrics()["compile"]
    assert {"graph_templates", "graph_instances"} <= set(m)


def test_size_functions_sympy_cannot_evaluate_are_left_out():
    s = sympy.Symbol("s", integer=True, positive=True)
    assert graph_templates._evaluates(32 * sympy.ceiling(s / 32), s)
    assert not graph_templates._evaluates(sympy.Function("opaque")(s), s)
