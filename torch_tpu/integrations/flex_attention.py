"""FlexAttention (``torch.nn.attention.flex_attention``) on "tpu", eager and compiled.

``flex_attention()`` checks its inputs' device against a fixed set (cuda, cpu, xpu, hpu, mps)
before any dispatch, and PyTorch offers out-of-tree devices no hook there. Everything after the
check already works for a PrivateUse1 device: in eager mode the flex_attention higher-order op
runs its dense implementation (``math_attention``: scores, the vmapped score_mod and mask_mod,
softmax) as ATen ops, which we lower, and its backward likewise. So we wrap the check to accept
"tpu" and defer to PyTorch's for every other device. Unlike CPU, tpu supports the backward.

Under ``torch.compile(backend="tpu")`` the op reaches our backend as a node of the Dynamo graph;
torch_tpu/compile/flex_attention.py replaces it by the same dense implementation before
AOTAutograd traces it, so forward and backward become ordinary ATen graphs.
"""

from __future__ import annotations

from types import ModuleType

import torch


def _accept_tpu(module: ModuleType) -> None:
    original = getattr(module, "_validate_device", None)
    if original is None or getattr(original, "_accepts_tpu", False):
        return  # another PyTorch without the check, or patched already
    backend = torch._C._get_privateuse1_backend_name()

    def _validate_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if query.device.type != backend:
            original(query, key, value)

    _validate_device._accepts_tpu = True  # type: ignore[attr-defined]
    module._validate_device = _validate_device


ACTIONS = {"torch.nn.attention.flex_attention": _accept_tpu}
