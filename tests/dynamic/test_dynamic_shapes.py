"""Dynamic shapes: variable sequence lengths without a recompilation storm, and the recompile
explainer (``torch_tpu.metrics()["recompiles"]``, TORCH_TPU_LOG=recompiles).

Results are checked against PyTorch CPU at every length; program and recompile counts against
what each mode must compile.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_tpu


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    torch_tpu.reset_metrics()
    yield
    torch._dynamo.reset()
    torch_tpu.set_recompile_log(False)


def _lengths() -> list[int]:
    return [17, 23, 40, 31, 64]


@pytest.mark.filterwarnings("ignore:torch_tpu.compile. recompiling")
def test_sdpa_is_traced_with_a_symbolic_sequence_length():
    """Dynamo traces F.scaled_dot_product_attention on tpu tensors without guarding on their
    sizes, so a dynamic graph serves every length (one frame compile after the second shape)."""
    def attend(q):
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)

    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]  # Dynamo's counters outlive torch._dynamo.reset()
    compiled = torch.compile(attend, backend="tpu", dynamic=True)
    for n in _lengths():
        q = torch.randn(2, 2, n, 8)
        torch.testing.assert_close(compiled(q.to("tpu")).cpu(), attend(q), rtol=1e-5, atol=1e-5)
    assert counters["stats"]["unique_graphs"] - graphs == 1, "a length-specialized SDPA recompiled per length"
    events = torch_tpu.metrics()["recompiles"]["recent"]
    assert not [e for e in events if "compile #" in e["what"]], events  # no Dynamo re-capture
    # Each new length specializes the one graph, naming the sizes that changed.
    assert [e["reason"].split(";")[0] for e in events if e["kind"] == "compiled"][0] == \
        "input 1 17 -> 23, input 3 [2, 2, 17, 8] -> [2, 2, 23, 8]"


def _gpt2(width: int = 64, layers: int = 2):
    transformers = pytest.importorskip("transformers", reason="Hugging Face GPT-2 needs transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=128, n_embd=width, n_layer=layers, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg.loss_type = "ForCausalLM"
    return transformers.GPT2LMHeadModel(cfg)


@pytest.mark.filterwarnings("ignore:torch_tpu.compile. recompiling")
def test_gpt2_training_over_lengths_matches_cpu_and_traces_once():
    """Loss and every gradient equal CPU's at each length; Dynamo captures the model twice
    (the first length static, then one dynamic graph), not once per length."""
    cpu = _gpt2()
    tpu = _gpt2().to("tpu")
    compiled = torch.compile(tpu, backend="tpu")
    g = torch.Generator().manual_seed(0)
    for n in _lengths():
        x = torch.randint(0, 256, (2, n), generator=g)
        want = cpu(input_ids=x, labels=x).loss
        want.backward()
        got = compiled(input_ids=x.to("tpu"), labels=x.to("tpu")).loss
        got.backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
        for (name, p), q in zip(cpu.named_parameters(), tpu.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-4, msg=name)
            p.grad = None
            q.grad = None
    s = torch_tpu.compile.stats()
    # Frame re-captures: the second length makes the length dynamic, and no later one recompiles.
    dynamo = [r for r in torch_tpu.metrics()["recompiles"]["recent"] if "compile #" in r["what"]]
    assert all("#1 " in r["what"] for r in dynamo), dynamo
    assert s["graphs_compiled"] + s["graphs_reused"] >= 2


def test_eager_recompile_names_the_op_the_size_and_the_line(capfd):
    torch_tpu.set_recompile_log(True)
    # A width of its own (37): the first call must compile, so that the second compares with it
    # and not with whatever dtype or size another test last compiled mm for.
    a = torch.randn(4, 37, device="tpu")
    b = torch.randn(37, 3, device="tpu")
    torch.mm(a, b).cpu()
    before = torch_tpu.metrics()["recompiles"]
    torch.mm(torch.randn(5, 37, device="tpu"), b).cpu()  # a new size of an op compiled before
    after = torch_tpu.metrics()["recompiles"]
    assert after["eager"] > before["eager"]
    ev = [e for e in after["recent"] if e["what"] == "aten::mm.out"]  # mm runs as its out variant
    assert ev, after["recent"]
    assert ev[-1]["kind"] == "eager_op"
    assert ev[-1]["reason"] == "input 0 size [4, 37] -> [5, 37]", ev[-1]
    assert "test_dynamic_shapes.py:" in (ev[-1]["source"] or ""), ev[-1]
    assert after["by_op"]["aten::mm.out"] >= 1
    err = capfd.readouterr().err
    assert "[torch_tpu recompile] eager_op aten::mm.out: input 0 size [" in err
    assert "] -> [5, 37] at " in err


def test_a_cache_hit_records_nothing():
    x = torch.randn(6, 6, device="tpu")
    (x + x).cpu()
    before = torch_tpu.metrics()["recompiles"]["count"]
    for _ in range(5):
        (x + x).cpu()
    assert torch_tpu.metrics()["recompiles"]["count"] == before


def test_dtype_changes_are_explained_against_the_previous_signature():
    """Each miss is explained against the op's previous compiled signature; a call that hits
    the cache (a column-major operand of an elementwise op shares its program) adds nothing."""
    # A shape no other test uses, and the explainer's memory of earlier tests' neg programs
    # (kept across reset_metrics) is dropped from the record after the first call.
    x = torch.randn(6, 13, device="tpu")
    torch.neg(x).cpu()
    torch_tpu.reset_metrics()
    torch.neg(x.double()).cpu()
    torch.neg(x.double().t().contiguous().t()).cpu()
    torch.neg(x[:3]).cpu()
    reasons = [e["reason"] for e in torch_tpu.metrics()["recompiles"]["recent"] if e["what"].startswith("aten::neg")]
    assert reasons == ["input 0 dtype Float -> Double", "input 0 dtype Double -> Float"], reasons


def test_warning_past_the_configured_count():
    torch_tpu.set_recompile_warn(2)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for n in range(3, 8):
                torch.exp(torch.ones(n, device="tpu")).cpu()
        assert any("TORCH_TPU_RECOMPILE_WARN=2" in str(m.message) for m in w), [str(m.message) for m in w]
    finally:
        torch_tpu.set_recompile_warn(int(torch_tpu.config.get("TORCH_TPU_RECOMPILE_WARN")))
    with pytest.raises(ValueError):
        torch_tpu.set_recompile_warn(-1)


@pytest.mark.filterwarnings("ignore:torch_tpu.compile. recompiling")
def test_compiled_recompile_is_explained_with_its_source_line():
    def scale(x, k: int):
        return x * k + 1

    compiled = torch.compile(scale, backend="tpu")
    x = torch.randn(3, device="tpu")
    compiled(x, 2)
    compiled(x, 3)
    ev = [e for e in torch_tpu.metrics()["recompiles"]["recent"] if e["kind"] == "compiled"]
    assert ev and "scale" in ev[-1]["what"], ev
    assert (ev[-1]["source"] or "").endswith(f"test_dynamic_shapes.py:{scale.__code__.co_firstlineno + 1}"), ev
