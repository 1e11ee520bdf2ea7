"""``torch.compile(model)`` without a backend: graphs on "tpu" go to the tpu backend.

``torch.compile``'s default backend is the string "inductor", which it turns into a
``torch._TorchCompileInductorWrapper``; Dynamo calls that wrapper once per captured graph
with the graph and its example (fake) inputs. Inductor has no code generator for "tpu", so we
wrap that one call: a graph whose inputs (or, for graphs that only create tensors, whose
traced values) live on "tpu" is compiled by the tpu backend; every other graph goes to
Inductor unchanged. The decision is per graph, so a model that mixes devices across graph
breaks gets each piece compiled by the right compiler.

Alternatives rejected (docs/notes/compiled-mode.md):
- Inductor's per-device hook (``torch._inductor.codegen.common.register_backend_for_device``)
  plugs a *code generator* into Inductor: Inductor would still decompose and lower the graph
  with its own lowerings and schedule it, and we would have to emit our IR from Inductor's
  loop-level IR. That is a second lowering path, against the one-lowering-table rule.
- Replacing ``torch._inductor.compile_fx.compile_fx``: it is also the entry of AOT export and
  other tools, and importing it costs seconds; the wrapper is torch.compile's own choke point
  and is already loaded with ``torch``.
Inductor options given to ``torch.compile`` (``mode=``, ``options=``) do not apply to tpu
graphs; ``dynamic=`` is Dynamo's and works as with ``backend="tpu"``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

_MARK = "_torch_tpu_routes_tpu_graphs"


def _on_tpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


def graph_is_on_tpu(gm, example_inputs: Sequence) -> bool:
    """True when any input, or any tensor the graph traces, lives on "tpu"."""
    if any(_on_tpu(x) for x in example_inputs):
        return True
    graph = getattr(gm, "graph", None)
    for node in (graph.nodes if graph is not None else ()):
        val = node.meta.get("example_value", node.meta.get("val"))
        vals = val if isinstance(val, (list, tuple)) else (val,)
        if any(_on_tpu(v) for v in vals):
            return True
    return False


def install() -> None:
    """Wraps ``torch._TorchCompileInductorWrapper.__call__`` once (idempotent)."""
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is None or getattr(wrapper.__call__, _MARK, False):
        return
    inductor_call = wrapper.__call__

    @functools.wraps(inductor_call)
    def call(self, model_, inputs_, *args, **kwargs):
        if graph_is_on_tpu(model_, inputs_):
            from .backend import tpu_backend

            return tpu_backend(model_, inputs_)
        return inductor_call(self, model_, inputs_, *args, **kwargs)

    setattr(call, _MARK, True)
    wrapper.__call__ = call
