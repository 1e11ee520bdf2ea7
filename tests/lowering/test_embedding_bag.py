"""nn.EmbeddingBag and nn.Embedding(max_norm=...) on tpu: values and gradients against CPU."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

MODES = ["strict", "fused"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduce, padding_idx, include_last_offset, weighted",
                         [c for c in itertools.product(["sum", "mean", "max"], [None, 4], [False, True], [False, True])
                          if not (c[3] and c[0] != "sum")])
def test_embedding_bag_matches_cpu(mode: str, reduce: str, padding_idx: int | None, include_last_offset: bool,
                                   weighted: bool) -> None:
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(6, 3, generator=g, requires_grad=True)
    indices = torch.tensor([1, 2, 4, 4, 3, 0, 5, 1])
    offsets = torch.tensor([0, 2, 2, 5, 8])  # bag 1 is empty; with include_last_offset, 8 is the end
    psw = torch.randn(8, generator=g, requires_grad=True) if weighted else None
    grad = torch.randn(4 if include_last_offset else 5, 3, generator=g)
    kwargs = dict(mode=reduce, padding_idx=padding_idx, include_last_offset=include_last_offset)
    want = F.embedding_bag(indices, weight, offsets, per_sample_weights=psw, **kwargs)
    want.backward(grad)
    with torch_tpu.mode(mode):
        w = weight.detach().to("tpu").requires_grad_()
        p = psw.detach().to("tpu").requires_grad_() if weighted else None
        got = F.embedding_bag(indices.to("tpu"), w, offsets.to("tpu"), per_sample_weights=p, **kwargs)
        got.backward(grad.to("tpu"))
        torch.testing.assert_close(got.detach().cpu(), want.detach())
        torch.testing.assert_close(w.grad.cpu(), weight.grad)
        if weighted:
            torch.testing.assert_close(p.grad.cpu(), psw.grad)


@pytest.mark.parametrize("mode", MODES)
def test_embedding_bag_module_training_and_inference(mode: str) -> None:
    torch.manual_seed(1)
    cpu = torch.nn.Sequential(torch.nn.EmbeddingBag(20, 8, mode="mean"), torch.nn.Linear(8, 3))
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.5)
    with torch_tpu.mode(mode):
        dev = copy.deepcopy(cpu).to("tpu")
        opt_d = torch.optim.SGD(dev.parameters(), lr=0.5)
        for _ in range(3):
            text = torch.randint(0, 20, (4, 6))  # 2-D input: 4 bags of 6
            label = torch.randint(0, 3, (4,))
            for model, opt, dv in ((cpu, opt_c, "cpu"), (dev, opt_d, "tpu")):
                opt.zero_grad()
                F.cross_entropy(model(text.to(dv)), label.to(dv)).backward()
                opt.step()
        for a, b in zip(cpu.parameters(), dev.parameters()):
            torch.testing.assert_close(b.detach().cpu(), a.detach())
        with torch.no_grad():  # _embedding_bag_forward_only
            torch.testing.assert_close(dev(text.to("tpu")).cpu(), cpu(text))


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq_divides_by_each_rows_frequency(reduce: str) -> None:
    # As CUDA and F.embedding do. CPU's embedding_bag backward divides some rows by another
    # index's count (pytorch/pytorch#190063), so the reference is built from F.embedding.
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(6, 3, generator=g)
    indices, offsets = torch.tensor([4, 4, 2, 5, 5, 5, 1]), torch.tensor([0, 2, 2, 4])
    bag_of = torch.tensor([0, 0, 2, 2, 3, 3, 3])
    grad = torch.randn(4, 3, generator=g)
    w = weight.to("tpu").requires_grad_()
    got = F.embedding_bag(indices.to("tpu"), w, offsets.to("tpu"), mode=reduce, scale_grad_by_freq=True)
    got.backward(grad.to("tpu"))
    ref_w = weight.clone().requires_grad_()
    want = torch.zeros(4, 3).index_add(0, bag_of, F.embedding(indices, ref_w, scale_grad_by_freq=True))
    if reduce == "mean":
        want = want / torch.bincount(bag_of, minlength=4).clamp(min=1)[:, None]
    want.backward(grad)
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    torch.testing.assert_close(w.grad.cpu(), ref_w.grad)


def test_embedding_bag_sparse_gradients_say_they_are_unsupported() -> None:
    bag = torch.nn.EmbeddingBag(10, 4, sparse=True).to("tpu")
    with pytest.raises(NotImplementedError, match="sparse=False"):
        bag(torch.tensor([[1, 2]], device="tpu")).sum().backward()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_embedding_max_norm_renormalizes_looked_up_rows_in_place(mode: str, norm_type: float) -> None:
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(10, 4, generator=g) * 2
    indices = torch.tensor([[1, 3, 3], [0, 9, 1]])
    want_w = weight.clone()
    want = F.embedding(indices, want_w, max_norm=1.0, norm_type=norm_type)
    with torch_tpu.mode(mode):
        w = weight.to("tpu")
        got = F.embedding(indices.to("tpu"), w, max_norm=1.0, norm_type=norm_type)
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(w.cpu(), want_w)  # rows 0, 1, 3, 9 rescaled in place
