"""torch.compile(backend="tpu"): whole FX graphs (AOTAutograd forward/backward) as one program.

Every compiled result is compared with the same computation in eager strict mode, which runs
the same lowerings op by op; the host runtime's fused clusters match per-op ATen rounding, so
tolerances are tight. Models are small: Dynamo and AOTAutograd tracing dominate the run time.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch._dynamo
from torch import nn
from torch.nn import functional as F

import torch_tpu
from torch_tpu.compile import stats
from torch_tpu.models import MLP, SmallCNN, TinyGPT

DEV = "tpu"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> None:
    # Compiled graphs go through AOTAutograd's decompositions and partitioning, which compute
    # some ops in another order than the eager per-op lowerings (e.g. a decomposed mean or
    # addmm), so float32 results differ by a few ulps more than assert_close's 1.3e-6 allows.
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=tol, atol=tol)


def _program_of(f, *example: torch.Tensor):
    """f traced to an ATen graph (make_fx), lowered and compiled as one program, with the
    lowering's plan: for tests that call a program directly, with inputs Dynamo never sees."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_tpu.compile.lower_graph import lower_graph

    gm = make_fx(f)(*(x.to(DEV) for x in example))  # copies: f may write its inputs
    lg = lower_graph(gm, [x.to(DEV) for x in example])
    return torch_tpu._C._CompiledGraph(lg.nodes, lg.outputs, lg.returns, lg.rng_counters, lg.num_inputs, [],
                                       lg.host_outputs), lg


def test_backend_is_registered():
    assert torch._dynamo.lookup_backend("tpu") is not None


def test_mlp_inference_is_one_program_and_not_lowered_again():
    torch.manual_seed(0)
    model = MLP().to(DEV).eval()
    x = torch.randn(8, 32).to(DEV)
    compiled = torch.compile(model, backend="tpu", fullgraph=True)
    before = stats()
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
        lowered = stats()["graphs_compiled"]
        got2 = compiled(x)
    after = stats()
    assert after["graphs_compiled"] == before["graphs_compiled"] + 1
    assert after["graphs_compiled"] == lowered  # the second call ran the compiled program only
    assert after["fallbacks"] == before["fallbacks"]
    _close(got, want)
    _close(got2, want)


def test_tinygpt_inference_matches_eager():
    torch.manual_seed(0)
    model = TinyGPT(vocab=64, dim=32, heads=4, layers=2, ctx=16).to(DEV).eval()
    idx = torch.randint(0, 64, (2, 16)).to(DEV)
    compiled = torch.compile(model, backend="tpu", fullgraph=True)
    before = stats()["fallbacks"]
    with torch.no_grad():
        want, _ = model(idx)
        got, _ = compiled(idx)
    assert stats()["fallbacks"] == before
    _close(got, want, 2e-5)


def _train(model: nn.Module, batches, compiled: bool, mode: str = "strict") -> tuple[list[float], dict[str, torch.Tensor]]:
    """Trains with AdamW; the ops outside the compiled graphs (loss, optimizer) run in `mode`."""
    fwd = torch.compile(model, backend="tpu") if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, eps=1e-6)
    losses = []
    with torch_tpu.mode(mode):
        for x, y in batches:
            loss = fwd(x, y)[1] if isinstance(model, TinyGPT) else F.cross_entropy(fwd(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("eager_mode", ["strict", "fused"])
def test_tinygpt_training_matches_eager(eager_mode):
    """Compiled forward and backward, with the optimizer around them in strict or fused eager."""
    torch.manual_seed(0)
    base = TinyGPT(vocab=64, dim=32, heads=4, layers=1, ctx=16)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 64, (2, 16), generator=g).to(DEV), torch.randint(0, 64, (2, 16), generator=g).to(DEV))
               for _ in range(3)]
    before = stats()
    eager_losses, eager_params = _train(copy.deepcopy(base).to(DEV), batches, compiled=False)
    comp_losses, comp_params = _train(copy.deepcopy(base).to(DEV), batches, compiled=True, mode=eager_mode)
    after = stats()
    assert after["fallbacks"] == before["fallbacks"]
    # Forward and backward programs: compiled here, or reused from the other mode's run.
    programs = ("graphs_compiled", "graphs_reused", "graphs_loaded")
    assert sum(after[k] for k in programs) >= sum(before[k] for k in programs) + 2
    # Decomposition order differs from eager (see _close), and the optimizer steps compound it.
    torch.testing.assert_close(comp_losses, eager_losses, rtol=1e-5, atol=1e-5)
    for k in eager_params:
        _close(comp_params[k], eager_params[k], 1e-4)


@pytest.mark.parametrize("eager_mode", ["strict", "fused"])
def test_cnn_batchnorm_training_matches_eager(eager_mode):
    """Batch norm's running statistics are input mutations AOTAutograd applies after the graph;
    in fused mode the loss and optimizer around the graphs are deferred."""
    torch.manual_seed(0)
    base = SmallCNN()
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(4, 1, 16, 16, generator=g).to(DEV), torch.randint(0, 10, (4,), generator=g).to(DEV))
               for _ in range(2)]
    before = stats()["fallbacks"]
    eager_losses, eager_params = _train(copy.deepcopy(base).to(DEV), batches, compiled=False)
    comp_losses, comp_params = _train(copy.deepcopy(base).to(DEV), batches, compiled=True, mode=eager_mode)
    assert stats()["fallbacks"] == before
    # Decomposition order differs from eager (see _close), and the optimizer steps compound it.
    torch.testing.assert_close(comp_losses, eager_losses, rtol=1e-5, atol=1e-5)
    for k in eager_params:  # includes running_mean / running_var / num_batches_tracked
        _close(comp_params[k], eager_params[k], 1e-4)


def test_conv_training_saves_activations_channels_last():
    """A convolution network's forward graph stores the activations it saves for the backward
    channels-last, the layout the host runtime computes convolution chains in (backend.py,
    _channels_last_saved); the tensors the user gets back keep PyTorch's layout, and the
    gradients match eager."""
    from torch_tpu.models import SmallResNet

    class WithFeatures(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = SmallResNet(width=8)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            feats = self.net.stem(x)
            return feats, self.net(x)

    torch.manual_seed(0)
    base = WithFeatures()
    x, y = torch.randn(2, 3, 16, 16), torch.tensor([1, 3])
    ref = copy.deepcopy(base)
    want_feats, want_logits = ref(x)
    (F.cross_entropy(want_logits, y) + want_feats.mean()).backward()
    dev = copy.deepcopy(base).to(DEV)
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        feats, logits = torch.compile(dev, backend="tpu")(x.to(DEV))
    (F.cross_entropy(logits, y.to(DEV)) + feats.mean()).backward()
    assert feats.is_contiguous() and logits.is_contiguous()
    channels_last = [t for t in saved if t.dim() == 4 and not t.is_contiguous()
                     and t.is_contiguous(memory_format=torch.channels_last)]
    assert len(channels_last) >= 10, [tuple(t.stride()) for t in saved if t.dim() == 4]
    _close(feats.cpu(), want_feats, 2e-5)  # convolutions: see _close
    _close(logits.cpu(), want_logits, 2e-5)
    for (k, p), (_, q) in zip(dev.named_parameters(), ref.named_parameters()):
        _close(p.grad.cpu(), q.grad, 1e-4)


def _train_one_step_saving() -> tuple[nn.Module, list[torch.Tensor]]:
    """A one-layer TinyGPT compiled and trained one step on "tpu" (its gradients checked
    against eager CPU), and the tensors autograd saved for its backward."""
    torch.manual_seed(0)
    base = TinyGPT(vocab=32, dim=16, heads=2, layers=1, ctx=8)
    x, y = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))
    ref = copy.deepcopy(base)
    ref(x, y)[1].backward()
    dev = copy.deepcopy(base).to(DEV)
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        _, loss = torch.compile(dev, backend="tpu")(x.to(DEV), y.to(DEV))
    loss.backward()
    for (k, p), (_, q) in zip(dev.named_parameters(), ref.named_parameters()):
        _close(p.grad.cpu(), q.grad)
    return dev, saved


def test_saved_views_of_weights_alias_the_weights():
    """The forward saves ``t(weight)`` of each linear layer for the backward. It returns those as
    views of the weights, as eager autograd saves them, rather than as copies made every step
    (lower_graph.py, _input_view); the gradients match eager."""
    dev, saved = _train_one_step_saving()
    weights = {p.untyped_storage().data_ptr(): k for k, p in dev.named_parameters() if k.endswith("weight")}
    aliased = {weights.get(t.untyped_storage().data_ptr()) for t in saved} - {None}
    linear = {"blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight", "blocks.0.mlp.0.weight",
              "blocks.0.mlp.2.weight", "tok.weight"}  # the head shares tok.weight
    assert linear <= aliased, sorted(aliased)


def test_saved_query_key_value_are_views_of_one_projection():
    """The forward saves q, k and v for the attention backward: transposed slices of the qkv
    projection. It returns them as views of the projection, computed into a new tensor once,
    rather than as three copies every step (lower_graph.py, _computed_view); the gradients
    match eager."""
    _, saved = _train_one_step_saving()
    heads = [t for t in saved if t.dim() == 4 and tuple(t.shape) == (2, 2, 8, 8)]  # [B, H, T, D]
    storages = {t.untyped_storage().data_ptr() for t in heads}
    offsets = sorted(t.storage_offset() for t in heads)
    # q, k, v (and the attention output, which has its own layout) in two storages at most,
    # the projection's holding three slices D * H apart.
    assert len(heads) >= 3 and len(storages) < len(heads), [(t.stride(), t.storage_offset()) for t in heads]
    assert {0, 16, 32} <= set(offsets), offsets


def test_view_of_an_input_laid_out_otherwise_than_traced_has_the_traced_values():
    """A returned view of an input is taken with the traced strides; an input laid out
    otherwise (a saved tensor an earlier graph returned contiguous where the trace had it
    transposed) is first copied into the traced layout (exec/compiled.cpp, traced_view)."""

    def f(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return w.t(), w * 2

    w0 = torch.randn(3, 5)
    prog, lg = _program_of(f, w0)
    assert lg.returns[0][0] == "v"
    w = w0.to(DEV)
    view, _ = prog.run([w])
    assert view.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()  # a view of w
    torch.testing.assert_close(view.cpu(), w0.t(), rtol=0, atol=0)
    # Same sizes, other strides: the values of w.t(), in memory of their own.
    w_t = w0.t().contiguous().to(DEV).t()  # [3, 5] with strides (1, 3)
    view, _ = prog.run([w_t])
    assert view.untyped_storage().data_ptr() != w_t.untyped_storage().data_ptr()
    torch.testing.assert_close(view.cpu(), w0.t(), rtol=0, atol=0)


def test_compiled_optimizer_step_matches_eager():
    """``torch.compile(opt.step)``: AdamW keeps its step counts in CPU tensors, which the graph
    increments and reads (bias corrections). Their new values are computed on the host as the
    program is enqueued (lower_graph.py, host outputs); parameters, moments and step counts
    match eager CPU, and nothing falls back to eager."""
    torch.manual_seed(0)
    ref = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7))]
    dev = [torch.nn.Parameter(p.detach().to(DEV)) for p in ref]
    ref_opt = torch.optim.AdamW(ref, lr=0.1, weight_decay=0.01)
    dev_opt = torch.optim.AdamW(dev, lr=0.1, weight_decay=0.01)
    step = torch.compile(dev_opt.step, backend="tpu")
    fallbacks = stats()["fallbacks"]
    for _ in range(3):
        grads = [torch.randn_like(p) for p in ref]
        for p, q, g in zip(ref, dev, grads):
            p.grad, q.grad = g, g.to(DEV)
        ref_opt.step()
        step()
    assert stats()["fallbacks"] == fallbacks
    # The inputs are distinct memory (one memory class each), so each shape's update chains
    # are one cluster, not one per written tensor (6 here).
    from torch_tpu.compile.backend import _PROGRAMS

    steps = [line for line in list(_PROGRAMS.values())[-1].describe().splitlines() if line.startswith("step")]
    assert len(steps) < 6, steps
    for p, q in zip(ref, dev):
        assert dev_opt.state[q]["step"].device.type == "cpu"
        assert dev_opt.state[q]["step"].item() == ref_opt.state[p]["step"].item() == 3
        _close(q.detach(), p.detach())
        _close(dev_opt.state[q]["exp_avg_sq"], ref_opt.state[p]["exp_avg_sq"])


def test_written_input_sharing_memory_with_another_input_keeps_program_order():
    """A compiled program assumes its inputs are distinct memory (one memory class each), which
    lets the host runtime keep clusters open across writes to other inputs. Called with a
    written input that another input views, it runs a program compiled without that
    assumption: the read of ``b`` still sees ``a``'s old values (exec/compiled.cpp,
    conservative())."""

    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = b + 1
        new = a * 2
        prod = new @ new  # a kernel reading new: new's cluster (writing a) runs before r's
        a.copy_(new)
        return r * 3, prod

    a0 = torch.arange(16.0).view(4, 4)
    prog, _ = _program_of(f, a0, a0.view(16))
    a = a0.to(DEV)
    r, prod = prog.run([a, a.view(16)])
    torch.testing.assert_close(r.cpu(), (a0.view(16) + 1) * 3)
    torch.testing.assert_close(prod.cpu(), (2 * a0) @ (2 * a0))
    torch.testing.assert_close(a.cpu(), 2 * a0)
    # Distinct inputs take the program compiled with one memory class per input.
    a, b = a0.to(DEV), a0.view(16).to(DEV)
    r, _ = prog.run([a, b])
    torch.testing.assert_close(r.cpu(), (a0.view(16) + 1) * 3)
    torch.testing.assert_close(a.cpu(), 2 * a0)


def test_input_read_through_a_view_before_its_write_sees_the_old_values():
    """``a`` is read through ``a.t()`` before the graph rewrites it, and nothing reads it after:
    no copy is bound (lower_graph.py, _needs_snapshot), and the host runtime runs the read
    before the write although the cluster reading it has another shape and the write's cluster
    runs early (a product reads the new value)."""

    def f(a: torch.Tensor, b: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = a.t() * 3 + b
        new = a * 2
        prod = new @ m
        a.copy_(new)
        return r, prod

    a0, b0, m0 = torch.randn(4, 8), torch.randn(8, 4), torch.randn(8, 3)
    prog, lg = _program_of(f, a0, b0, m0)
    assert [o[2] for o in lg.outputs if o[1] >= 0] == [False]  # a is not copied
    a = a0.to(DEV)
    r, prod = prog.run([a, b0.to(DEV), m0.to(DEV)])
    torch.testing.assert_close(r.cpu(), a0.t() * 3 + b0)
    torch.testing.assert_close(prod.cpu(), (2 * a0) @ m0)
    torch.testing.assert_close(a.cpu(), 2 * a0)


def test_graph_break_gives_correct_results():
    def f(x):
        y = torch.relu(x) * 2
        torch._dynamo.graph_break()
        return y.sum(dim=0) + 1

    x = torch.randn(4, 5).to(DEV)
    breaks = stats()["graph_breaks"]
    got = torch.compile(f, backend="tpu")(x)
    _close(got, f(x))
    assert stats()["graph_breaks"] > breaks


def test_new_shape_recompiles():
    def f(x):
        return torch.tanh(x) @ x.t()

    compiled = torch.compile(f, backend="tpu", dynamic=False)
    for n in (3, 5):
        x = torch.randn(n, 4).to(DEV)
        before = stats()["graphs_compiled"]
        _close(compiled(x), f(x))
        assert stats()["graphs_compiled"] == before + 1


def test_symbolic_shapes_are_specialized_per_signature():
    def f(x):
        return (x * x).sum(-1)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    before = stats()["specializations"]
    for n in (3, 6, 3):
        x = torch.randn(n, 4).to(DEV)
        _close(compiled(x), f(x))
    assert stats()["specializations"] == before + 2  # n=3 reuses its program


def test_input_mutation_keeps_eager_semantics():
    def f(x, buf):
        buf.add_(1)
        return x * buf

    x = torch.randn(6).to(DEV)
    buf_c, buf_e = torch.zeros(6).to(DEV), torch.zeros(6).to(DEV)
    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    for _ in range(2):
        _close(compiled(x, buf_c), f(x, buf_e))
    _close(buf_c, buf_e)


@torch.library.custom_op("tpu_compile_test::twice_plus", mutates_args=())
def twice_plus(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 2 + y


@twice_plus.register_fake
def _(x, y):
    return torch.empty_like(x)


def test_unlowerable_op_falls_back_to_eager_with_one_warning():
    def f(x):
        return twice_plus(torch.sin(x), x)

    x = torch.randn(5).to(DEV)
    before = stats()["fallbacks"]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = torch.compile(f, backend="tpu")(x)
    _close(got, torch.sin(x) * 2 + x)
    assert stats()["fallbacks"] == before + 1
    assert any("tpu_compile_test::twice_plus" in str(m.message) for m in w)


def test_dropout_draws_from_the_device_generator():
    def f(x):
        return F.dropout(x, p=0.5, training=True)

    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    x = torch.ones(4096).to(DEV)
    compiled(x)  # compile outside the seeded region
    torch.manual_seed(3)
    a, b = compiled(x).cpu(), compiled(x).cpu()
    assert set(a.unique().tolist()) <= {0.0, 2.0}
    assert 0.4 < (a == 0).float().mean().item() < 0.6
    assert not torch.equal(a, b)  # the generator advanced
    # Same seed, same Philox counters: the eager masks are identical.
    torch.manual_seed(3)
    assert torch.equal(f(x).cpu(), a) and torch.equal(f(x).cpu(), b)


def test_autocast_under_compile():
    torch.manual_seed(0)
    model = MLP().to(DEV).eval()
    x = torch.randn(8, 32).to(DEV)
    compiled = torch.compile(model, backend="tpu")
    before = stats()
    with torch.no_grad(), torch.autocast(DEV, dtype=torch.bfloat16):
        want = model(x)
        got = compiled(x)
    assert got.dtype == want.dtype == torch.bfloat16
    assert stats()["fallbacks"] == before["fallbacks"]
    assert stats()["graphs_compiled"] == before["graphs_compiled"] + 1
    _close(got.float(), want.float(), 1e-2)  # bfloat16 results: 8 mantissa bits


def test_fused_mode_pending_work_runs_before_the_compiled_graph():
    def f(x):
        return torch.exp(x).sum(0)

    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    x = torch.randn(3, 4).to(DEV)
    want = f(x * 2 + 1)
    with torch_tpu.mode("fused"):
        y = x * 2 + 1  # deferred: the compiled program reads it
        got = compiled(y)
    _close(got, want)


def test_default_device_context():
    """Under `with torch.device("tpu")` factory calls inside the compiled function land on tpu."""
    def f(x):
        return x + torch.ones(x.shape[-1]) * 2 + torch.arange(x.shape[-1], dtype=x.dtype)

    with torch.device(DEV):
        torch.manual_seed(0)
        model = MLP().eval()
        x = torch.randn(4, 32)
        assert x.device.type == DEV and next(model.parameters()).device.type == DEV
        compiled_f = torch.compile(f, backend="tpu", fullgraph=True)
        compiled_m = torch.compile(model, backend="tpu", fullgraph=True)
        before = stats()["fallbacks"]
        got_f = compiled_f(x)
        with torch.no_grad():
            got_m, want_m = compiled_m(x), model(x)
    assert got_f.device.type == DEV and got_m.device.type == DEV
    assert stats()["fallbacks"] == before
    _close(got_f, x.cpu() + 2 + torch.arange(32, dtype=torch.float32))
    _close(got_m, want_m)


def test_resnet_eval_inference_compiles_whole():
    """Eval batch norm (functionalized to _native_batch_norm_legit_no_training) lowers in the graph."""
    from torch_tpu.models import SmallResNet

    torch.manual_seed(0)
    model = SmallResNet(width=8).to(DEV).eval()
    x = torch.randn(2, 3, 16, 16).to(DEV)
    before = stats()["fallbacks"]
    with torch.no_grad():
        got = torch.compile(model, backend="tpu", fullgraph=True)(x)
        want = model(x)
    assert stats()["fallbacks"] == before
    _close(got, want, 2e-5)  # convolutions: see _close


def _grads_vs_cpu(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[dict, dict]:
    """Parameter gradients of one cross-entropy step: compiled on tpu, and native CPU eager."""
    ref = copy.deepcopy(model)
    F.cross_entropy(ref(x), y).backward()
    dev = copy.deepcopy(model).to(DEV)
    F.cross_entropy(torch.compile(dev, backend="tpu")(x.to(DEV)), y.to(DEV)).backward()
    return ({k: p.grad.cpu() for k, p in dev.named_parameters()}, {k: p.grad for k, p in ref.named_parameters()})


def test_grouped_dilated_conv_gradients_match_cpu():
    """Convolution gradients in a compiled backward: the strided input gradient runs as a
    transposed convolution and the weight gradients through ATen's weight backward on the host
    runtime (kernels_contract.cpp). Eager tpu uses the same kernels, so the reference is native
    CPU; tests/lowering/test_nn_conv_pool.py covers more shapes op by op."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2), nn.ReLU(),
                          nn.Conv2d(6, 6, (2, 3), stride=(1, 2), padding=(1, 0)), nn.Flatten(), nn.LazyLinear(5))
    x, y = torch.randn(3, 4, 11, 9), torch.randint(0, 5, (3,))
    model(x)  # materializes the lazy layer
    got, want = _grads_vs_cpu(model, x, y)
    for k in want:
        _close(got[k], want[k])


def test_tensor_constants_are_bound_not_a_fallback():
    """torch.tensor(...) in compiled code becomes a get_attr constant of the graph: the program
    binds it as an input after the graph's own (no eager fallback), at every call."""
    def f(x):
        scale = torch.tensor(2.5, device=x.device)
        shift = torch.tensor([1.0, -2.0, 3.0], device=x.device)
        return x * scale + shift

    x = torch.randn(4, 3)
    before = stats()["fallbacks"]
    fn = torch.compile(f, backend="tpu")
    for _ in range(2):
        torch.testing.assert_close(fn(x.to(DEV)).cpu(), f(x))
    assert stats()["fallbacks"] == before, stats()["fallback_ops"]


def test_masked_assignment_of_one_value_compiles_whole():
    """``x[mask] = v`` and index_put with a mask and a single value lower to a select in a
    compiled graph (eager mode turns masks into indices, which needs the True count)."""
    def assign(x, m):
        x = x.clone()
        x[m] = -1.5
        return x * 2

    def accumulate(x, m):
        return torch.index_put(x, (m,), torch.tensor(7.0, device=x.device), accumulate=True)

    def accumulate_bool(x, m):
        return torch.index_put(x > 0, (m,), torch.tensor(True, device=x.device), accumulate=True)

    torch.manual_seed(0)
    x, m = torch.randn(4, 5, 3), torch.randn(4, 5) > 0
    for fn in (assign, accumulate, accumulate_bool):
        before = stats()["fallbacks"]
        want = fn(x, m)
        got = torch.compile(fn, backend="tpu")(x.to(DEV), m.to(DEV))
        assert torch.equal(got.cpu(), want), fn.__name__
        assert stats()["fallbacks"] == before, (fn.__name__, stats()["fallback_ops"])


def test_eager_ops_after_a_graph_break_do_not_compile_the_lowerings():
    """An eager op that misses the program cache inside a compiled function (allclose's host
    read breaks the graph) calls the Python lowering while Dynamo's frame hook is set; the
    lowering must run as plain Python, not be traced and compiled by Dynamo as user code."""
    def close(x, y):
        return torch.allclose(x * 2, y, rtol=0.123)

    x = torch.randn(13, 11, 3, dtype=torch.float64)  # a signature no other test lowers
    seen = stats()["graphs_seen"]
    assert torch.compile(close, backend="tpu")(x.to(DEV), (x * 2).to(DEV)) is True
    assert stats()["graphs_seen"] - seen == 1, stats()["recompile_reasons"]


class _RotaryAttention(nn.Module):
    """An attention block with Meta-Llama-style rotary embeddings: a complex freqs_cis input."""

    def __init__(self, dim: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    @staticmethod
    def rope(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3).type_as(x)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k = self.rope(q, freqs_cis), self.rope(k, freqs_cis)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


def test_complex_rotary_embeddings_compile_whole_and_train():
    torch.manual_seed(0)
    model = _RotaryAttention()
    x = torch.randn(2, 6, 16)
    freqs = torch.outer(torch.arange(6.0), 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    ref = copy.deepcopy(model)
    ref_out = ref(x, freqs_cis)
    ref_out.square().mean().backward()

    dev_model = copy.deepcopy(model).to(DEV)
    before = stats()["fallbacks"]
    out = torch.compile(dev_model, backend="tpu")(x.to(DEV), freqs_cis.to(DEV))
    out.square().mean().backward()
    assert stats()["fallbacks"] == before  # forward and backward lowered whole, complex values included
    _close(out, ref_out)
    for (name, p), q in zip(dev_model.named_parameters(), ref.parameters()):
        _close(p.grad, q.grad)


def test_conj_view_inputs_and_outputs_keep_their_values():
    z = torch.randn(3, 4, dtype=torch.complex64)

    def f(a):
        return a * (1 + 2j), a.conj()

    got = torch.compile(f, backend="tpu")(z.to(DEV).conj())
    want = f(z.conj())
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu().resolve_conj(), w.resolve_conj())
