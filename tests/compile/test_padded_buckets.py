"""Padded buckets (torch_tpu/compile/padded_buckets.py): a dynamic-shape graph learned across
sizes runs as one padded program per bucket, and its results equal the unpadded run.

Each case compiles a function whose length changes, learns it at three exact lengths, then runs
lengths spread over several buckets (multiples of 32 among them) with buckets on. With
verification on (TORCH_TPU_VERIFY's switch) every padded run is also compared with the exact
program for its length; the results are compared with CPU either way.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_tpu
from torch_tpu.compile import padded_buckets
from torch_tpu.compile.stats import reset_stats, stats
from torch_tpu.lowering import shape_templates

LEARN = [37, 45, 51]  # exact lowerings the graph is learned from (between 32 and 64)
RUN = [20, 33, 47, 64, 100, 101, 128, 3, 70]  # then padded to 16, 32, 64 and 128
BUCKETS = [16, 32, 64, 128]


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    reset_stats()
    shape_templates.set_verify(True)
    yield
    shape_templates.set_verify(False)
    padded_buckets.set_buckets("auto")
    torch._dynamo.reset()


def _attention(q: torch.Tensor, causal: bool) -> torch.Tensor:
    k = q * 0.5 + 1
    return F.scaled_dot_product_attention(q, k, q, is_causal=causal)


# name -> (inputs at length n, function); the length is dim 1 of the first input.
CASES: dict[str, tuple[Callable[[int], list[torch.Tensor]], Callable]] = {
    "sum_mean_amax_argmax": (lambda n: [torch.randn(2, n, 5)],
                             lambda x: (x.sum(1), x.mean(1), x.amax(1), x.argmax(1), x.var(1))),
    "softmax_log_softmax": (lambda n: [torch.randn(2, n, 3)],
                            lambda x: (torch.softmax(x, 1), torch.log_softmax(x.transpose(1, 2), -1))),
    "layer_norm_then_token_mean": (lambda n: [torch.randn(2, n, 8), torch.randn(8)],
                                   lambda x, w: F.layer_norm(x, (8,), w).mean((0, 1))),
    "cross_entropy_flattened": (lambda n: [torch.randn(2, n, 7), torch.randint(-1, 7, (2, n))],
                                lambda x, t: F.cross_entropy(x.reshape(-1, 7), t.reshape(-1), ignore_index=-1)),
    "shifted_causal_loss": (lambda n: [torch.randn(2, n, 7), torch.randint(0, 7, (2, n))],
                            lambda x, t: F.cross_entropy(x[:, :-1].reshape(-1, 7),
                                                         F.pad(t, (0, 1), value=-100)[:, 2:].reshape(-1))),
    "attention_causal": (lambda n: [torch.randn(2, n, 2, 8)], lambda q: _attention(q.transpose(1, 2), True).sum(2)),
    "attention_full": (lambda n: [torch.randn(2, n, 2, 8)], lambda q: _attention(q.transpose(1, 2), False)),
    # Rows of 32K elements and more, compacted row by row (XLA's CPU plugin once got them wrong).
    "flattened_wide_rows": (lambda n: [torch.randn(2, n, 256)], lambda x: (x * 2).reshape(-1, 256)),
    # A result padded along two dims: compacted by one gather, not by rows.
    "pairwise_scores": (lambda n: [torch.randn(2, n, 4)], lambda x: torch.softmax(x @ x.transpose(1, 2), -1)),
    "contraction_over_tokens": (lambda n: [torch.randn(2, n, 4), torch.randn(2, n, 3)],
                                lambda a, b: torch.einsum("bnk,bnj->kj", a, b)),
}


def _run(name: str, n: int, g: Callable) -> None:
    make, fn = CASES[name]
    torch.manual_seed(n)
    inputs = make(n)
    want = fn(*inputs)
    got = g(*[x.to("tpu") for x in inputs])
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for w, o in zip(want, got, strict=True):
        # Padded sums add in other blocks than CPU's: float32 rounding, not a tolerance for errors.
        torch.testing.assert_close(o.cpu(), w, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}, n={n}: {m}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_padded_results_equal_cpu_and_the_exact_program(name: str) -> None:
    g = torch.compile(CASES[name][1], backend="tpu")
    padded_buckets.set_buckets(None)
    for n in LEARN:
        _run(name, n, g)
    padded_buckets.set_buckets(BUCKETS)
    for n in RUN:
        _run(name, n, g)
    assert 1 <= stats()["graph_buckets"] <= len(BUCKETS), stats()
    assert stats()["bucket_rejections"] == 0


@pytest.mark.parametrize("name", ["cross_entropy_flattened", "attention_causal", "pairwise_scores"])
def test_buckets_on_from_the_start_learn_at_the_first_dynamic_call(name: str) -> None:
    # The graph learns from lowerings at its first size and two nearby ones (never run): no
    # exact program at a learning size (on PJRT, an XLA compile each), padded from then on.
    g = torch.compile(CASES[name][1], backend="tpu")
    padded_buckets.set_buckets(BUCKETS)
    for n in [37, 45, 20, 101]:  # Dynamo's first graph is static (one exact program), then dynamic
        _run(name, n, g)
    assert stats()["graph_templates"] >= 1, stats()
    assert stats()["graph_buckets"] == 3, stats()  # 64, 32, 128
    assert stats()["specializations"] == 0 and stats()["bucket_rejections"] == 0, stats()  # no exact program


def test_training_attention_learns_at_the_first_dynamic_call() -> None:
    # Its forward saves the log-sum-exp padded to a multiple of 32 for the backward: a size
    # function equal over the sizes next to 45 (and to 101), so learning needs one below 33.
    def step(q: torch.Tensor) -> torch.Tensor:
        return _attention(q.transpose(1, 2), True).square().sum()

    g = torch.compile(step, backend="tpu")
    padded_buckets.set_buckets(BUCKETS)
    for n in [37, 45, 20, 101]:  # Dynamo's first graph is static, then dynamic
        torch.manual_seed(n)
        q = torch.randn(2, n, 2, 8, requires_grad=True)
        step(q).backward()
        qt = q.detach().to("tpu").requires_grad_()
        g(qt).backward()
        # Padded sums add in other blocks than CPU's: float32 rounding, not a tolerance for errors.
        torch.testing.assert_close(qt.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=f"n={n}")
    assert stats()["graph_templates"] == 2, stats()  # forward and backward, each from one call
    assert stats()["graph_buckets"] == 6, stats()  # 64, 32, 128 for each
    assert stats()["specializations"] == 0 and stats()["bucket_rejections"] == 0, stats()


def test_changing_the_buckets_applies_to_lengths_already_run() -> None:
    g = torch.compile(CASES["sum_mean_amax_argmax"][1], backend="tpu")
    padded_buckets.set_buckets(None)
    for n in LEARN + [55]:
        _run("sum_mean_amax_argmax", n, g)
    padded_buckets.set_buckets(BUCKETS)
    _run("sum_mean_amax_argmax", 55, g)  # ran exact above: now its bucket's padded program
    assert stats()["graph_buckets"] == 1, stats()
    before = stats()
    padded_buckets.set_buckets(None)
    _run("sum_mean_amax_argmax", 55, g)  # and back to an exact program
    # One new exact specialization (an instance of the learned graph), no new bucket program.
    assert stats()["specializations"] == before["specializations"] + 1, stats()
    assert stats()["graph_buckets"] == 1, stats()


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_short_input_is_bound_without_waiting(mode: str) -> None:
    """An input shorter than its bucket (token ids, a zero gradient) is copied, padded with
    zeros, behind the work that produces it: the caller does not wait for the device (it used
    to read the input back, stalling every padded call) and no device program is compiled per
    length (on PJRT each would be an XLA compile)."""
    with torch_tpu.mode(mode):
        torch.tpu.synchronize()
        syncs = torch_tpu.metrics()["host_syncs"]
        x = torch.arange(10, device="tpu").reshape(2, 5) * 3  # queued (strict) or pending (fused)
        bound = padded_buckets._bind(x, 16)
        assert torch_tpu.metrics()["host_syncs"] == syncs
        assert bound.shape == (16,) and bound.dtype == torch.int64
        assert bound.cpu().tolist() == [3 * i for i in range(10)] + [0] * 6
        for n in (17, 24, 40):
            y = padded_buckets._bind(x[:, 1:], n)  # a view: made contiguous first
            assert y.cpu().tolist() == [3, 6, 9, 12, 18, 21, 24, 27] + [0] * (n - 8)
    # No program per length: tests/pjrt/test_pjrt_resident.py counts the executables on PJRT.


def test_a_short_input_whose_producer_fails_is_lost_too() -> None:
    """Bound behind a producer that fails on the device, the padded copy has no value either:
    using it raises the producer's error, never stale memory."""
    with torch_tpu.mode("fused"):
        torch.tpu.synchronize()
        x = torch.arange(5.0, device="tpu").index_select(0, torch.tensor([1, 10], device="tpu"))
        bound = padded_buckets._bind(x, 8)
        with pytest.raises(IndexError, match="out of (range|bounds)"):
            bound.cpu()  # the failure itself, or the lost value it left
        with pytest.raises(IndexError, match="value was lost"):
            bound.cpu()


def test_a_length_past_the_last_bucket_runs_its_exact_program() -> None:
    g = torch.compile(CASES["sum_mean_amax_argmax"][1], backend="tpu")
    padded_buckets.set_buckets(None)
    for n in LEARN + [55]:  # the first call compiles a static graph: three dynamic ones learn
        _run("sum_mean_amax_argmax", n, g)
    padded_buckets.set_buckets([64])
    _run("sum_mean_amax_argmax", 60, g)
    _run("sum_mean_amax_argmax", 61, g)  # the same bucket program
    compiled = stats()["graphs_compiled"]
    _run("sum_mean_amax_argmax", 90, g)  # past 64: exact
    assert stats()["graph_buckets"] == 1
    assert stats()["graphs_compiled"] == compiled + 1


def test_a_graph_that_cannot_run_padded_warns_and_keeps_exact_programs() -> None:
    # The last position's values: a slice whose start depends on the length.
    def last(x: torch.Tensor) -> torch.Tensor:
        return x[:, -1] * 2

    g = torch.compile(last, backend="tpu")
    padded_buckets.set_buckets(None)
    for n in LEARN:
        torch.testing.assert_close(g(torch.arange(2.0 * n).reshape(2, n).to("tpu")).cpu(),
                                   last(torch.arange(2.0 * n).reshape(2, n)))
    padded_buckets.set_buckets(BUCKETS)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for n in (20, 47, 100):
            x = torch.arange(2.0 * n).reshape(2, n)
            torch.testing.assert_close(g(x.to("tpu")).cpu(), last(x))
    assert any("cannot run padded" in str(w.message) and "slice" in str(w.message) for w in seen)
    assert stats()["graph_buckets"] == 0 and stats()["bucket_rejections"] >= 1


@pytest.mark.parametrize("loss_in_graph", [False, True])
def test_gpt2_training_at_bucketed_lengths_matches_cpu(loss_in_graph: bool) -> None:
    pytest.importorskip("transformers", reason="the GPT-2 model comes from transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=96, n_positions=256, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    ref = GPT2LMHeadModel(cfg)
    model = GPT2LMHeadModel(cfg)
    model.load_state_dict(ref.state_dict())
    if loss_in_graph:
        # GPT2LMHeadModel's loss lookup warns through transformers' warning_once, a graph break
        # that gives the loss graphs of its own; a loss type read from the model avoids it.
        model.loss_type = "ForCausalLM"
    model.to("tpu")
    f = torch.compile(model, backend="tpu")
    padded_buckets.set_buckets(None)
    lengths = [37, 45, 51, 59, 70, 20, 96, 64, 33, 130, 5]
    for i, n in enumerate(lengths):
        if i == 5:
            padded_buckets.set_buckets(BUCKETS + [256])
        x = torch.randint(0, 96, (2, n), generator=torch.Generator().manual_seed(n))
        want = ref(input_ids=x, labels=x).loss
        want.backward()
        got = f(input_ids=x.to("tpu"), labels=x.to("tpu")).loss
        got.backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
        grads = dict(ref.named_parameters())
        for name, p in model.named_parameters():
            torch.testing.assert_close(p.grad.cpu(), grads[name].grad, rtol=1e-4, atol=1e-5, msg=name)
        ref.zero_grad()
        model.zero_grad()
    # Forward and backward of the model (and of the loss, when it is a graph of its own), each
    # at most once per bucket used.
    graphs = 2 if loss_in_graph else 4
    assert graphs <= stats()["graph_buckets"] <= graphs * 5, stats()
    assert stats()["bucket_rejections"] == 0, stats()


def test_default_buckets_compile_at_most_8_programs_for_16_to_512() -> None:
    used = {padded_buckets.bucket_for(n, padded_buckets.default_buckets()) for n in range(16, 513)}
    assert sorted(used) == [16, 32, 64, 128, 192, 256, 384, 512]
    # Past 128 a length is padded by less than half (pow2 alone: nearly double).
    assert all(padded_buckets.bucket_for(n, padded_buckets.default_buckets()) < n * 3 / 2 for n in range(129, 513))
    padded_buckets.set_buckets("pow2")
    assert padded_buckets.buckets()[:4] == [16, 32, 64, 128]
    padded_buckets.set_buckets("on")
    assert padded_buckets.buckets()[:6] == [16, 32, 64, 128, 192, 256]
    padded_buckets.set_buckets("off")
    assert padded_buckets.buckets() is None
    with pytest.raises(ValueError, match="comma-separated sizes"):
        padded_buckets.set_buckets("sometimes")
