"""Recompiles, graph breaks and dynamic shapes: counted, explained and bounded.

``torch_tpu.metrics()["compile"]`` must say how often Dynamo recompiled and which guard
failed, how many graph breaks there were, and a dynamic-shape graph must compile at most
TORCH_TPU_COMPILE_MAX_SHAPES programs, running further shapes eagerly with the same results.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo

import torch_tpu
from torch_tpu.compile import set_max_shapes, stats


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_recompile_is_counted_with_the_failed_guard_and_warns():
    def scale(x, k: int):
        return x * k + 1

    compiled = torch.compile(scale, backend="tpu", dynamic=False)
    x = torch.randn(4).to("tpu")
    compiled(x, 2)
    before = torch_tpu.metrics()["compile"]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = compiled(x, 3)  # the int is specialized: its guard fails
    after = torch_tpu.metrics()["compile"]
    torch.testing.assert_close(got.cpu(), x.cpu() * 3 + 1)
    assert after["recompiles"] == before["recompiles"] + 1
    new = {r: n for r, n in after["recompile_reasons"].items() if n > before["recompile_reasons"].get(r, 0)}
    assert len(new) == 1 and "k" in next(iter(new)), new  # the guard on k is named
    assert any("recompiling scale" in str(m.message) for m in w), [str(m.message) for m in w]


def test_graph_breaks_are_reported_in_metrics():
    def f(x):
        y = torch.relu(x)
        torch._dynamo.graph_break()
        return y * 2

    x = torch.randn(3).to("tpu")
    before = torch_tpu.metrics()["compile"]["graph_breaks"]
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x).cpu(), torch.relu(x.cpu()) * 2)
    assert torch_tpu.metrics()["compile"]["graph_breaks"] == before + 1


def test_dynamic_shapes_compile_at_most_the_limit_then_run_eagerly():
    def f(x):
        return (torch.tanh(x) * x).sum(-1)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    set_max_shapes(2)
    try:
        before = stats()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for n in (3, 5, 7, 3, 9):
                x = torch.randn(n, 4).to("tpu")
                torch.testing.assert_close(compiled(x).cpu(), f(x).cpu(), rtol=1e-5, atol=1e-5)
        after = stats()
    finally:
        set_max_shapes(int(torch_tpu.config.get("TORCH_TPU_COMPILE_MAX_SHAPES")))
    assert after["specializations"] == before["specializations"] + 2  # n=3 and n=5
    assert after["shape_limit_hits"] == before["shape_limit_hits"] + 2  # n=7 and n=9 ran eagerly
    assert after["recompiles"] == before["recompiles"] + 1  # n=5: the second shape
    assert any("TORCH_TPU_COMPILE_MAX_SHAPES=2" in str(m.message) for m in w)
    assert after["fallbacks"] == before["fallbacks"]


def test_mark_dynamic_is_specialized_per_shape():
    def f(x):
        return x.softmax(-1)

    compiled = torch.compile(f, backend="tpu")
    before = stats()["specializations"]
    for n in (2, 6):
        x = torch.randn(n, 8).to("tpu")
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x).cpu(), f(x).cpu(), rtol=1e-6, atol=1e-6)
    assert stats()["specializations"] == before + 2


def test_max_shapes_rejects_bad_values():
    with pytest.raises(ValueError, match="non-negative"):
        set_max_shapes(-1)
