"""nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder in inference on
tpu vs CPU (torch_tpu/lowering/nn_transformer.py).

In eval mode without grad these modules take PyTorch's "fast path" on the tpu device (it is in
their supported-device lists): the fused ops ``_native_multi_head_attention`` and
``_transformer_encoder_layer_fwd``, and for TransformerEncoder with a padding mask the
``_nested_tensor_from_mask_left_aligned`` check. Each test records the ops dispatched on tpu to
show the fast path was taken, and runs in strict and fused mode.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import torch_tpu

from opinfo_utils import OpsCalled

aten = torch.ops.aten
MODES = ["strict", "fused"]
B, T, D, H = 3, 5, 8, 2


def _on_tpu(module: nn.Module) -> nn.Module:
    """The same module, same weights, on tpu."""
    return copy.deepcopy(module).to("tpu")


def _tpu(kwargs: dict) -> dict:
    return {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [B, T, D], a bool attention mask [T, T] (no fully masked row), a right-padding mask [B, T]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g)
    attn = torch.rand(T, T, generator=g) > 0.6
    attn.fill_diagonal_(False)
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[0, 3:] = True
    pad[2, 4:] = True
    return x, attn, pad


def _assert_fastpath(module: nn.Module) -> None:
    # The conditions the modules check first; the dispatched-op assertions below confirm the rest.
    assert torch.backends.mha.get_fastpath_enabled() and not module.training and not torch.is_grad_enabled()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("masks", ["none", "attn", "padding", "both"])
@pytest.mark.parametrize("weights", ["averaged", "per_head", "none"])
def test_multihead_attention(mode: str, batch_first: bool, masks: str, weights: str) -> None:
    torch.manual_seed(0)
    cpu = nn.MultiheadAttention(D, H, batch_first=batch_first).eval()
    tpu = _on_tpu(cpu)
    x, attn, pad = _inputs()
    if not batch_first:
        x = x.transpose(0, 1).contiguous()
    kwargs = {"need_weights": weights != "none", "average_attn_weights": weights == "averaged"}
    if masks in ("attn", "both"):
        kwargs["attn_mask"] = attn  # mask_type 2 after merging (broadcast to [B, H, T, T])
    if masks in ("padding", "both"):
        kwargs["key_padding_mask"] = pad  # mask_type 1 alone, merged with attn_mask otherwise
    xt = x.to("tpu")
    with torch.no_grad(), torch_tpu.mode(mode):
        _assert_fastpath(tpu)
        want = cpu(x, x, x, **kwargs)
        with OpsCalled() as called:
            out, w = tpu(xt, xt, xt, **_tpu(kwargs))  # one tensor for q, k and v: self-attention
        out, w = out.cpu(), None if w is None else w.cpu()
    # The module takes the fused op only with batch_first (its own rule); otherwise the
    # composite path, which must agree as well.
    assert (aten._native_multi_head_attention.default in called) == batch_first
    torch.testing.assert_close(out, want[0])
    if weights == "none":
        assert w is None and want[1] is None
    else:
        torch.testing.assert_close(w, want[1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", ["src_mask_type0", "float_mask_type0", "mask_4d_type2", "cross_attention"])
def test_native_multi_head_attention_op(mode: str, case: str) -> None:
    """The op called directly, for what the modules never pass: an (L, L) mask with mask_type 0,
    a float mask (CPU masks every nonzero entry, whatever its value), a per-head 4-D mask, and
    distinct query/key/value tensors."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(D, H, batch_first=True)
    weights = [t.detach() for t in (mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)]
    x, attn, _ = _inputs(4)
    q = k = v = x
    mask, mask_type = None, None
    if case == "src_mask_type0":
        mask, mask_type = attn, 0
    elif case == "float_mask_type0":
        mask, mask_type = attn * torch.rand(T, T) * 3, 0
    elif case == "mask_4d_type2":
        mask, mask_type = torch.rand(B, H, T, T) > 0.7, 2
    else:
        k, v = torch.randn(B, T, D), torch.randn(B, T, D)

    def call(device: str) -> tuple[torch.Tensor, torch.Tensor]:
        to = [t if t is None else t.to(device) for t in (q, k, v, *weights, mask)]
        return torch._native_multi_head_attention(*to[:3], D, H, *to[3:7], to[7], True, False, mask_type)

    with torch_tpu.mode(mode):
        want, got = call("cpu"), call("tpu")
    torch.testing.assert_close(got[0].cpu(), want[0])
    torch.testing.assert_close(got[1].cpu(), want[1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mask", ["none", "padding", "src_mask"])
def test_transformer_encoder_layer(mode: str, norm_first: bool, activation: str, mask: str) -> None:
    torch.manual_seed(0)
    cpu = nn.TransformerEncoderLayer(D, H, 16, activation=activation, batch_first=True, norm_first=norm_first,
                                     layer_norm_eps=1e-4).eval()
    tpu = _on_tpu(cpu)
    x, attn, pad = _inputs(1)
    kwargs = {"padding": {"src_key_padding_mask": pad}, "src_mask": {"src_mask": attn}, "none": {}}[mask]
    with torch.no_grad(), torch_tpu.mode(mode):
        _assert_fastpath(tpu)
        want = cpu(x, **kwargs)
        with OpsCalled() as called:
            got = tpu(x.to("tpu"), **_tpu(kwargs)).cpu()
    assert aten._transformer_encoder_layer_fwd.default in called
    torch.testing.assert_close(got, want)


def _encoder() -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, 16, batch_first=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the nested-tensor prototype warning
        return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D)).eval()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", [False, True])
def test_transformer_encoder(mode: str, padding: bool) -> None:
    cpu = _encoder()
    tpu = _on_tpu(cpu)
    assert tpu.use_nested_tensor  # so a padding mask makes it ask whether to go nested
    x, _, pad = _inputs(2)
    kwargs = {"src_key_padding_mask": pad} if padding else {}
    with torch.no_grad(), torch_tpu.mode(mode), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _assert_fastpath(tpu)
        want = cpu(x, **kwargs)
        with OpsCalled() as called:
            got = tpu(x.to("tpu"), **_tpu(kwargs)).cpu()
        cpu.use_nested_tensor = False
        want_dense = cpu(x, **kwargs)
    assert aten._transformer_encoder_layer_fwd.default in called
    assert (aten._nested_tensor_from_mask_left_aligned.default in called) == padding
    assert aten._nested_tensor_from_mask.default not in called
    if not padding:
        torch.testing.assert_close(got, want)
        return
    # tpu has no nested tensors, so it takes the dense path (see nn_transformer.py): every
    # unpadded position matches CPU's nested path, and the whole output matches CPU's dense path.
    # CPU's nested path writes zeros at padded positions, which PyTorch leaves unspecified.
    keep = ~pad
    torch.testing.assert_close(got[keep], want[keep])
    torch.testing.assert_close(got, want_dense)


def test_transformer_encoder_nested_path_raises_clearly() -> None:
    """mask_check=False skips the check and converts to a nested tensor right away: that cannot
    run on tpu, and the error says how to avoid it."""
    tpu = _on_tpu(_encoder())
    tpu.mask_check = False
    x, _, pad = _inputs(2)
    with torch.no_grad(), pytest.raises(NotImplementedError, match="enable_nested_tensor=False"):
        tpu(x.to("tpu"), src_key_padding_mask=pad.to("tpu"))


@pytest.mark.parametrize("mode", MODES)
def test_masked_softmax(mode: str) -> None:
    """_masked_softmax, which the fused attention uses: the three mask types, a softmax over a
    non-last dim, a fully masked row (NaN on CPU) and a masked NaN (ignored)."""
    g = torch.Generator().manual_seed(3)
    s = torch.randn(2, 2, 4, 4, generator=g)
    s[1, 1, 2, 0] = float("nan")
    full = torch.rand(2, 2, 4, 4, generator=g) > 0.5
    full[0, 0, 1] = True
    full[1, 1, 2, 0] = True
    cases = [(full, 3, 2), (full, 2, 2), (torch.rand(2, 4, generator=g) > 0.5, 3, 1),
             (torch.rand(4, 4, generator=g) > 0.5, 3, 0), (torch.rand(4, 4, generator=g) > 0.5, 1, 0)]
    with torch_tpu.mode(mode):
        for mask, dim, mask_type in cases:
            want = torch._masked_softmax(s, mask, dim, mask_type)
            got = torch._masked_softmax(s.to("tpu"), mask.to("tpu"), dim, mask_type).cpu()
            torch.testing.assert_close(got, want, equal_nan=True)
