"""Softmax, embedding, attention, upsampling, pixel shuffle and im2col lowerings (nn.py) vs CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
import torch_tpu.lowering  # noqa: F401
from torch_tpu.lowering.testing import ReferenceMode, run_reference

from opinfo_utils import OpsCalled

aten = torch.ops.aten
TOL = {torch.float32: 2e-5, torch.float64: 1e-10, torch.bfloat16: 3e-2}
FLOATS = [torch.float32, torch.float64]


def _close(got, expected, dtype: torch.dtype) -> None:
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        torch.testing.assert_close(g, e, atol=TOL[dtype], rtol=TOL[dtype], equal_nan=True)


def _check(op, *args, dtype: torch.dtype, **kwargs) -> None:
    _close(run_reference(op, *args, **kwargs), op(*args, **kwargs), dtype)


@pytest.mark.parametrize("dtype", FLOATS + [torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_family(dim: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (torch.randn(3, 4, 5, dtype=torch.float64) * 4).to(dtype)
    x[0, 0, 0] = float("-inf")
    for fwd, bwd in ((aten._softmax.default, aten._softmax_backward_data.default),
                     (aten._log_softmax.default, aten._log_softmax_backward_data.default)):
        _check(fwd, x, dim, False, dtype=dtype)
        y = fwd(x, dim, False)
        _check(bwd, torch.randn_like(y), y, dim, dtype, dtype=dtype)
    _check(aten._softmax.default, torch.tensor(2.0, dtype=dtype), 0, False, dtype=dtype)


def test_safe_softmax_masked_rows() -> None:
    x = torch.randn(5, 4)
    x[1] = float("-inf")  # fully masked: zeros
    x[2, :2] = float("-inf")  # partly masked
    x[3, 0] = float("nan")  # NaN row stays NaN
    x[4] = float("-inf")
    x[4, 3] = float("nan")  # -inf and NaN: not "all -inf", so NaN
    for dim in (-1, 0):
        want = aten._safe_softmax(x, dim)
        got = run_reference(aten._safe_softmax.default, x, dim)
        torch.testing.assert_close(got, want, equal_nan=True)
        for mode in ("strict", "fused"):
            with torch_tpu.mode(mode):
                torch.testing.assert_close(aten._safe_softmax(x.to("tpu"), dim).cpu(), want, equal_nan=True)
    assert torch.equal(aten._safe_softmax(x, -1)[1], torch.zeros(4))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("padding_idx,scale", [(-1, False), (3, False), (2, True)])
def test_embedding(padding_idx: int, scale: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    w = torch.randn(10, 4, dtype=dtype)
    idx = torch.tensor([[1, 3, 3, 9], [2, 2, 2, 0]])
    _check(aten.embedding.default, w, idx, padding_idx, scale, dtype=dtype)
    _check(aten.embedding_dense_backward.default, torch.randn(2, 4, 4, dtype=dtype), idx, 10, padding_idx, scale,
           dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS + [torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", [None, "float"])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_flash_attention_for_cpu(causal: bool, mask: str | None, scale: float | None, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 3, 5, 8, dtype=dtype)
    k, v = torch.randn(2, 3, 7, 8, dtype=dtype), torch.randn(2, 3, 7, 8, dtype=dtype)
    m = torch.randn(2, 1, 5, 7, dtype=dtype) if mask else None
    op = aten._scaled_dot_product_flash_attention_for_cpu.default
    _check(op, q, k, v, 0.0, causal, attn_mask=m, scale=scale, dtype=dtype)
    out, lse = op(q, k, v, 0.0, causal, attn_mask=m, scale=scale)
    _check(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, torch.randn_like(out), q, k, v, out,
           lse, 0.0, causal, attn_mask=m, scale=scale, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_flash_attention_for_cpu_fully_masked_rows(dtype: torch.dtype) -> None:
    # A row whose every key is masked: output 0 and log-sum-exp 0 (the CPU kernel's answer, where
    # the softmax itself would be 0/0), and no gradient through it.
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 4, dtype=dtype), torch.randn(1, 2, 5, 4, dtype=dtype), torch.randn(1, 2, 5, 4, dtype=dtype)
    keep = torch.rand(3, 5) > 0.4
    keep[1] = False
    m = torch.zeros(3, 5, dtype=dtype).masked_fill(~keep, float("-inf"))
    op = aten._scaled_dot_product_flash_attention_for_cpu.default
    _check(op, q, k, v, 0.0, False, attn_mask=m, dtype=dtype)
    out, lse = op(q, k, v, 0.0, False, attn_mask=m)
    assert torch.all(out[:, :, 1] == 0) and torch.all(lse[:, :, 1] == 0)
    _check(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, torch.randn_like(out), q, k, v, out,
           lse, 0.0, False, attn_mask=m, dtype=dtype)


def test_attention_math_path() -> None:
    # The composite math path's ops (bmm, _safe_softmax, ...) lower: SDPA takes it on tpu for
    # dropout, grouped-query attention, other ranks and masks that need a gradient.
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 4, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    mask = torch.rand(4, 6) > 0.3
    mode = ReferenceMode()
    with mode:
        got = aten._scaled_dot_product_attention_math(q, k, v, mask)[0]
        got_c = aten._scaled_dot_product_attention_math(q, k, v, is_causal=True)[0]
    torch.testing.assert_close(got, aten._scaled_dot_product_attention_math(q, k, v, mask)[0])
    torch.testing.assert_close(got_c, aten._scaled_dot_product_attention_math(q, k, v, is_causal=True)[0])
    assert mode.lowered.get("aten.bmm.default") and mode.lowered.get("aten._safe_softmax.default")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("out,scales", [([11, 9], (None, None)), ([10, 14], (None, None)), ([3, 4], (None, None)),
                                        ([11, 9], (2.3, 1.4))], ids=str)
def test_upsample_2d(out, scales, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 7, dtype=dtype)
    go = torch.randn(2, 3, *out, dtype=dtype)
    for fwd, bwd in ((aten.upsample_nearest2d.default, aten.upsample_nearest2d_backward.default),
                     (aten._upsample_nearest_exact2d.default, aten._upsample_nearest_exact2d_backward.default)):
        _check(fwd, x, out, *scales, dtype=dtype)
        _check(bwd, go, out, list(x.shape), *scales, dtype=dtype)
    for align in (False, True):
        _check(aten.upsample_bilinear2d.default, x, out, align, *scales, dtype=dtype)
        _check(aten.upsample_bilinear2d_backward.default, go, out, list(x.shape), align, *scales, dtype=dtype)


def test_upsample_vec_1d_3d() -> None:
    torch.manual_seed(0)
    dtype = torch.float64
    x = torch.randn(2, 3, 5, 7, dtype=dtype)
    _check(aten.upsample_nearest2d.vec, x, None, [2.3, 1.4], dtype=dtype)
    _check(aten.upsample_bilinear2d.vec, x, None, True, [2.3, 1.4], dtype=dtype)
    _check(aten.upsample_nearest1d.default, x[0], [11], dtype=dtype)
    _check(aten.upsample_nearest1d_backward.default, torch.randn(3, 5, 11, dtype=dtype), [11], [3, 5, 7], dtype=dtype)
    _check(aten.upsample_linear1d.default, x[0], [11], False, dtype=dtype)
    _check(aten.upsample_nearest3d.default, x[None], [3, 11, 9], dtype=dtype)
    with ReferenceMode():  # F.interpolate with a scale factor bakes it into the lowering
        got = F.interpolate(x.float(), scale_factor=1.7, mode="bilinear")
    torch.testing.assert_close(got, F.interpolate(x.float(), scale_factor=1.7, mode="bilinear"))


def test_pixel_shuffle_im2col() -> None:
    torch.manual_seed(0)
    dtype = torch.float64
    _check(aten.pixel_shuffle.default, torch.randn(2, 8, 3, 4, dtype=dtype), 2, dtype=dtype)
    _check(aten.pixel_unshuffle.default, torch.randn(2, 2, 4, 6, dtype=dtype), 2, dtype=dtype)
    x = torch.randn(2, 3, 5, 7, dtype=dtype)
    args = ([2, 3], [1, 2], [1, 1], [2, 1])
    _check(aten.im2col.default, x, *args, dtype=dtype)
    _check(aten.im2col.default, x[0], *args, dtype=dtype)
    cols = aten.im2col(x, *args)
    _check(aten.col2im.default, cols, [5, 7], *args, dtype=dtype)
    _check(aten.col2im.default, cols[0], [5, 7], *args, dtype=dtype)


FLASH, MATH, EFFICIENT = 1, 0, 2  # torch.nn.attention.SDPBackend values that torch._fused_sdp_choice returns


@pytest.mark.parametrize("case", ["causal", "bool_mask", "float_mask", "masked_row", "mask_needs_grad", "gqa", "3d"])
def test_sdpa_on_tpu_picks_a_kernel_and_matches_cpu(case: str) -> None:
    """F.scaled_dot_product_attention on tpu takes the efficient-attention kernel (its lowering:
    a few products and row clusters; DTensor shards it) where that lowering covers the call and
    the math path otherwise; either way outputs and gradients match CPU's."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 5)
    kwargs: dict = {}
    want = EFFICIENT
    if case == "causal":
        kwargs["is_causal"] = True
    elif case in ("bool_mask", "masked_row"):
        keep = torch.rand(6, 7) > 0.4
        if case == "masked_row":
            keep[2] = False  # a query that may attend to nothing: 0 on both devices
        kwargs["attn_mask"] = keep
    elif case in ("float_mask", "mask_needs_grad"):
        kwargs["attn_mask"] = torch.randn(2, 1, 6, 7, requires_grad=case == "mask_needs_grad")
        want = MATH if case == "mask_needs_grad" else EFFICIENT
    elif case == "gqa":
        k, v = k[:, :2], v[:, :2]
        kwargs["enable_gqa"] = True
        want = MATH
    elif case == "3d":
        q, k, v = q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)
        want = MATH
    leaves = [t.requires_grad_() for t in (q, k, v)]
    mask = kwargs.get("attn_mask")
    extra = [mask] if mask is not None and mask.requires_grad else []
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves + extra, go)

    tleaves = [t.detach().to("tpu").requires_grad_() for t in leaves]
    tkwargs = dict(kwargs)
    if mask is not None:
        tkwargs["attn_mask"] = mask.detach().to("tpu").requires_grad_(mask.requires_grad)
    assert torch._fused_sdp_choice(*tleaves, tkwargs.get("attn_mask"), 0.0, kwargs.get("is_causal", False),
                                   enable_gqa=kwargs.get("enable_gqa", False)) == want
    with OpsCalled() as called:  # what SDPA really ran, not only what the choice op answers
        tout = F.scaled_dot_product_attention(*tleaves, **tkwargs)
    assert (aten._scaled_dot_product_efficient_attention.default in called) == (want == EFFICIENT), called
    textra = [tkwargs["attn_mask"]] if extra else []
    tgrads = torch.autograd.grad(tout, tleaves + textra, go.to("tpu"))
    torch.testing.assert_close(tout.cpu(), out)
    for g, e in zip(tgrads, grads):
        torch.testing.assert_close(g.cpu(), e)


def test_sdpa_with_dropout_takes_the_math_path() -> None:
    # The flash lowering cannot reproduce the CPU kernel's dropout stream; the math path's
    # dropout is an ordinary lowered op.
    q = torch.randn(1, 2, 4, 8, device="tpu")
    assert torch._fused_sdp_choice(q, q, q, None, 0.1, False) == MATH
    assert torch._fused_sdp_choice(q, q, q, None, 0.0, False) == EFFICIENT
    assert F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).shape == q.shape


def test_sdpa_in_float64_takes_the_cpu_flash_kernel() -> None:
    # CUDA's efficient kernel takes no float64; the CPU flash kernel's op (also lowered) does.
    torch.manual_seed(0)
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64)
    assert torch._fused_sdp_choice(q.to("tpu"), q.to("tpu"), q.to("tpu"), None, 0.0, False) == FLASH
    torch.testing.assert_close(F.scaled_dot_product_attention(q.to("tpu"), q.to("tpu"), q.to("tpu"), is_causal=True).cpu(),
                               F.scaled_dot_product_attention(q, q, q, is_causal=True))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("L", [5, 40])
def test_efficient_attention_ops_match_the_cpu_flash_kernel(causal: bool, bias: bool, L: int) -> None:
    """The efficient-attention overloads against CPU's flash kernel (CPU has no efficient one):
    the same output and gradients; the log-sum-exp padded to a multiple of 32 (CUDA's shape,
    which DTensor's and the meta function's shapes assume) or empty when not asked for; the
    mask's gradient when asked."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, L, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    m = torch.randn(2, 3, L, 7) if bias else None
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=m)
    go = torch.randn_like(out)
    dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward(go, q, k, v, out, lse, 0.0, causal,
                                                                           attn_mask=m)
    t = lambda x: None if x is None else x.to("tpu")  # noqa: E731
    tout, tlse, seed, offset = aten._scaled_dot_product_efficient_attention(t(q), t(k), t(v), t(m), True, 0.0, causal)
    assert tlse.shape == (2, 3, -(-L // 32) * 32) and tlse.dtype == torch.float32
    assert seed.shape == () and offset.shape == () and seed.dtype == torch.int64
    # Heads inside positions in memory, as the meta function (and DTensor's plans) say.
    assert tout.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(tout.cpu(), out)
    torch.testing.assert_close(tlse.cpu()[..., :L], lse)
    _, empty, _, _ = aten._scaled_dot_product_efficient_attention(t(q), t(k), t(v), t(m), False, 0.0, causal)
    assert empty.shape == (2, 3, 0)
    grads = aten._scaled_dot_product_efficient_attention_backward(
        t(go), t(q), t(k), t(v), t(m), tout, tlse, seed, offset, 0.0, [True, True, True, bias], causal)
    for g, e in zip(grads[:3], (dq, dk, dv)):
        assert g.transpose(1, 2).is_contiguous()
        torch.testing.assert_close(g.cpu(), e)
    if bias:  # d(loss)/d(mask) = the scores' gradient, checked against autograd on CPU
        mm = m.clone().requires_grad_()
        tri = torch.zeros(L, 7).masked_fill(~torch.ones(L, 7, dtype=torch.bool).tril(), float("-inf"))
        o, _ = aten._scaled_dot_product_attention_math(q, k, v, mm + tri if causal else mm, 0.0, False)
        (want,) = torch.autograd.grad(o, mm, go)
        torch.testing.assert_close(grads[3].cpu(), want)
    else:
        assert grads[3] is None


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_row_lookups_and_row_sums_match_cpu_exactly(mode: str) -> None:
    """Gathers and scatter-adds whose index is one value per row, broadcast along the row (an
    embedding and its gradient), run as index_select / index_add of whole rows: CPU's values
    bit for bit, duplicates summed in the same order, bad indices still an IndexError."""
    torch.manual_seed(0)
    table = torch.randn(16, 24, requires_grad=True)
    idx = torch.randint(0, 16, (40, 30))  # many duplicates
    go = torch.randn(40, 30, 24)
    F.embedding(idx, table).backward(go)
    rows = torch.randint(0, 16, (9,))
    narrow_index = rows[:, None].expand(9, 10)  # fewer columns than the table has
    with torch_tpu.mode(mode):
        t = table.detach().to("tpu").requires_grad_()
        out = F.embedding(idx.to("tpu"), t)
        out.backward(go.to("tpu"))
        assert torch.equal(out.cpu(), F.embedding(idx, table))
        assert torch.equal(t.grad.cpu(), table.grad)
        got = torch.gather(t.detach(), 0, narrow_index.to("tpu")).cpu()
        assert torch.equal(got, torch.gather(table.detach(), 0, narrow_index))
        with pytest.raises(IndexError, match="out of bounds"):
            F.embedding(torch.tensor([[3, 16]], device="tpu"), t).cpu()


@pytest.mark.parametrize("mode", ["bicubic", "trilinear"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("resize", [dict(scale_factor=2.0), dict(scale_factor=0.6), dict(size=7)])
def test_bicubic_and_trilinear_upsampling_gradients_match_cpu(mode: str, align_corners: bool, resize: dict) -> None:
    # float64: the same taps and weights as CPU's kernels, so the gradients agree to rounding.
    g = torch.Generator().manual_seed(0)
    x = torch.randn((2, 3, 5, 6) if mode == "bicubic" else (2, 3, 4, 5, 6), generator=g, dtype=torch.float64,
                    requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    y = F.interpolate(x, mode=mode, align_corners=align_corners, **resize)
    yt = F.interpolate(xt, mode=mode, align_corners=align_corners, **resize)
    grad = torch.randn(y.shape, generator=g, dtype=torch.float64)
    y.backward(grad)
    yt.backward(grad.to("tpu"))
    torch.testing.assert_close(yt.detach().cpu(), y.detach())
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
