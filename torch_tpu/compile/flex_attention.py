"""FlexAttention in compiled graphs: the higher-order op becomes its dense ATen implementation.

Dynamo keeps ``flex_attention(q, k, v, score_mod, block_mask, ...)`` as one higher-order-op
node whose score_mod and mask_mod are subgraph attributes; Inductor generates a kernel for it,
and AOTAutograd alone would keep the node (and its backward op) whole, which no lowering can
take. Before AOTAutograd traces the graph we point such nodes at PyTorch's own dense
implementation (``math_attention``, what eager mode runs: scores, the vmapped score_mod and
mask_mod, a safe softmax, the product with values), so the forward and the backward AOTAutograd
derives from it are plain ATen ops our lowerings compile, with no graph-level fallback.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx


def _dense_flex_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score_mod: Any,
                          block_mask: tuple, scale: float, kernel_options: dict[str, Any],
                          score_mod_other_buffers: tuple = (), mask_mod_other_buffers: tuple = ()) -> tuple:
    """The flex_attention op's (out, logsumexp, max_scores), as its CompositeExplicitAutograd
    kernel computes them, written so that autograd differentiates it."""
    from torch._higher_order_ops.flex_attention import _permute_strides, math_attention

    out, lse, max_scores = math_attention(query, key, value, score_mod, block_mask, scale, kernel_options,
                                          score_mod_other_buffers, mask_mod_other_buffers)
    return _permute_strides(out, query.stride()), lse, max_scores


def inline_flex_attention(gm: fx.GraphModule) -> int:
    """Points every flex_attention node of a Dynamo graph at the dense implementation; returns
    how many it changed (the graph is recompiled when any)."""
    hop = getattr(torch.ops.higher_order, "flex_attention", None)
    changed = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and hop is not None and node.target is hop:
            node.target = _dense_flex_attention
            changed += 1
    if changed:
        gm.recompile()
    return changed
