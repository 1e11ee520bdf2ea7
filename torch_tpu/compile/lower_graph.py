"""Whole-graph lowering: an ATen-level FX graph -> one IR graph (GraphBuilder wire format).

Every ``call_function`` node goes through the same lowering table as the eager modes
(``apply_lowering``), so ``torch.compile`` sees exactly the IR strict mode would run op by
op, but as one program: the host runtime's fusion then sees the whole forward (or backward).

Mapping: placeholder i -> program parameter with binding i (tensors; Python floats become
0-d float64 runtime parameters; ints are specialized); node args -> ``Value``s;
``operator.getitem`` picks from multi-result ops; mutating ops (the ``copy_`` epilogues
AOTAutograd emits for mutated inputs) write their new value into the input's memory; the
output node lists what the program returns. Random ops draw from the builder's Philox
parameters, which the runtime binds to the device generator at each run.

Effect tokens: AOTAutograd threads ops with side effects through ``with_effects`` nodes and
token inputs/outputs (the runtime passes None for the tokens and drops the returned ones).
Checks on device values work the same way with or without a token: ``_linalg_check_errors``
(after ``linalg.cholesky``) and ``torch._assert_async`` (TorchTitan's position checks, the
``torch.distributions`` validation, code a user writes): the checked tensor becomes an extra
result of the program, and the compiled callable applies the check to it after the run
(``effect_checks``), as eager mode does: ``_assert_async`` is queued behind the run and raises
at the next synchronization, so a failing check is never dropped.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ..ir.builder import DTYPES, OP_ID, GraphBuilder, Value
from ..lowering import layout
from ..lowering.apply import apply_lowering, normalize_args
from ..lowering.complex_value import ComplexValue, from_pair, real_dtype, to_pair

aten = torch.ops.aten


class Unsupported(Exception):
    """The graph cannot be lowered as a whole; ``op`` names the node's target."""

    def __init__(self, op: str, reason: str) -> None:
        super().__init__(f"{op}: {reason}")
        self.op = op
        self.reason = reason


class Symbolic(Exception):
    """The graph has symbolic shapes: it must be specialized on concrete inputs."""


# Ops that only restate a value (autograd bookkeeping, assertions on sizes and metadata).
_IDENTITY = {aten.detach.default, aten.alias.default, aten.lift_fresh_copy.default}
_NO_OPS = {aten._assert_scalar.default, aten._assert_tensor_metadata.default,
           aten.sym_constrain_range_for_size.default}

# Allocations: eager mode makes them natively (no IR); in a graph any value is a valid result.
_EMPTY = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default, aten.new_empty.default,
          aten.new_empty_strided.default, aten.empty_permuted.default}

_WITH_EFFECTS = getattr(torch.ops.higher_order, "with_effects", None)
_CHECKED_EFFECTS = {aten._linalg_check_errors.default, aten._assert_async.default, aten._assert_async.msg}


class _Token:
    """An effect token's value in the lowered graph: nothing at run time (returned as None)."""


_TOKEN = _Token()


def effect_checks(gm: fx.GraphModule) -> list[tuple[object, tuple, dict]]:
    """(op, arguments after the checked tensor, keyword arguments) of each error check in gm,
    in node order: those ordered with effect tokens and those a decomposition called directly.
    The program returns the checked tensors after its own results, in the same order."""
    out = []
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is _WITH_EFFECTS:
            out.append((n.args[1], tuple(n.args[3:]), dict(n.kwargs)))
        elif n.target in _CHECKED_EFFECTS:
            out.append((n.target, tuple(n.args[1:]), dict(n.kwargs)))
    return out


def graph_constants(gm: fx.GraphModule) -> list[tuple[fx.Node, torch.Tensor]]:
    """The tensors gm reads through get_attr nodes (``torch.tensor(...)`` in traced code), in
    node order: the program binds them as inputs after the placeholders', at every run."""
    out = []
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            x = gm
            for part in str(n.target).split("."):
                x = getattr(x, part)
            if not isinstance(x, torch.Tensor):
                raise Unsupported(f"get_attr {n.target}", f"a {type(x).__name__} attribute")
            out.append((n, x))
    return out


def _is_token(node: fx.Node, x) -> bool:
    """Whether placeholder node is an effect token: an empty CPU tensor (or None) that only
    with_effects nodes consume and the output returns."""
    if not (x is None or (isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.numel() == 0)):
        return False
    return bool(node.users) and all((u.target is _WITH_EFFECTS and u.args[0] is node) or u.op == "output"
                                    for u in node.users)


@dataclass
class LoweredGraph:
    """What ``torch_tpu._C._CompiledGraph`` takes (csrc/exec/compiled.h). outputs, returns and
    host_outputs are the output plan, in the format per-op lowerings use too
    (csrc/exec/output_plan.h)."""

    nodes: list[tuple]
    # (node id, -1: new tensor | input index it is written into[, whether that input is bound as a copy])
    outputs: list[tuple]
    # ("n", new k) | ("i", input i) | ("c", constant) |
    # ("v", input i, sizes, strides, storage offset from the input's, input sizes, input strides) |
    # ("w", new k, the same geometry)
    returns: list[tuple]
    rng_counters: int
    num_inputs: int
    ops: list[str] = field(default_factory=list)  # distinct op names, for diagnostics
    # (node id, input index): new values of mutated CPU scalar inputs (an optimizer's step
    # counts), computed from scalar inputs alone by a host run once the program is enqueued.
    host_outputs: list[tuple[int, int]] = field(default_factory=list)


def _op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"{target._schema.name}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def _concrete_int(x) -> int:
    if isinstance(x, torch.SymInt):
        raise Symbolic()
    return int(x)


def input_kind(x) -> str:
    """'t' for a tensor, 'f' float, 'i' int / bool, 's' a symbolic int, 'n' None."""
    if isinstance(x, torch.Tensor):
        return "t"
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return "s"
    if isinstance(x, float):
        return "f"
    if isinstance(x, (bool, int)):
        return "i"
    return "n"


def lower_graph(gm: fx.GraphModule, inputs: Sequence, saved_start: int | None = None) -> LoweredGraph:
    """Lowers gm for inputs (real or fake tensors and numbers, in placeholder order).

    saved_start: index of the first output a forward graph saves for its backward (see
    backend._saved_for_backward_start); such outputs that view a computed value are returned
    as views of it (_computed_view).

    Raises ``Symbolic`` when an input has a symbolic shape or value (the caller then lowers
    per concrete input signature) and ``Unsupported`` for a node the table cannot lower.
    """
    b = GraphBuilder()
    layout.reset()
    env: dict[fx.Node, object] = {}
    param_input: dict[int, int] = {}  # parameter node id -> input index
    placeholder_index: dict[fx.Node, int] = {}
    mutated: dict[int, Value] = {}  # input index -> its new value
    host_inputs: set[int] = set()  # inputs bound by value: CPU 0-d tensors and Python floats
    ops: list[str] = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise Unsupported("graph", f"{len(placeholders)} placeholders for {len(inputs)} inputs")

    checked: list[Value] = []  # the tensors effect_checks(gm) checks after each run

    def bind(node: fx.Node, i: int, x) -> None:
        placeholder_index[node] = i
        kind = input_kind(x)
        if kind == "t":
            shape = tuple(_concrete_int(s) for s in x.shape)
            if x.device.type != "tpu" and not (x.device.type == "cpu" and x.dim() == 0):
                raise Unsupported("graph", f"input {node.name} is on {x.device}")
            if x.dtype.is_complex:
                if x.device.type != "tpu":
                    raise Unsupported("graph", f"complex CPU scalar input {node.name}")
                # bound as its view_as_real (exec::tensor_binding); .id names the parameter
                p = b.parameter(i, real_dtype(x.dtype), shape + (2,))
                v = from_pair(b, p)
                v.id = p.id
            else:
                if x.dtype not in DTYPES:  # e.g. varlen_attn's uint64 random state, saved for backward
                    raise Unsupported("graph", f"input {node.name} is {x.dtype}, a dtype the IR has no type for")
                v = b.parameter(i, x.dtype, shape)
            if x.is_contiguous():  # traced strides: what ATen's det/slogdet factorize depends on it
                layout.mark_contiguous(v)
            param_input[v.id] = i
            env[node] = v
            if x.device.type == "cpu":
                host_inputs.add(i)
        elif kind == "f":
            host_inputs.add(i)
            v = b.parameter(i, torch.float64, ())
            v.wrapped = True
            env[node] = v
        elif kind == "s":
            raise Symbolic()
        else:
            env[node] = x  # ints are specialized (Dynamo guards on them)

    for i, (node, x) in enumerate(zip(placeholders, inputs)):
        if _WITH_EFFECTS is not None and _is_token(node, x):
            placeholder_index[node] = i
            env[node] = _TOKEN
        else:
            bind(node, i, x)
    constants = graph_constants(gm)
    for k, (node, x) in enumerate(constants):
        bind(node, len(inputs) + k, x)

    def val(a):
        if isinstance(a, fx.Node):
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(val(x) for x in a)
        if isinstance(a, dict):
            return {k: val(x) for k, x in a.items()}
        return a

    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            continue
        if node.op == "output":
            return _finish(b, node, env, param_input, mutated, host_inputs, len(inputs) + len(constants), ops,
                           saved_start, checked)
        if node.op != "call_function":
            raise Unsupported(f"{node.op} {node.target}", "only call_function nodes are lowered")
        target = node.target
        name = _op_name(target)
        if name not in ops:
            ops.append(name)
        if target is operator.getitem:
            seq, idx = val(node.args[0]), node.args[1]
            env[node] = seq[idx]
            continue
        if target is _WITH_EFFECTS or target in _CHECKED_EFFECTS:
            effect = target is _WITH_EFFECTS
            op = node.args[1] if effect else target
            if op not in _CHECKED_EFFECTS:
                raise Unsupported(f"with_effects({_op_name(op)})", "an op with side effects")
            tensor = val(node.args[2 if effect else 0])
            if not isinstance(tensor, Value):
                raise Unsupported(_op_name(op), "checks a value the graph does not compute")
            checked.append(tensor)
            env[node] = (_TOKEN,) if effect else None  # the new token; the check returns nothing
            continue
        if not isinstance(target, torch._ops.OpOverload):
            args, kwargs = val(node.args), val(node.kwargs)
            if any(isinstance(a, Value) for a in (*args, *kwargs.values())):
                raise Unsupported(name, "a Python function of tensor values")
            env[node] = target(*args, **kwargs)  # arithmetic on (specialized) sizes
            continue
        if target in _NO_OPS:
            env[node] = None
            continue
        if target in _IDENTITY:
            env[node] = val(node.args[0])
            continue
        if target in _EMPTY:
            traced = node.meta.get("val")
            if not isinstance(traced, torch.Tensor):
                raise Unsupported(name, "no traced result")
            shape = tuple(_concrete_int(s) for s in traced.shape)
            if traced.dtype.is_complex:
                part = real_dtype(traced.dtype)
                env[node] = ComplexValue(b.full(0, part, shape), b.full(0, part, shape))
            else:
                env[node] = b.full(0, traced.dtype, shape)
            continue
        if target in (aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default):
            x = val(node.args[0])
            env[node] = x.shape[node.args[1]] if target is aten.sym_size.int else (
                x.numel() if target is aten.sym_numel.default else _stride(x.shape)[node.args[1]])
            continue
        schema = target._schema
        full = normalize_args(schema, node.args, node.kwargs)
        args = [val(a) for a in full]
        try:
            returns, mutations = apply_lowering(b, target, args)
        except NotImplementedError as e:
            raise Unsupported(name, str(e)) from e
        for i, nv in mutations:
            src = full[i]
            if not isinstance(src, fx.Node) or isinstance(nv, list):
                raise Unsupported(name, "mutates a tensor list or a non-node argument")
            env[src] = nv
            if src in placeholder_index:
                mutated[placeholder_index[src]] = nv

        def resolve(r):
            if isinstance(r, tuple) and r and r[0] == "arg":
                return env[full[r[1]]] if isinstance(full[r[1]], fx.Node) else args[r[1]]
            return r

        if len(schema.returns) == 0:
            env[node] = None
        elif len(schema.returns) == 1:
            env[node] = resolve(returns[0])
        else:
            env[node] = tuple(resolve(r) for r in returns)
        _check_meta(name, node, env[node])
    raise Unsupported("graph", "no output node")


def _stride(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return out[::-1]


# Batch norms whose saved mean and inverse std (results 1 and 2) CPU leaves empty in eval mode,
# where PyTorch's meta functions give them [C]; the lowerings follow CPU.
_EVAL_BATCH_NORMS = {"aten::native_batch_norm.default", "aten::_native_batch_norm_legit_functional.default",
                     "aten::_native_batch_norm_legit_no_training.default", "aten::_native_batch_norm_legit.default",
                     "aten::_native_batch_norm_legit.no_stats"}


def _check_meta(name: str, node: fx.Node, got) -> None:
    """A lowering whose result disagrees with the traced shape/dtype is not trusted."""
    want = node.meta.get("val")
    multi = isinstance(want, (list, tuple)) and isinstance(got, (list, tuple))
    pairs = list(enumerate(zip(want, got))) if multi else [(0, (want, got))]
    if multi:
        # Only results the graph reads must agree: PyTorch's meta functions and kernels differ on
        # some unused auxiliary results (eval batch norm's saved mean: [C] traced, [0] from CPU).
        used = {u.args[1] for u in node.users if u.target is operator.getitem}
        pairs = [p for p in pairs if p[0] in used]
    for k, (w, g) in pairs:
        if not (isinstance(w, torch.Tensor) and isinstance(g, (Value, ComplexValue))):
            continue
        if multi and k in (1, 2) and name in _EVAL_BATCH_NORMS and g.numel() == 0:
            continue  # eval batch norm's saved statistics, read: empty as CPU returns them
        shape = tuple(int(s) if not isinstance(s, torch.SymInt) else -1 for s in w.shape)
        if w.dtype != g.dtype or any(s != -1 and s != t for s, t in zip(shape, g.shape)) or len(shape) != g.rank:
            raise Unsupported(name, f"lowered to {g.dtype}{list(g.shape)}, traced {w.dtype}{list(w.shape)}")


# Views that change the value (PyTorch's lazy conj and neg bits): returned as computed values,
# since a view of the memory would lose the bit.
_MATH_BIT_VIEWS = {aten._conj.default, aten._neg_view.default}


def _is_view_op(n: object) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and \
        isinstance(n.target, torch._ops.OpOverload) and n.target.is_view and n.target not in _MATH_BIT_VIEWS


def _view_base(r: fx.Node, through_items: bool) -> object:
    """The node a chain of ATen views ending at r starts from (r itself if r is no view);
    through_items: also through the items of multi-result view ops (split, unbind)."""
    n: object = r
    while True:
        if _is_view_op(n):
            n = n.args[0]
        elif through_items and isinstance(n, fx.Node) and n.op == "call_function" and \
                n.target is operator.getitem and _is_view_op(n.args[0]):
            n = n.args[0].args[0]
        else:
            return n


def _view_geometry(r: fx.Node, n: fx.Node) -> list | None:
    """[sizes, strides, offset from n's first element, n's sizes, n's strides] of traced view r
    of traced tpu tensor n; None when either is not a tensor, the dtypes differ or a size is
    symbolic (a graph traced with symbolic sizes keeps its copies)."""
    out_val, base_val = r.meta.get("val"), n.meta.get("val")
    if not (isinstance(out_val, torch.Tensor) and isinstance(base_val, torch.Tensor)) or \
            out_val.dtype != base_val.dtype or base_val.device.type != "tpu":
        return None
    geometry = (*out_val.shape, *out_val.stride(), out_val.storage_offset(), base_val.storage_offset(),
                *base_val.shape, *base_val.stride())
    if any(isinstance(x, torch.SymInt) for x in geometry):
        return None
    return [list(out_val.shape), list(out_val.stride()), out_val.storage_offset() - base_val.storage_offset(),
            list(base_val.shape), list(base_val.stride())]


def _input_view(r: fx.Node, env: dict, param_input: dict[int, int], mutated: dict[int, Value]) -> tuple | None:
    """A ("v", ...) return when output r is a chain of ATen views of a tpu input, else None.

    AOTAutograd's forward returns such views as saved activations (``t(weight)`` for every
    linear layer's backward); returned as views, they cost neither a copy per step nor a second
    copy of the weights in memory, and alias the input as they do in eager mode. An input the
    graph mutates is excluded: the view must show the value before the mutation.
    """
    n = _view_base(r, through_items=False)
    base = env.get(n) if n is not r and isinstance(n, fx.Node) and n.op == "placeholder" else None
    if not isinstance(base, (Value, ComplexValue)) or base.id not in param_input or param_input[base.id] in mutated:
        return None
    geometry = _view_geometry(r, n)
    return None if geometry is None else ("v", param_input[base.id], *geometry)


def _computed_view(r: fx.Node, env: dict, param_input: dict[int, int]) -> tuple[Value, list] | None:
    """(base value, view geometry) when output r is a chain of ATen views of a value the graph
    computes, also through the items of split-like view ops, else None.

    For saved activations: AOTAutograd saves q, k and v as transposed slices of one projection
    (``qkv.view(...).split(...)[i].view(...).transpose(1, 2)``); returned as new tensors they
    are copies (three per attention layer and step), while the projection computed straight into
    a new tensor and viewed three times costs nothing. The base must be traced contiguous (new
    tensors are allocated so).
    """
    n = _view_base(r, through_items=True)
    if n is r or not isinstance(n, fx.Node) or n.op != "call_function":
        return None
    base = env.get(n)
    if not isinstance(base, (Value, ComplexValue)) or base.id in param_input:
        return None
    geometry = _view_geometry(r, n)
    if geometry is None or geometry[4] != _stride(tuple(geometry[3])):
        return None
    return base, geometry


# IR ops whose host kernels may return a view of their operand (or the operand itself): a value
# computed by one of them from an input reads the input's memory whenever it is read. The host
# executor's memory classes use the same list (executor.cpp, in_memory).
_ALIASING_OPS = {OP_ID[k] for k in ("reshape", "transpose", "broadcast_in_dim", "slice", "dynamic_slice", "convert")}


def _readers(b: GraphBuilder) -> list[list[int]]:
    """Per node, the nodes that read it, in node order."""
    readers: list[list[int]] = [[] for _ in b.nodes]
    for i, node in enumerate(b.nodes):
        for o in node[1]:
            readers[o].append(i)
    return readers


def _needs_snapshot(b: GraphBuilder, readers: list[list[int]], param: int, written: int) -> bool:
    """Whether input `param`, which node `written` overwrites, is still read after the write.

    The host runtime runs every read placed before an output node (in node order) before it
    writes that output (executor.h), so only a reader placed after `written`, of the input or
    of a view of it, needs the input bound as a copy (snapshot). AOTAutograd's copy_ epilogues
    (an optimizer's parameters and moments) are almost never read after their new value.
    """
    todo = [param]
    while todo:
        for r in readers[todo.pop()]:
            if r > written or (r == written and b.nodes[r][0] in _ALIASING_OPS):
                return True
            if b.nodes[r][0] in _ALIASING_OPS:
                todo.append(r)
    return False


def _reads_only(b: GraphBuilder, value: Value, bindings: set[int]) -> bool:
    """Whether value depends on no parameter outside bindings (nor on the random state)."""
    parameter = OP_ID["parameter"]
    seen, todo = set(), [value.id]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        op, operands, _, _, iattrs, _ = b.nodes[i]
        if op == parameter and iattrs[0] not in bindings:
            return False
        todo.extend(operands)
    return True


_COMPLEX_CODES = {torch.complex64: 9, torch.complex128: 10}  # c10::ScalarType codes


def _finish(b: GraphBuilder, out_node: fx.Node, env: dict, param_input: dict[int, int], mutated: dict[int, Value],
            host_inputs: set[int], num_inputs: int, ops: list[str], saved_start: int | None = None,
            checked: Sequence[Value] = ()) -> LoweredGraph:
    outputs: list[tuple] = []
    returns: list[tuple] = []
    results = out_node.args[0]

    new_of: dict[object, int] = {}  # a Value's node id, or ("c", id()) of a ComplexValue

    def new_index(v: Value | ComplexValue) -> int:
        key = v.id if isinstance(v, Value) else ("c", id(v))
        if key not in new_of:
            new_of[key] = len(new_of)
            if isinstance(v, ComplexValue):  # a complex new tensor: its view_as_real node
                outputs.append((to_pair(b, v).id, -1, _COMPLEX_CODES[v.dtype]))
            else:
                outputs.append((v.id, -1))
        return new_of[key]

    for k, r in enumerate(results if isinstance(results, (list, tuple)) else [results]):
        v = env[r] if isinstance(r, fx.Node) else r
        if isinstance(v, (Value, ComplexValue)):
            if v.id in param_input:
                returns.append(("i", param_input[v.id]))
                continue
            view = _input_view(r, env, param_input, mutated)
            if view is not None:
                returns.append(view)
                continue
            saved = saved_start is not None and k >= saved_start
            if saved and (computed := _computed_view(r, env, param_input)) is not None:
                base, geometry = computed
                returns.append(("w", new_index(base), *geometry))
                continue
            returns.append(("n", new_index(v)))
        elif v is None or isinstance(v, (bool, int, float)):
            returns.append(("c", v))
        elif v is _TOKEN:
            returns.append(("c", None))  # AOTAutograd's wrapper drops returned tokens
        else:
            raise Unsupported("output", f"returns a {type(v).__name__}")
    for v in checked:
        returns.append(("i", param_input[v.id]) if v.id in param_input else ("n", new_index(v)))
    for i, v in list(mutated.items()):  # a complex input is written through its view_as_real
        if isinstance(v, ComplexValue):
            mutated[i] = to_pair(b, v)
    host_outputs: list[tuple[int, int]] = []
    readers = _readers(b) if mutated else []
    input_param = {i: p for p, i in param_input.items()}
    for i, v in mutated.items():
        if i not in host_inputs:
            outputs.append((v.id, i, _needs_snapshot(b, readers, input_param[i], v.id)))
        elif isinstance(v, Value) and _reads_only(b, v, host_inputs):
            # A CPU scalar the graph mutates (an optimizer's step count, `step += 1`): its new
            # value is computed on the host as the program is enqueued, so nobody waits for it.
            host_outputs.append((v.id, i))
        else:
            raise Unsupported("copy_", f"writes CPU input {i} from tpu values (a host read inside the graph)")
    return LoweredGraph(b.serialize(), outputs, returns, b.rng_counters, num_inputs, ops, host_outputs)
