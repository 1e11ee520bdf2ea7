"""Run lowerings on the reference IR interpreter: no device, no C++ build needed.

``run_reference(op, *args, **kwargs)`` lowers one ATen overload exactly as the dispatcher
would and evaluates it with GraphBuilder(reference=True). ``ReferenceMode`` routes every ATen
op of ordinary PyTorch code through it (view and factory ops run natively, as the C++ device
layer handles them without IR), so OpInfo samples can check the lowering table end to end.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..ir.builder import GraphBuilder, Value
from .apply import NeedsBakedScalars, _is_scalar_type, apply_lowering, normalize_args


def _to_values(b: GraphBuilder, x, arg_type, bake: bool, counter: list[int]):
    if isinstance(x, torch.Tensor):
        counter[0] += 1
        return b.parameter(counter[0] - 1, x.dtype, tuple(x.shape), x.detach())
    if isinstance(x, (list, tuple)) and any(isinstance(y, torch.Tensor) for y in x):
        return [None if y is None else _to_values(b, y, None, bake, counter) for y in x]
    scalar_slot = arg_type is not None and (_is_scalar_type(arg_type) or str(arg_type) in ("Tensor", "Optional[Tensor]"))
    if scalar_slot and isinstance(x, (bool, int, float)) and not bake:
        dtype = torch.bool if isinstance(x, bool) else torch.int64 if isinstance(x, int) else torch.float64
        counter[0] += 1
        v = b.parameter(counter[0] - 1, dtype, (), torch.tensor(x, dtype=dtype))
        v.wrapped = True
        return v
    return x


def run_reference(op: torch._ops.OpOverload, *args, **kwargs):
    """Evaluate op through its lowering; mutated arguments are updated in place like ATen does."""
    full = normalize_args(op._schema, args, kwargs)
    try:
        return _run(op, full, bake=False)
    except NeedsBakedScalars:
        return _run(op, full, bake=True)


def _run(op, full: list, bake: bool):
    b = GraphBuilder(reference=True)
    b.reference_seed, b.reference_offset = 0, 0
    counter = [0]
    vals = [_to_values(b, a, arg.type, bake, counter) for a, arg in zip(full, op._schema.arguments)]
    returns, mutations = apply_lowering(b, op, vals)
    for i, nv in mutations:
        targets, news = (full[i], nv) if isinstance(full[i], (list, tuple)) else ([full[i]], [nv])
        for t, v in zip(targets, news):
            if t is None or v is None:
                continue
            if tuple(t.shape) != v.shape:
                t.resize_(v.shape)
            t.copy_(v.data)
    outs = []
    for r in returns:
        if isinstance(r, tuple) and r and r[0] == "arg":
            outs.append(full[r[1]])
        elif isinstance(r, list):
            outs.append([v.data.clone() for v in r])
        else:
            outs.append(None if r is None else r.data.clone())  # None: an undefined result (output_mask)
    if len(op._schema.returns) == 0:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


_INPLACE_VIEW_OPS = frozenset(f"aten::{n}" for n in (
    "squeeze_", "unsqueeze_", "transpose_", "t_", "swapdims_", "swapaxes_", "as_strided_", "detach_"))


def _is_native(func) -> bool:
    """Ops the device layer runs without IR: views (metadata only) and allocation."""
    schema = func._schema
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        return True
    name = schema.name
    if name in _INPLACE_VIEW_OPS:  # change a tensor's metadata only (matmul squeezes its result in place)
        return True
    return name in ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resize_", "aten::set_",
                    "aten::_local_scalar_dense", "aten::lift_fresh", "aten::detach", "aten::alias",
                    "aten::is_same_size", "aten::_has_compatible_shallow_copy_type")


class ReferenceMode(TorchDispatchMode):
    """Every non-view ATen op is lowered and evaluated by the reference interpreter."""

    def __init__(self) -> None:
        super().__init__()
        self.lowered: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _is_native(func):
            return func(*args, **kwargs)
        name = str(func)
        self.lowered[name] = self.lowered.get(name, 0) + 1
        return run_reference(func, *args, **kwargs)
