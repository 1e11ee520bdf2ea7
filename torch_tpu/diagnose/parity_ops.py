"""Op-level pieces of :mod:`torch_tpu.diagnose.parity`.

* :func:`support_of` / :func:`dry_run`: which ATen ops a model calls on "tpu" and which of them
  the backend cannot run, found without running anything: the model's forward (and backward)
  is traced on fake "tpu" tensors (no memory, no device work) and each op is looked up the way
  the dispatcher would find it: a C++ PrivateUse1 kernel (csrc/aten), a lowering in the table
  (torch_tpu/lowering), a composite kernel the dispatcher runs above the backend, the
  functional variant of a mutating op, or a ``torch._decomp`` decomposition.
* :class:`OpParity`: a dispatch mode that checks every op a block runs on "tpu" against the CPU
  op on copies of the same inputs, and keeps the first that diverges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .parity_compare import Diff, compare, leaves, map_tensors


@dataclasses.dataclass
class UnsupportedOp:
    """An op the model calls that the tpu backend has no way to run."""

    op: str  # "aten::special_airy_ai", "mylib::op.overload"
    count: int  # calls in one traced step
    modules: list[str]  # qualified names of the modules that call it ("" is the model itself)
    phase: str  # "forward", "backward" or "forward+backward"


def _op_name(op: torch._ops.OpOverload) -> str:
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def _has(op: torch._ops.OpOverload, key: torch._C.DispatchKey) -> bool:
    try:
        return op.has_kernel_for_dispatch_key(key)
    except RuntimeError:  # an op only Python knows
        return False


def support_of(op: Any) -> str | None:
    """How the tpu backend runs ``op`` ("kernel", "lowering", "composite", "functional variant",
    "decomposition"), or None when it cannot. Non-ATen callables (``operator.getitem``) and
    ``prim::`` metadata queries count as supported."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace in ("prim", "prims"):
        return "python"
    from ..lowering.apply import decomposition_for, functional_variant
    from ..lowering.registry import COMPLEX_LOWERINGS, LOWERINGS, op_key

    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1"):
        return "kernel"
    key = op_key(op)
    if key in LOWERINGS or key in COMPLEX_LOWERINGS:
        return "lowering"
    K = torch._C.DispatchKey
    if any(_has(op, k) for k in (K.CompositeExplicitAutograd, K.CompositeExplicitAutogradNonFunctional,
                                 K.CompositeImplicitAutograd)):
        return "composite"
    if op._schema.is_mutable and op.namespace == "aten":
        func = functional_variant(op)
        if func is not None and support_of(func) is not None:
            return "functional variant"
    if op.namespace == "aten" and decomposition_for(op) is not None:
        return "decomposition"
    return None


class _Recorder(TorchDispatchMode):
    """Records (op, module, phase) for every op that reaches the dispatch mode stack."""

    def __init__(self) -> None:
        super().__init__()
        self.module_stack: list[str] = []
        self.phase = "forward"
        self.calls: list[tuple[Any, str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        where = self.module_stack[-1] if self.module_stack and self.phase == "forward" else "(backward)"
        self.calls.append((func, where, self.phase))
        return func(*args, **(kwargs or {}))


def _fake_like(t: torch.Tensor, device: str) -> torch.Tensor:
    f = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)
    return f.requires_grad_(t.requires_grad) if (t.is_floating_point() or t.is_complex()) else f


def dry_run(model: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any], train: bool,
            device: str = "tpu") -> tuple[int, list[UnsupportedOp], str | None]:
    """Trace one step of ``model`` on fake ``device`` tensors and list the ops the backend
    cannot run. Returns (number of op calls traced, unsupported ops, error): error is set (and
    the list is what was seen up to then) when the model cannot be traced on fake tensors
    (data-dependent Python control flow, ``.item()``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    rec = _Recorder()

    def pre(mod, _args):
        rec.module_stack.append(names.get(id(mod), type(mod).__name__))

    def post(mod, _args, _out):
        if rec.module_stack:
            rec.module_stack.pop()

    handles = [h for m in model.modules() for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))]
    error = None
    try:
        with FakeTensorMode(allow_non_fake_inputs=False):
            state = {k: _fake_like(v, device) for k, v in
                     [*model.named_parameters(), *model.named_buffers()]}
            fargs = map_tensors(lambda t: _fake_like(t, device), args)
            fkwargs = map_tensors(lambda t: _fake_like(t, device), dict(kwargs))
            with rec:
                out = torch.func.functional_call(model, state, fargs, fkwargs, tie_weights=True)
                if train:
                    outs = [t for _, t in leaves(out) if t.requires_grad]
                    rec.phase = "backward"
                    if outs:
                        torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
    except Exception as e:  # noqa: BLE001 - reported, not raised: the runs below still say more
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        for h in handles:
            h.remove()
    found: dict[str, UnsupportedOp] = {}
    for func, where, phase in rec.calls:
        if support_of(func) is not None:
            continue
        name = _op_name(func)
        u = found.setdefault(name, UnsupportedOp(name, 0, [], phase))
        u.count += 1
        if where not in u.modules:
            u.modules.append(where)
        if phase not in u.phase.split("+"):
            u.phase = "forward+backward"
    return len(rec.calls), list(found.values()), error


@dataclasses.dataclass
class OpDivergence:
    """The first op whose tpu result differs from the CPU op run on the same inputs."""

    op: str  # "aten::gelu"
    index: int  # the op's position among the ops the module ran (0-based)
    phase: str  # "forward" or "backward"
    output: str  # which result diverged ("out", "out[1]")
    max_abs: float
    max_rel: float
    why: str
    inputs: str  # shapes and dtypes of the tensor arguments


def _skip(func: torch._ops.OpOverload) -> bool:
    """Ops whose CPU replay is not comparable: random ones, uninitialized memory, views and
    storage-level operations (a CPU copy of a view does not share its base's storage)."""
    if torch.Tag.nondeterministic_seeded in func.tags or func.is_view:
        return True
    base = func._schema.name.split("::")[-1]
    return base.startswith(("empty", "as_strided", "set_", "resize", "_local_scalar_dense", "new_empty"))


def _describe(args: tuple, kwargs: dict) -> str:
    parts = []
    for _, t in leaves((args, kwargs), "x"):
        parts.append(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}")
    return ", ".join(parts) or "no tensors"


class OpParity(TorchDispatchMode):
    """Inside this mode every tpu op also runs on the CPU on copies of its inputs (taken before
    the op, so in-place ops compare too), and the first result beyond tolerance is kept in
    ``first``. Execution continues with the tpu results. Each op's inputs and results are read
    back to the host, so in fused mode every op runs as its own graph."""

    def __init__(self, atol: float | None, rtol: float | None) -> None:
        super().__init__()
        self.atol, self.rtol = atol, rtol
        self.first: OpDivergence | None = None
        self.count = 0
        self.phase = "forward"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.first is not None or not isinstance(func, torch._ops.OpOverload) or _skip(func):
            return func(*args, **kwargs)
        tpu = any(t.device.type not in ("cpu", "meta") for _, t in leaves((args, kwargs)))
        if not tpu:
            return func(*args, **kwargs)
        to_cpu = lambda t: t.detach().cpu().clone()  # noqa: E731
        cpu_args = map_tensors(to_cpu, args)
        cpu_kwargs = {k: (torch.device("cpu") if isinstance(v, torch.device) else map_tensors(to_cpu, v))
                      for k, v in kwargs.items()}
        out = func(*args, **kwargs)
        index = self.count
        self.count += 1
        try:
            ref = func(*cpu_args, **cpu_kwargs)
        except Exception:  # noqa: BLE001 - the CPU cannot run it as called: nothing to compare with
            return out
        got, want = leaves(out), leaves(ref)
        for (path, g), (_, r) in zip(got, want):
            d: Diff = compare(r, g, self.atol, self.rtol)
            if not d.ok:
                self.first = OpDivergence(_op_name(func), index, self.phase, path, d.max_abs, d.max_rel, d.why,
                                          _describe(args, kwargs))
                break
        return out
