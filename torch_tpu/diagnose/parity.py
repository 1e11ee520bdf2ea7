"""``torch_tpu.diagnose.parity``: does a model compute on "tpu" what it computes on the CPU,
and if not, which module and which op inside it is wrong? (``python -m torch_tpu check``,
docs/diagnostics.md, "check").

Steps, for a model and example inputs:

1. Dry run (nothing runs): the forward (and with ``train=True`` the backward) is traced on fake
   "tpu" tensors and every op is looked up the way the dispatcher would find it
   (:func:`torch_tpu.diagnose.parity_ops.dry_run`). Ops the backend cannot run are listed, and
   the modes are not run (they would stop at the first one).
2. Reference: the model runs on the CPU with hooks on every module that record each call's
   inputs and outputs (and, with ``train``, the gradient arriving at each output).
3. Per mode (strict, fused, compiled): a copy of the model runs on "tpu" in that mode; its
   outputs (and parameter gradients) are compared with the CPU's. Nothing else happens when
   they agree.
4. When they differ, each module call is replayed alone on "tpu" in that mode on the CPU's
   recorded inputs, children before parents; the first whose outputs diverge is the module at
   fault (errors of earlier modules cannot leak into it, since its inputs are the CPU's). For
   a backward divergence the replay runs forward and backward with the recorded output
   gradients, later modules first (the order backward runs them).
5. That module then runs once more under :class:`~torch_tpu.diagnose.parity_ops.OpParity`,
   which runs every op on the CPU too, on copies of the same inputs, and names the first op
   whose result diverges. Ops run one at a time there (eager strict for compiled mode), so a
   module that diverges only when its ops are fused or compiled together is reported as such.

Costs: nothing is installed or imported until this module is used. The reference keeps a CPU
copy of every module call's inputs and outputs, so it needs memory for one step's activations.
Random ops (dropout) cannot match across devices: the model runs in ``eval()`` mode, and with
``train=True`` in ``train()`` mode with its ``nn.Dropout`` modules in eval mode.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from .parity_compare import Diff, compare_trees, leaves, max_error, snapshot
from .parity_ops import OpDivergence, OpParity, UnsupportedOp, dry_run

MODES = ("strict", "fused", "compiled")


@dataclasses.dataclass
class ModuleDivergence:
    """The first module whose outputs (or gradients) diverge when run alone on the CPU's inputs."""

    module: str  # qualified name; "" is the model itself
    cls: str
    call: int  # which call of this module (0: its first in the step)
    phase: str  # "forward" or "backward"
    where: str  # the diverging output, or gradient ("grad of weight", "grad of args[0]")
    max_abs: float
    max_rel: float
    why: str = ""
    op: OpDivergence | None = None  # the op inside it, when one diverges on its own
    ops_checked: int = 0  # how many ops the op-level replay compared
    note: str = ""


@dataclasses.dataclass
class ModeResult:
    """One mode's verdict."""

    mode: str
    ok: bool
    max_abs: float = 0.0  # largest error over the model's outputs (and gradients with train)
    max_rel: float = 0.0
    where: str = ""  # the first diverging model output or gradient
    divergence: ModuleDivergence | None = None
    error: str | None = None  # the exception the mode raised, if it did
    note: str = ""
    seconds: float = 0.0


@dataclasses.dataclass
class ParityResult:
    """What :func:`parity` found. ``ok`` is False when an op is unsupported, a mode diverges or
    a mode raises."""

    ok: bool
    model: str
    train: bool
    atol: float | None
    rtol: float | None
    traced_ops: int
    unsupported: list[UnsupportedOp]
    dry_run_error: str | None
    modes: list[ModeResult]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (infinities become the string "inf")."""
        def clean(x: Any) -> Any:
            if isinstance(x, float) and not math.isfinite(x):
                return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x

        return clean(dataclasses.asdict(self))

    def format(self) -> str:
        """The human-readable report ``python -m torch_tpu check`` prints."""
        tol = "dtype defaults" if self.atol is None and self.rtol is None else f"atol={self.atol} rtol={self.rtol}"
        lines = [f"check: {self.model} ({'forward+backward' if self.train else 'forward'}; tolerance: {tol})"]
        if self.unsupported:
            lines.append(f"unsupported ops ({len(self.unsupported)}, dry run over {self.traced_ops} op calls):")
            for u in self.unsupported:
                mods = ", ".join(_mname(m) for m in u.modules)
                lines.append(f"  {u.op}  x{u.count} ({u.phase}) in {mods}")
        else:
            lines.append(f"unsupported ops: none (dry run over {self.traced_ops} op calls)")
        if self.dry_run_error:
            lines.append(f"  dry run incomplete: {self.dry_run_error}")
        for n in self.notes:
            lines.append(f"note: {n}")
        for m in self.modes:
            if m.error:
                lines.append(f"{m.mode:<9} ERROR  {m.error}")
            elif m.ok:
                lines.append(f"{m.mode:<9} ok     max abs {m.max_abs:.3g}, rel {m.max_rel:.3g} ({m.seconds:.1f}s)")
            else:
                lines.append(f"{m.mode:<9} DIVERGES  {m.where}: max abs {m.max_abs:.3g}, rel {m.max_rel:.3g} "
                             f"({m.seconds:.1f}s)")
            d = m.divergence
            if d is not None:
                why = f" ({d.why})" if d.why else ""
                lines.append(f"  module: {_mname(d.module)} ({d.cls}), call {d.call}, {d.phase}: {d.where} "
                             f"max abs {d.max_abs:.3g}, rel {d.max_rel:.3g}{why}")
                if d.op is not None:
                    o = d.op
                    why = f" ({o.why})" if o.why else ""
                    lines.append(f"  op:     {o.op} (op {o.index} of the module's {d.ops_checked} checked, {o.phase}): "
                                 f"{o.output} max abs {o.max_abs:.3g}, rel {o.max_rel:.3g}{why}; inputs {o.inputs}")
            for note in (m.note, d.note if d else ""):
                if note:
                    lines.append(f"  note: {note}")
        bad = [m.mode for m in self.modes if not m.ok]
        if self.ok:
            lines.append("check: OK")
        else:
            why = [f"{len(self.unsupported)} unsupported op(s)"] if self.unsupported else []
            why += [f"{', '.join(bad)} diverge(s) or fail(s)"] if bad else []
            lines.append(f"check: FAILED ({'; '.join(why)})")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _mname(name: str) -> str:
    return name or "(model)"


@dataclasses.dataclass
class _Call:
    """One module call of the CPU reference run."""

    module: str
    cls: str
    call: int
    pre: int  # order of entry (pre-order)
    args: Any
    kwargs: Any
    post: int = -1  # order of exit (post-order: children before parents)
    outputs: list[tuple[str, torch.Tensor]] = dataclasses.field(default_factory=list)
    cotangents: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)


def _normalize_inputs(example_inputs: Any, example_kwargs: Mapping[str, Any] | None) -> tuple[tuple, dict]:
    if isinstance(example_inputs, torch.Tensor):
        args: tuple = (example_inputs,)
    elif isinstance(example_inputs, Mapping):
        args, example_kwargs = (), {**example_inputs, **(example_kwargs or {})}
    elif isinstance(example_inputs, (tuple, list)):
        args = tuple(example_inputs)
    elif example_inputs is None:
        args = ()
    else:
        raise TypeError(f"parity: example_inputs must be a tensor, a tuple/list of positional arguments or a "
                        f"mapping of keyword arguments, got {type(example_inputs).__name__}")
    return snapshot(args), snapshot(dict(example_kwargs or {}))


def _set_flags(model: torch.nn.Module, train: bool) -> list[str]:
    model.train(train)
    notes = []
    if train:
        drops = [n for n, m in model.named_modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0]
        for n, m in model.named_modules():
            if isinstance(m, torch.nn.modules.dropout._DropoutNd):
                m.eval()
        if drops:
            notes.append(f"{len(drops)} dropout module(s) run in eval mode (random ops cannot match across devices)")
    return notes


def _cotangents(out_leaves: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Fixed random output gradients (a plain sum would give softmax outputs a zero gradient)."""
    g = torch.Generator().manual_seed(0)
    return {p: torch.randn(t.shape, generator=g, dtype=t.dtype) for p, t in out_leaves
            if t.requires_grad and t.is_floating_point()}


def _backward(out_leaves: list[tuple[str, torch.Tensor]], cots: Mapping[str, torch.Tensor], device: str) -> None:
    pairs = [(t, cots[p].to(device)) for p, t in out_leaves if p in cots and t.requires_grad]
    if pairs:
        torch.autograd.backward([t for t, _ in pairs], [c for _, c in pairs])


def _grads(module: torch.nn.Module, args: Any, kwargs: Any) -> list[tuple[str, torch.Tensor]]:
    out = [(f"grad of {n}", p.grad.detach().cpu()) for n, p in module.named_parameters() if p.grad is not None]
    out += [(f"grad of {p}", t.grad.detach().cpu()) for p, t in leaves(args, "args") + leaves(kwargs, "kwargs")
            if t.is_leaf and t.grad is not None]
    return out


class _Reference:
    """The CPU run, with every module call recorded."""

    def __init__(self, model: torch.nn.Module, args: tuple, kwargs: dict, train: bool) -> None:
        model = copy.deepcopy(model)  # the run updates buffers (batch norm) and sets .grad
        names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
        self.calls: list[_Call] = []
        stack: list[_Call] = []
        counts: dict[str, int] = {}
        post = 0

        def pre_hook(mod, a, k):
            name = names.get(id(mod), "?")
            c = _Call(name, type(mod).__name__, counts.get(name, 0), len(self.calls), snapshot(a, grad=train),
                      snapshot(k, grad=train))
            counts[name] = c.call + 1
            self.calls.append(c)
            stack.append(c)

        def post_hook(mod, a, k, out):
            nonlocal post
            c = stack.pop()
            c.post, post = post, post + 1
            c.outputs = [(p, t.detach().clone()) for p, t in leaves(out)]
            if train:
                for p, t in leaves(out):
                    if t.requires_grad:
                        t.register_hook(lambda g, c=c, p=p: c.cotangents.__setitem__(p, g.detach().clone()))

        handles = [h for m in model.modules() for h in (m.register_forward_pre_hook(pre_hook, with_kwargs=True),
                                                        m.register_forward_hook(post_hook, with_kwargs=True))]
        try:
            out = model(*args, **kwargs)
            self.outputs = [(p, t.detach().clone()) for p, t in leaves(out)]
            self.cots = _cotangents(leaves(out)) if train else {}
            self.grads: list[tuple[str, torch.Tensor]] = []
            if train:
                _backward(leaves(out), self.cots, "cpu")
                self.grads = _grads(model, (), {})
        finally:
            for h in handles:
                h.remove()


@contextlib.contextmanager
def _in_mode(mode: str) -> Iterator[None]:
    """Eager ops in ``mode``'s execution mode (compiled graphs' eager parts run strict)."""
    from .. import modes

    with modes.mode("strict" if mode == "compiled" else mode):
        yield


@contextlib.contextmanager
def _dynamo_limits() -> Iterator[None]:
    # Every replayed module is compiled on its own; without a higher limit, Dynamo would run the
    # later instances of a class (layer 9 of 12) eagerly after 8 recompiles of its forward.
    # Those recompiles are expected: torch_tpu's recompile warning would only be noise here.
    import torch._dynamo

    with torch._dynamo.config.patch(recompile_limit=1024, accumulated_recompile_limit=65536), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch_tpu.compile: recompiling")
        yield


def _callable(module: torch.nn.Module, mode: str):
    return torch.compile(module, backend="tpu") if mode == "compiled" else module


class _Checker:
    def __init__(self, pristine: torch.nn.Module, ref: _Reference, train: bool, atol: float | None,
                 rtol: float | None) -> None:
        self.pristine, self.ref, self.train, self.atol, self.rtol = pristine, ref, train, atol, rtol

    def _submodule(self, name: str, device: str) -> torch.nn.Module:
        m = self.pristine.get_submodule(name) if name else self.pristine
        return copy.deepcopy(m).to(device)

    def run_mode(self, mode: str, args: tuple, kwargs: dict) -> ModeResult:
        start = time.perf_counter()
        res = ModeResult(mode, True)
        try:
            model = self._submodule("", "tpu")
            a, k = snapshot(args, "tpu"), snapshot(kwargs, "tpu")
            with _in_mode(mode):
                out = leaves(_callable(model, mode)(*a, **k))
                if self.train:
                    _backward(out, self.ref.cots, "tpu")
                got = [(p, t.detach().cpu()) for p, t in out]
                grads = _grads(model, (), {}) if self.train else []
        except Exception as e:  # noqa: BLE001 - the report names it; other modes still run
            res.ok, res.error = False, f"{type(e).__name__}: {_first_line(e)}"
            res.seconds = time.perf_counter() - start
            return res
        res.max_abs, res.max_rel = max_error(self.ref.outputs + self.ref.grads, got + grads)
        bad = compare_trees(self.ref.outputs, got, self.atol, self.rtol)
        phase = "forward"
        if bad is None and self.train:
            bad, phase = compare_trees(self.ref.grads, grads, self.atol, self.rtol), "backward"
        if bad is not None:
            res.ok = False
            res.where = bad[0] + (f" ({bad[1].why})" if bad[1].why else "")
            try:
                res.divergence = self.locate(mode, phase)
            except Exception as e:  # noqa: BLE001
                res.note = f"locating the module failed: {type(e).__name__}: {_first_line(e)}"
            if res.divergence is None and not res.note:
                res.note = ("no module diverges when run alone on the CPU's inputs: the error builds up across "
                            "modules (a looser --atol/--rtol may be right for this model)")
        res.seconds = time.perf_counter() - start
        return res

    # -- locating the module -------------------------------------------------------------------

    def locate(self, mode: str, phase: str) -> ModuleDivergence | None:
        if phase == "forward":
            order = sorted(self.ref.calls, key=lambda c: c.post)  # children first
        else:
            order = [c for c in sorted(self.ref.calls, key=lambda c: -c.pre) if c.cotangents]  # backward order
        tpu_root = self._submodule("", "tpu") if phase == "forward" else None
        for c in order:
            found = (self._replay_forward(c, tpu_root, mode) if phase == "forward"
                     else self._replay_backward(c, mode))
            if found is not None:
                path, d = found
                div = ModuleDivergence(c.module, c.cls, c.call, phase, path, d.max_abs, d.max_rel, d.why)
                self._locate_op(div, c, mode)
                return div
        return None

    def _replay_forward(self, c: _Call, tpu_root: torch.nn.Module, mode: str) -> tuple[str, Diff] | None:
        module = tpu_root.get_submodule(c.module) if c.module else tpu_root
        a, k = snapshot(c.args, "tpu"), snapshot(c.kwargs, "tpu")
        with _in_mode(mode):
            got = [(p, t.detach().cpu()) for p, t in leaves(_callable(module, mode)(*a, **k))]
        return compare_trees(c.outputs, got, self.atol, self.rtol)

    def _run_backward(self, c: _Call, device: str, mode: str) -> list[tuple[str, torch.Tensor]]:
        module = self._submodule(c.module, device)
        a, k = snapshot(c.args, device, grad=True), snapshot(c.kwargs, device, grad=True)
        with _in_mode(mode) if device != "cpu" else contextlib.nullcontext():
            out = leaves(_callable(module, mode if device != "cpu" else "strict")(*a, **k))
            _backward(out, c.cotangents, device)
            return _grads(module, a, k)

    def _replay_backward(self, c: _Call, mode: str) -> tuple[str, Diff] | None:
        want = self._run_backward(c, "cpu", mode)
        got = self._run_backward(c, "tpu", mode)
        return compare_trees(want, got, self.atol, self.rtol)

    # -- locating the op -----------------------------------------------------------------------

    def _locate_op(self, div: ModuleDivergence, c: _Call, mode: str) -> None:
        backward = div.phase == "backward"
        module = self._submodule(c.module, "tpu")
        a, k = snapshot(c.args, "tpu", grad=backward), snapshot(c.kwargs, "tpu", grad=backward)
        checker = OpParity(self.atol, self.rtol)
        try:
            with _in_mode(mode), checker:
                out = leaves(module(*a, **k))
                if backward:
                    checker.phase = "backward"
                    _backward(out, c.cotangents, "tpu")
        except Exception as e:  # noqa: BLE001
            div.note = f"the op-level replay failed: {type(e).__name__}: {_first_line(e)}"
        div.op, div.ops_checked = checker.first, checker.count
        if div.op is None and not div.note:
            how = "compiled as one graph" if mode == "compiled" else "fused into one graph" if mode == "fused" else "run in this module"
            div.note = (f"each of the {checker.count} ops matches the CPU when run alone; the module diverges only "
                        f"when its ops are {how} (a fusion or graph-lowering problem, or error that builds up "
                        f"over the module's ops)")


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else ""


def parity(model: torch.nn.Module, example_inputs: Any = (), example_kwargs: Mapping[str, Any] | None = None, *,
           modes: Sequence[str] = MODES, train: bool = False, atol: float | None = None,
           rtol: float | None = None, dry_run_only: bool = False) -> ParityResult:
    """Check that ``model`` computes on "tpu" what it computes on the CPU, in each mode.

    ``example_inputs``: a tensor, a tuple/list of positional arguments, or a mapping of keyword
    arguments (a tokenizer's ``BatchEncoding``); ``example_kwargs``: more keyword arguments.
    Outputs may be tensors or nested tuples, lists, dicts, dataclasses or Hugging Face
    ``ModelOutput``s. ``modes``: any of "strict", "fused", "compiled". ``train``: also compare
    parameter gradients (backward with fixed random output gradients) and locate a backward
    divergence. ``atol``/``rtol``: tolerance for every floating result (default per dtype:
    float32 1e-4/1e-4, bfloat16 1e-2/1.6e-2, float16 1e-3/1e-3; integers exact).
    ``dry_run_only``: list unsupported ops and run nothing.

    The model is not modified (each run uses a copy). Returns a :class:`ParityResult`; its
    ``format()`` is the report the CLI prints. See the module docstring for the method.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"parity: model must be a torch.nn.Module, got {type(model).__name__}")
    modes = [modes] if isinstance(modes, str) else list(modes)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"parity: unknown mode(s) {unknown}; choose from {list(MODES)}")
    args, kwargs = _normalize_inputs(example_inputs, example_kwargs)
    pristine = copy.deepcopy(model).cpu()
    for p in pristine.parameters():
        p.grad = None
    notes = _set_flags(pristine, train)
    traced, unsupported, dry_error = dry_run(pristine, args, kwargs, train)
    result = ParityResult(False, type(model).__name__, train, atol, rtol, traced, unsupported, dry_error, [], notes)
    if unsupported or dry_run_only:
        if unsupported and not dry_run_only:
            notes.append("modes not run: the model calls ops the tpu backend does not implement")
        result.ok = not unsupported
        return result
    ref = _Reference(pristine, args, kwargs, train)
    checker = _Checker(pristine, ref, train, atol, rtol)
    with _dynamo_limits():
        for mode in modes:
            result.modes.append(checker.run_mode(mode, args, kwargs))
    result.ok = all(m.ok for m in result.modes)
    return result
