"""Large matmuls and convolutions on a stream worker, where the host runtime splits them across
its kernel threads (by batch, images or rows), forward and backward, against CPU."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import torch_tpu


def _splits_possible() -> bool:
    return (os.cpu_count() or 1) >= 2 and os.environ.get("TORCH_TPU_HOST_KERNEL_THREADS", "2") != "1"


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_large_matmuls_and_convolutions_match_cpu(mode: str) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(301, 700, requires_grad=True), torch.randn(700, 157, requires_grad=True)
    ba, bb = torch.randn(5, 100, 300, requires_grad=True), torch.randn(5, 300, 90, requires_grad=True)
    x, w = torch.randn(8, 32, 24, 24, requires_grad=True), torch.randn(48, 32, 3, 3, requires_grad=True)
    wg = torch.randn(48, 8, 3, 3, requires_grad=True)

    def run(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        a, b, ba, bb, x, w, wg = tensors
        mm, bmm = a @ b, torch.bmm(ba, bb)
        conv = F.conv2d(x, w, padding=1)
        strided = F.conv2d(x, w, stride=2)  # its input gradient is a transposed convolution
        grouped = F.conv2d(x, wg, padding=1, groups=4)  # its weight gradient splits by images too
        loss = (mm.square().sum() + bmm.square().sum() + conv.square().sum() + strided.square().sum() +
                grouped.square().sum())
        grads = torch.autograd.grad(loss, tensors)
        return [mm, bmm, conv, strided, grouped, *grads]

    leaves = [a, b, ba, bb, x, w, wg]
    want = run(leaves)
    before = torch_tpu.metrics()["host_threads"]["kernel_splits"]
    with torch_tpu.mode(mode):
        got = [t.cpu() for t in run([t.detach().to("tpu").requires_grad_() for t in leaves])]
    if _splits_possible():
        # mm, bmm, two convolutions forward; their gradients: at least as many again.
        assert torch_tpu.metrics()["host_threads"]["kernel_splits"] - before >= 8
    for g, e in zip(got, want):
        # float32 sums of up to 4608 products, added in another order than CPU's kernels (the
        # same happens unsplit, TORCH_TPU_HOST_KERNEL_THREADS=1): errors scale with the largest
        # values, so the absolute tolerance does too.
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5 * e.abs().max().item())


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_empty_products_match_cpu(mode: str) -> None:
    # The contraction kernel's batch and row splitting must leave empty operands alone.
    shapes = [((0, 3, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 5)), ((2, 3, 0), (2, 0, 5)), ((3, 0), (0, 2)), ((0, 4), (4, 2))]
    with torch_tpu.mode(mode):
        for sa, sb in shapes:
            a, b = torch.randn(sa), torch.randn(sb)
            torch.testing.assert_close(torch.matmul(a.to("tpu"), b.to("tpu")).cpu(), torch.matmul(a, b))


def _attention_views(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v as [batch, heads, seq, dim] views of one [batch, seq, 3 * heads * dim] projection."""
    b, s, _ = x.shape
    q, k, v = x.split(x.shape[-1] // 3, dim=-1)
    return tuple(t.view(b, s, 4, -1).transpose(1, 2) for t in (q, k, v))


LAYOUTS = {
    # Attention's products over strided [batch, heads, seq, dim] views: read in place by one
    # batched GEMM call (kernels_contract.cpp), row- and column-major matrices alike.
    "attention": lambda x, y: (lambda q, k, v: [F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                                 q @ k.transpose(-1, -2), k.transpose(-1, -2) @ q])(
        *_attention_views(x)),
    "expanded_batch": lambda x, y: [x[:1, :, :8].expand(3, 32, 8) @ y[:, :8, :5]],  # a batch stride of 0
    "unit_dims": lambda x, y: [x[:, :1, :8] @ y[:, :8, :5], x[:, :, :1] @ y[:, :1, :5], x[:, :, :8] @ y[:, :8, :1]],
    "no_unit_stride": lambda x, y: [x[:, :, ::2] @ y[:, ::2, :5]],  # copied first, as before
    "empty": lambda x, y: [x[:0, :, :8] @ y[:0, :8, :5], x[:, :, :0] @ y[:, :0, :5]],
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_batched_products_over_strided_views_match_cpu(layout: str, mode: str) -> None:
    torch.manual_seed(0)
    x, y = torch.randn(3, 32, 96), torch.randn(3, 96, 40)
    want = LAYOUTS[layout](x, y)
    with torch_tpu.mode(mode):
        got = [t.cpu() for t in LAYOUTS[layout](x.to("tpu"), y.to("tpu"))]
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
