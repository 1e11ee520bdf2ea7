"""Fused RNN cells (torch_tpu/lowering/nn_rnn.py): the four ``_thnn_fused_*`` ops against the
cell math written with plain torch ops on CPU (CPU has no kernels for them) and against CPU
autograd, on the reference interpreter and on tpu; nn.LSTM/GRU/LSTMCell/GRUCell forward and
backward against the same modules on CPU in strict and fused modes; bf16; a short training loop."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

import torch_tpu
from torch_tpu.lowering.testing import run_reference

aten = torch.ops.aten
B, H = 3, 5
# Half types: the op rounds its results once from float32; the float64 autograd reference
# differs by that rounding (bf16: 8 mantissa bits) plus the rounded workspace the backward reads.
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def _call(where: str, op: torch._ops.OpOverload, *args) -> tuple:
    """op on the reference interpreter, or on tpu copies of the tensor arguments (results on CPU)."""
    if where == "reference":
        return run_reference(op, *args)
    out = op(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args])
    return tuple(None if t is None else t.cpu() for t in out)


def _close(got: torch.Tensor | None, want: torch.Tensor | None, dtype: torch.dtype) -> None:
    if want is None:
        assert got is None
        return
    assert got.dtype == dtype and got.shape == want.shape, (got.dtype, dtype, got.shape, want.shape)
    torch.testing.assert_close(got.double(), want.double(), rtol=TOL[dtype], atol=TOL[dtype])


Opt = torch.Tensor | None


def _lstm_math(ig: torch.Tensor, hg: torch.Tensor, cx: torch.Tensor, bi: Opt, bh: Opt) -> tuple:
    """(hy, cy, activated gates) in the input's precision, gate order i, f, g, o."""
    pre = ig + hg + (bi + bh if bi is not None else 0)
    i, f, g, o = pre.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def _gru_math(ig: torch.Tensor, hg: torch.Tensor, hx: torch.Tensor, bi: Opt, bh: Opt) -> tuple:
    """(hy, [r, z, n, hx, hidden n gate + bias]), gate order r, z, n."""
    if bi is not None:
        ig, hg = ig + bi, hg + bh
    xr, xz, xn = ig.chunk(3, 1)
    hr, hz, hn = hg.chunk(3, 1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


def _cell_inputs(gates: int, dtype: torch.dtype, bias: bool, seed: int = 0) -> list[Opt]:
    """input_gates, hidden_gates, previous state, input_bias, hidden_bias (float64 draws, cast)."""
    g = torch.Generator().manual_seed(seed)
    t = [torch.randn(B, gates * H, generator=g, dtype=torch.float64) for _ in range(2)]
    t.append(torch.randn(B, H, generator=g, dtype=torch.float64))
    t += [torch.randn(gates * H, generator=g, dtype=torch.float64) if bias else None for _ in range(2)]
    return [None if x is None else x.to(dtype) for x in t]


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("where", ["reference", "tpu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_lstm_cell_and_backward(dtype: torch.dtype, bias: bool, where: str) -> None:
    args = _cell_inputs(4, dtype, bias)
    hy, cy, ws = _call(where, aten._thnn_fused_lstm_cell.default, *args)
    want = _lstm_math(*[None if a is None else a.double() for a in args])
    for got, w in zip((hy, cy, ws), want):
        _close(got, w, dtype)
    # Backward, with one or both output gradients undefined, against float64 autograd.
    g = torch.Generator().manual_seed(1)
    ghy, gcy = torch.randn(B, H, generator=g).to(dtype), torch.randn(B, H, generator=g).to(dtype)
    for grads in ((ghy, gcy), (ghy, None), (None, gcy)):
        leaves = [None if a is None else a.detach().double().requires_grad_() for a in args]
        hy64, cy64, _ = _lstm_math(*leaves)
        (hy64 * (0 if grads[0] is None else grads[0].double())
         + cy64 * (0 if grads[1] is None else grads[1].double())).sum().backward()
        got = _call(where, aten._thnn_fused_lstm_cell_backward_impl.default, *grads, args[2], cy, ws, bias)
        _close(got[0], leaves[0].grad, dtype)  # input and hidden gates share one gradient
        torch.testing.assert_close(leaves[0].grad, leaves[1].grad)
        _close(got[1], leaves[2].grad, dtype)
        _close(got[2], leaves[3].grad if bias else None, dtype)
    none = _call(where, aten._thnn_fused_lstm_cell_backward_impl.default, None, None, args[2], cy, ws, bias)
    assert none == (None, None, None)


@pytest.mark.parametrize("where", ["reference", "tpu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_gru_cell_and_backward(dtype: torch.dtype, bias: bool, where: str) -> None:
    args = _cell_inputs(3, dtype, bias)
    hy, ws = _call(where, aten._thnn_fused_gru_cell.default, *args)
    leaves = [None if a is None else a.detach().double().requires_grad_() for a in args]
    want_hy, want_ws = _gru_math(*leaves)
    _close(hy, want_hy, dtype)
    _close(ws, want_ws, dtype)
    ghy = torch.randn(B, H, generator=torch.Generator().manual_seed(1)).to(dtype)
    (want_hy * ghy.double()).sum().backward()
    got = _call(where, aten._thnn_fused_gru_cell_backward.default, ghy, ws, bias)
    want = (leaves[0].grad, leaves[1].grad, leaves[2].grad, leaves[3].grad if bias else None,
            leaves[4].grad if bias else None)
    for gt, w in zip(got, want):
        _close(gt, w, dtype)


def test_fused_cell_shape_errors() -> None:
    ig, hg, cx, bi, bh = _cell_inputs(4, torch.float32, True)
    with pytest.raises(RuntimeError, match="previous state"):
        run_reference(aten._thnn_fused_lstm_cell.default, ig, hg, cx[:, :2], bi, bh)
    with pytest.raises(RuntimeError, match="biases"):
        run_reference(aten._thnn_fused_gru_cell.default, ig[:, :3 * H], hg[:, :3 * H], cx, bi, bh)
    with pytest.raises(RuntimeError, match="workspace"):
        run_reference(aten._thnn_fused_gru_cell_backward.default, cx, ig, True)


# -- modules on tpu against CPU -----------------------------------------------------------------

T, I = 4, 3


class _Packed(nn.Module):
    """An RNN over padded sequences of different lengths, through pack_padded_sequence."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple:
        out, h = self.rnn(pack_padded_sequence(x, lengths, enforce_sorted=False))
        return pad_packed_sequence(out)[0], h


def _seq(*shape: int) -> Callable[[], list[torch.Tensor]]:
    return lambda: [torch.randn(*shape, generator=torch.Generator().manual_seed(3))]


MODULES = {
    "lstm": (lambda: nn.LSTM(I, H), _seq(T, B, I)),
    "lstm_2layer_bidirectional_batch_first": (
        lambda: nn.LSTM(I, H, num_layers=2, bidirectional=True, batch_first=True), _seq(B, T, I)),
    "lstm_proj_size": (lambda: nn.LSTM(I, H, num_layers=2, proj_size=2, bidirectional=True), _seq(T, B, I)),
    "lstm_no_bias_unbatched": (lambda: nn.LSTM(I, H, bias=False), _seq(T, I)),
    "lstm_dropout_eval": (lambda: nn.LSTM(I, H, num_layers=2, dropout=0.5).eval(), _seq(T, B, I)),
    "lstm_packed": (lambda: _Packed(nn.LSTM(I, H, num_layers=2, bidirectional=True)),
                    lambda: _seq(T, B, I)() + [torch.tensor([2, 4, 3])]),
    "gru_2layer_bidirectional": (lambda: nn.GRU(I, H, num_layers=2, bidirectional=True), _seq(T, B, I)),
    "gru_no_bias_batch_first": (lambda: nn.GRU(I, H, bias=False, batch_first=True), _seq(B, T, I)),
    "gru_packed": (lambda: _Packed(nn.GRU(I, H)), lambda: _seq(T, B, I)() + [torch.tensor([4, 1, 3])]),
    "lstm_cell": (lambda: nn.LSTMCell(I, H), _seq(B, I)),
    "gru_cell_no_bias": (lambda: nn.GRUCell(I, H, bias=False), _seq(B, I)),
}


def _tensors(out: object) -> list[torch.Tensor]:
    """The float tensors of a module's (nested) result."""
    if isinstance(out, PackedSequence):
        return [out.data]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return [out] if isinstance(out, torch.Tensor) and out.is_floating_point() else []


def _run(module: nn.Module, inputs: list[torch.Tensor], device: str, state: bool = False) -> list[torch.Tensor]:
    """Outputs, input gradients and parameter gradients of a weighted-sum loss over every output.
    state: the initial state is passed too (zeros for hx, cx on the module's path otherwise)."""
    xs = [x.detach().to(device).requires_grad_(x.is_floating_point()) for x in inputs]
    if state:
        g = torch.Generator().manual_seed(5)
        h0 = torch.randn(module.num_layers, B, H, generator=g).to(device).requires_grad_()
        c0 = torch.randn(module.num_layers, B, H, generator=g).to(device).requires_grad_()
        xs += [h0, c0]
        out = module(xs[0], (h0, c0))
    else:
        out = module(*[x if x.is_floating_point() else x.cpu() for x in xs])  # lengths stay on CPU
    outs = _tensors(out)
    sum((o * (k + 1.0)).sin().sum() for k, o in enumerate(outs)).backward()
    grads = [x.grad for x in xs if x.grad is not None] + [p.grad for p in module.parameters()]
    return [t.detach().cpu() for t in outs + grads]


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("name", list(MODULES))
def test_module_forward_backward_matches_cpu(name: str, mode: str) -> None:
    make, inputs = MODULES[name]
    torch.manual_seed(0)
    cpu = make()
    tpu = copy.deepcopy(cpu).to("tpu")
    want = _run(cpu, inputs(), "cpu")
    with torch_tpu.mode(mode):
        got = _run(tpu, inputs(), "tpu")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_lstm_initial_state_and_partial_outputs(mode: str) -> None:
    """Given (h0, c0), gradients reach them; a loss of c_n alone leaves the last step's hy
    without a gradient (grad_hy undefined), one of h_n alone its cy (grad_cy undefined)."""
    torch.manual_seed(0)
    cpu = nn.LSTM(I, H, num_layers=2)
    x = _seq(T, B, I)()
    want = _run(copy.deepcopy(cpu), x, "cpu", state=True)
    with torch_tpu.mode(mode):
        got = _run(copy.deepcopy(cpu).to("tpu"), x, "tpu", state=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    for pick in (lambda out: out[1][1], lambda out: out[1][0]):
        results = []
        for device in ("cpu", "tpu"):
            m = copy.deepcopy(cpu).to(device)
            xd = x[0].detach().to(device).requires_grad_()
            with torch_tpu.mode(mode):
                pick(m(xd)).pow(2).sum().backward()
                results.append([xd.grad.cpu()] + [p.grad.cpu() for p in m.parameters()])
        for g, w in zip(results[1], results[0]):
            torch.testing.assert_close(g, w)


def test_lstm_dropout_in_training() -> None:
    """Dropout between layers uses the device RNG (not CPU's stream): masks differ per call,
    gradients flow; in eval mode (no dropout) the module matches CPU."""
    torch.manual_seed(0)
    m = nn.LSTM(I, H, num_layers=3, dropout=0.5).to("tpu")
    x = torch.randn(T, B, I, device="tpu", requires_grad=True)
    a, _ = m(x)
    b, _ = m(x)
    a.sum().backward()
    assert not torch.equal(a.cpu(), b.cpu())
    assert torch.isfinite(x.grad.cpu()).all() and x.grad.cpu().abs().sum() > 0
    m.eval()
    cpu = copy.deepcopy(m).cpu()
    torch.testing.assert_close(m(x)[0].cpu(), cpu(x.detach().cpu())[0])


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_bfloat16_module(cls: type[nn.Module]) -> None:
    torch.manual_seed(0)
    cpu = cls(I, H, num_layers=2)
    x = torch.randn(T, B, I)
    want = _run(copy.deepcopy(cpu).double(), [x.double()], "cpu")
    got = _run(copy.deepcopy(cpu).to("tpu", torch.bfloat16), [x.bfloat16()], "tpu")
    for g, w in zip(got, want):
        assert g.dtype == torch.bfloat16
        # bf16 (8 mantissa bits) through 4 steps and 2 layers, against float64: the matmuls' and
        # cells' roundings compound; gradients sum over time steps and the batch.
        torch.testing.assert_close(g.double(), w, rtol=5e-2, atol=5e-2)


class _Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(I, H, num_layers=2, batch_first=True)
        self.head = nn.Linear(H, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.rnn(x)
        return self.head(h[-1])


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_lstm_classifier_training_matches_cpu(mode: str) -> None:
    torch.manual_seed(0)
    cpu = _Classifier()
    tpu = copy.deepcopy(cpu).to("tpu")
    g = torch.Generator().manual_seed(7)
    batches = [(torch.randn(6, T, I, generator=g), torch.randint(0, 4, (6,), generator=g)) for _ in range(3)]
    losses = {}
    for device, model in (("cpu", cpu), ("tpu", tpu)):
        opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        losses[device] = []
        with torch_tpu.mode(mode):
            for x, y in batches:
                opt.zero_grad()
                loss = F.cross_entropy(model(x.to(device)), y.to(device))
                loss.backward()
                opt.step()
                losses[device].append(loss.item())
    torch.testing.assert_close(torch.tensor(losses["tpu"]), torch.tensor(losses["cpu"]))
    assert losses["cpu"][2] != losses["cpu"][0]  # the steps changed the model
    for (name, p), q in zip(cpu.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), msg=name)
