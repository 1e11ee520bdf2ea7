"""Autograd on tpu tensors: results equal to the CPU (OpenReg: test_autograd.py)."""

from __future__ import annotations

import pytest
import torch


def _pair(*shape: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(*shape, generator=g, dtype=torch.float32).requires_grad_()
    t = c.detach().to("tpu").requires_grad_()
    return c, t


def test_backward_through_elementwise_and_reductions() -> None:
    c, t = _pair(3, 5)
    for x in (c, t):
        y = (x.sin() * x.exp() + x.pow(2)).mean(dim=1).sum()
        y.backward()
    assert t.grad.is_tpu
    torch.testing.assert_close(t.grad.cpu(), c.grad)


def test_backward_through_matmul_and_activations() -> None:
    c1, t1 = _pair(4, 6, seed=1)
    c2, t2 = _pair(6, 3, seed=2)
    for a, b in ((c1, c2), (t1, t2)):
        out = torch.relu(a @ b).softmax(dim=-1)
        (out * torch.tensor([0.0, 1.0, 2.0]).to(out.device)).sum().backward()
    torch.testing.assert_close(t1.grad.cpu(), c1.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(t2.grad.cpu(), c2.grad, rtol=1e-5, atol=1e-5)


def test_retain_graph_and_grad_accumulation() -> None:
    c, t = _pair(5)
    for x in (c, t):
        y = (x * x).sum()
        y.backward(retain_graph=True)
        y.backward()
    torch.testing.assert_close(t.grad.cpu(), c.grad)
    torch.testing.assert_close(t.grad.cpu(), 4 * t.detach().cpu())
    t.grad = None
    (t * 3).sum().backward()
    torch.testing.assert_close(t.grad.cpu(), torch.full((5,), 3.0))


def test_autograd_grad_and_higher_order() -> None:
    c, t = _pair(4)
    results = []
    for x in (c, t):
        y = (x ** 3).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), x)
        results.append((g.detach().cpu(), gg.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1])
    torch.testing.assert_close(results[1][1], 6 * c.detach())


def test_backward_through_views_and_inplace() -> None:
    c, t = _pair(4, 4, seed=3)
    for x in (c, t):
        y = x * 1.0
        y[:, 1:3].mul_(2.0)
        y.t()[0].add_(1.0)
        (y.pow(2)).sum().backward()
    torch.testing.assert_close(t.grad.cpu(), c.grad)


def test_nn_module_training_step_matches_cpu() -> None:
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    tpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    tpu_model.load_state_dict(cpu_model.state_dict())
    tpu_model.to("tpu")
    x = torch.randn(10, 8)
    target = torch.randn(10, 4)
    opt_c = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(tpu_model.parameters(), lr=0.1)
    for _ in range(3):
        for model, opt, dev in ((cpu_model, opt_c, "cpu"), (tpu_model, opt_t, "tpu")):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(dev)), target.to(dev))
            loss.backward()
            opt.step()
    for (name, pc), pt in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        assert pt.is_tpu and pt.grad.is_tpu
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-5, msg=name)


def test_backward_with_grad_on_cpu_crossing_devices() -> None:
    # Gradients flow back across a .to() between devices.
    c = torch.randn(3, requires_grad=True)
    t = c.to("tpu")
    (t * 2).sum().backward()
    assert c.grad.device.type == "cpu"
    torch.testing.assert_close(c.grad, torch.full((3,), 2.0))


def test_no_grad_and_detach() -> None:
    _, t = _pair(3)
    with torch.no_grad():
        y = t * 2
    assert not y.requires_grad
    z = t.detach()
    assert not z.requires_grad and z.data_ptr() == t.data_ptr()


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_recomputes_dropout_with_the_same_mask(mode: str, use_reentrant: bool) -> None:
    # torch.utils.checkpoint stashes and restores the device RNG state only when the device
    # module says it is initialized; otherwise the recomputed forward draws a different mask.
    import torch.nn.functional as F
    import torch.utils.checkpoint as checkpoint

    import torch_tpu

    with torch_tpu.mode(mode):
        x = torch.ones(64, device="tpu", requires_grad=True)
        y = checkpoint.checkpoint(lambda t: F.dropout(t * 2, 0.5, True), x, use_reentrant=use_reentrant)
        y.sum().backward()
        kept = (y != 0).cpu()
        assert 0 < int(kept.sum()) < 64
        torch.testing.assert_close(x.grad.cpu(), kept.float() * 4.0)  # d(2x / 0.5)/dx where kept


def test_forward_mode_ad_matches_cpu() -> None:
    # Forward-mode AD makes memory-less zero tensors (_efficientzerotensor) for absent tangents.
    import torch.autograd.forward_ad as fwAD
    from torch.func import hessian, jacfwd, jvp

    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(4, generator=g), torch.randn(4, generator=g)
    xt, wt = x.to("tpu"), w.to("tpu")
    torch.testing.assert_close(jacfwd(lambda a: (a * wt).sin())(xt).cpu(), jacfwd(lambda a: (a * w).sin())(x))
    torch.testing.assert_close(hessian(lambda a: (a * wt).sin().sum())(xt).cpu(),
                               hessian(lambda a: (a * w).sin().sum())(x))
    _, tangent = jvp(lambda a, b: a * b.exp(), (xt, wt), (torch.ones(4, device="tpu"), torch.zeros(4, device="tpu")))
    torch.testing.assert_close(tangent.cpu(), w.exp())
    with fwAD.dual_level():
        dual = fwAD.make_dual(xt, torch.ones(4, device="tpu"))
        out = fwAD.unpack_dual((dual * dual + wt).sum())
        assert out.tangent is not None
        torch.testing.assert_close(out.tangent.cpu(), (2 * x).sum())
    z = torch._efficientzerotensor((2, 3), device="tpu")
    assert z.device.type == "tpu" and z._is_zerotensor()
    torch.testing.assert_close((z + torch.ones(2, 3, device="tpu")).cpu(), torch.ones(2, 3))
