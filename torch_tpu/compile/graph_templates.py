"""Whole-graph lowering reuse across sizes, for torch.compile's dynamic-shape graphs.

A graph Dynamo traced with a symbolic length is specialized per concrete length
(``backend._Specializing``). Lowering the FX graph in Python is most of what a new length
costs (~30 ms for a GPT-2 forward or backward, against ~3 ms to build its host program in
C++), so a loop whose length changes every step paid it at every step until
TORCH_TPU_COMPILE_MAX_SHAPES, and then ran the graph's ops eagerly.

For a graph with one size symbol ``s`` whose ops all build the same IR at every size (the ops
``lowering.shape_templates`` trusts, plus views and shape ops), every integer of the lowered
graph is an affine function of ``s``: node shapes and attributes (``s``, ``2*s``, ``s + 1``),
view geometry, binding counts. This module learns those functions and writes a new ``s`` into
the learned graph instead of lowering again:

- Learning: two lowerings at different ``s`` must have the same structure and leaves except
  integers; every integer that differs must fit ``a*s + c`` with an integral ``a``.
- Confirmation: a third lowering, at another ``s``, must equal the graph instantiated for it;
  only then is the template used. A lowering that branches on a size threshold thus has to
  branch the same way three times, and the op list bounds where this is tried at all.
- Verification: under TORCH_TPU_VERIFY=1 and in debug mode every instance is compared with a
  fresh lowering, and a difference raises.
TORCH_TPU_SHAPE_TEMPLATES=0 turns this off together with the per-op templates.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from fractions import Fraction

import sympy
import torch
import torch.fx as fx

from ..lowering import shape_templates
from .lower_graph import LoweredGraph

# Views and shape ops: their lowerings use sizes as shapes only (or, for slices and pads, as
# offsets and lengths, which are affine in the size).
_SHAPE_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::t", "aten::transpose", "aten::permute",
    "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::split", "aten::split_with_sizes",
    "aten::select", "aten::alias", "aten::detach", "aten::lift_fresh_copy", "aten::arange", "aten::new_zeros",
    "aten::new_ones", "aten::full", "aten::zeros", "aten::ones", "aten::empty", "aten::new_empty",
    "aten::empty_strided", "aten::constant_pad_nd", "aten::slice_scatter", "aten::select_scatter",
    "aten::sym_size", "aten::sym_numel", "aten::sym_stride", "aten::_assert_scalar", "aten::_assert_tensor_metadata",
    "aten::scalar_tensor",
})


def eligible(gm: fx.GraphModule) -> bool:
    """Whether every op of gm builds the same IR at every size (only then is reuse tried)."""
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if t is operator.getitem or getattr(t, "__module__", None) == "_operator":
            continue  # picking results, arithmetic on sizes
        if not isinstance(t, torch._ops.OpOverload):
            return False
        qualname = t._schema.name
        if qualname not in _SHAPE_OPS and not shape_templates.eligible(qualname, t._overloadname):
            return False
    return True


def size_symbol(gm: fx.GraphModule) -> tuple[int, int] | None:
    """(placeholder index, dim or -1) that reads the graph's one size symbol from a call's
    arguments; None when the graph has no symbol, several, or none a placeholder states bare."""
    symbols: set[sympy.Symbol] = set()
    where: tuple[int, int] | None = None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, n in enumerate(placeholders):
        v = n.meta.get("val")
        exprs = [(-1, v)] if isinstance(v, torch.SymInt) else \
            list(enumerate(v.shape)) if isinstance(v, torch.Tensor) else []
        for d, e in exprs:
            if not isinstance(e, torch.SymInt):
                continue
            expr = e.node.expr
            symbols |= expr.free_symbols
            if isinstance(expr, sympy.Symbol) and where is None:
                where = (i, d)
    return where if len(symbols) == 1 else None


def size_functions(gm: fx.GraphModule) -> list[sympy.Expr]:
    """The non-affine functions of the size symbol in gm's traced shapes and strides (an
    attention log-sum-exp's ``32*CeilToInt(s/32)``).

    An integer of the lowered graph is fitted as ``a*f(s) + c`` with f the symbol itself or
    one of the functions (or ``a*s + b*f(s) + c``). Where one of them equals another, a
    lowering may build another graph (the builder drops a slice that keeps every element):
    such sizes form their own class (GraphTemplate)."""
    out: dict[str, sympy.Expr] = {}
    for n in gm.graph.nodes:
        vals = n.meta.get("val")
        for v in vals if isinstance(vals, (list, tuple)) else (vals,):
            ints = [v] if isinstance(v, torch.SymInt) else \
                [*v.shape, *v.stride()] if isinstance(v, torch.Tensor) and not v.is_sparse else []
            for e in ints:
                if not isinstance(e, torch.SymInt):
                    continue
                expr = e.node.expr
                if len(expr.free_symbols) != 1:  # a constant, or an unbacked size (then nothing fits)
                    continue
                (sym,) = expr.free_symbols
                if not (expr.is_polynomial(sym) and sympy.degree(expr, sym) <= 1) and _evaluates(expr, sym):
                    out.setdefault(str(expr), expr)
    return list(out.values())


def _evaluates(expr: sympy.Expr, sym: sympy.Symbol) -> bool:
    """Whether expr gives an integer at sizes (a function sympy cannot evaluate is left out:
    integers depending on it then fit nothing, and the graph is lowered per size)."""
    try:
        return all(isinstance(expr.xreplace({sym: n}), sympy.Integer) for n in (2, 33))
    except (TypeError, ValueError, ArithmeticError):
        return False


_PROBES = (2, 3, 5, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 4097)
_NEARBY_SPAN = 256  # how far nearby_sizes looks from s (each size costs a sympy evaluation, memoized)
_MAX_OBSERVATIONS = 6  # lowerings kept while a fit is ambiguous; then the graph is lowered per size


class _Bases:
    """s and the graph's size functions, evaluated (memoized) at given sizes."""

    def __init__(self, functions: list[sympy.Expr]) -> None:
        self.functions = functions
        self.symbols = [next(iter(f.free_symbols)) for f in functions]
        self.memo: dict[int, tuple[int, ...]] = {}

    def at(self, s: int) -> tuple[int, ...]:
        v = self.memo.get(s)
        if v is None:
            v = self.memo[s] = (s, *(int(f.xreplace({x: s})) for f, x in zip(self.functions, self.symbols)))
        return v

    def pattern(self, s: int) -> tuple:
        """Which of s and its functions equal an earlier one, at s (for each, the index of the
        first equal one)."""
        at = self.at(s)
        return tuple(at.index(v) for v in at)


@dataclass
class _Template:
    graph: tuple  # the lowered graph's fields at some size
    trie: dict  # position path -> ((basis, a), ...), c) at the leaves: the integer there is sum(a*basis(s)) + c


def _fields(lg: LoweredGraph) -> tuple:
    return (lg.nodes, lg.outputs, lg.returns, lg.rng_counters, lg.num_inputs, lg.ops, lg.host_outputs)


def _diff(a: object, b: object, path: tuple, out: list) -> bool:
    """Collect (path, a, b) of every integer leaf that differs; False when anything else does."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        if len(a) != len(b):
            return False
        for i, (x, y) in enumerate(zip(a, b)):
            if x is not y and x != y and not _diff(x, y, (*path, i), out):
                return False
        return True
    if type(a) is int:
        out.append((path, a, b))
        return True
    return isinstance(a, float) and a != a and b != b  # NaN leaves equal each other


def _apply(obj, trie: dict, at: tuple[int, ...]):
    items = list(obj)
    for k, sub in trie.items():
        items[k] = _value(sub, at) if isinstance(sub, tuple) else _apply(items[k], sub, at)
    return tuple(items) if isinstance(obj, tuple) else items


def _value(fit: tuple[tuple[tuple[int, int], ...], int], at: tuple[int, ...]) -> int:
    terms, c = fit
    return sum(a * at[k] for k, a in terms) + c


def _solve(rows: list[list[int]], values: list[int]) -> list[Fraction] | None:
    """x with rows @ x == values exactly (Gaussian elimination over the rationals); None when
    the rows do not determine x or no x satisfies every row."""
    n = len(rows[0])
    m = [[Fraction(v) for v in r] + [Fraction(y)] for r, y in zip(rows, values)]
    pivots = []
    for col in range(n):
        p = next((r for r in range(len(pivots), len(m)) if m[r][col] != 0), None)
        if p is None:
            return None
        m[len(pivots)], m[p] = m[p], m[len(pivots)]
        row = m[len(pivots)]
        row[:] = [v / row[col] for v in row]
        for r in range(len(m)):
            if r != len(pivots) and m[r][col] != 0:
                f = m[r][col]
                m[r] = [a - f * b for a, b in zip(m[r], row)]
        pivots.append(col)
    if any(r[n] != 0 for r in m[n:]):
        return None
    return [m[i][n] for i in range(n)]


def _fits(values: list[int], at: list[tuple[int, ...]]) -> list[tuple]:
    """Every fit ``sum(a_k * basis_k(s)) + c`` of one basis, or of s and one other basis, with
    integral coefficients through all (size, value) observations."""
    out = []
    models = [(k,) for k in range(len(at[0]))] + [(0, k) for k in range(1, len(at[0]))]
    for model in models:
        x = _solve([[a[k] for k in model] + [1] for a in at], values)
        if x is not None and all(v.denominator == 1 for v in x):
            out.append((tuple((k, int(a)) for k, a in zip(model, x) if a), int(x[-1])))
    return out


def _learn(obs: list[tuple[int, tuple]], bases: _Bases, probes: list[tuple[int, ...]]) -> _Template | None | bool:
    """The template every observation agrees on; None while the observations cannot tell the
    candidate functions apart (more are needed); False when none fits (the lowering depends on
    the size in another way)."""
    at = [bases.at(s) for s, _ in obs]
    if any(len({a[k] for a in at}) == 1 for k in range(len(at[0]))):
        return None  # a function takes one value at every observed size: constants are ambiguous
    ref = obs[0][1]
    values: dict[tuple, list[int]] = {}
    for k, (_, other) in enumerate(obs[1:], 1):
        diffs: list = []
        if not _diff(ref, other, (), diffs):
            return False
        for path, va, vb in diffs:
            values.setdefault(path, [va] * len(obs))[k] = vb
    trie: dict = {}
    for path, vs in values.items():
        fits = _fits(vs, at)
        if not fits:
            return False
        # Fits through different functions that disagree at some size: wait for a size that decides.
        if any(any(_value(f, p) != _value(fits[0], p) for p in probes) for f in fits[1:]):
            return None
        node = trie
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = fits[0]
    return _Template(ref, trie)


class _Learning:
    """One class of sizes of a graph: its lowerings while learning, then the template."""

    def __init__(self) -> None:
        self.obs: list[tuple[int, tuple]] = []
        self.template: _Template | None = None
        self.dead = False  # the lowering depends on the size beyond the fitted functions


class GraphTemplate:
    """What is known of one dynamic-shape graph, per class of sizes (_Bases.pattern): sizes at
    which no function of the size coincides with another form one class, and each pattern of
    coincidences its own (s a multiple of 32 where ``32*CeilToInt(s/32)`` is a function)."""

    def __init__(self, functions: list[sympy.Expr]) -> None:
        self.bases = _Bases(functions)
        self.classes: dict[tuple, _Learning] = {}

    def instance(self, s: int) -> LoweredGraph | None:
        """The lowered graph at size s from the learned template of its class, if any."""
        c = self.classes.get(self.bases.pattern(s))
        if c is None or c.template is None:
            return None
        return LoweredGraph(*_apply(c.template.graph, c.template.trie, self.bases.at(s)))

    def learning(self, s: int) -> bool:
        """Whether a lowering at size s would still teach the template something."""
        c = self.classes.get(self.bases.pattern(s))
        return c is None or (not c.dead and c.template is None and all(s != t for t, _ in c.obs))

    def decided(self, s: int) -> bool:
        """Whether s's class is learned or found not to fit: no lowering there teaches more."""
        c = self.classes.get(self.bases.pattern(s))
        return c is not None and (c.dead or c.template is not None)

    def generic(self) -> _Template | None:
        """The template of the class with the fewest coincidences among s and its functions
        (sizes where they differ most), if learned: what padded buckets are built from."""
        learned = [(len(set(p)), c.template) for p, c in self.classes.items() if c.template is not None]
        return max(learned, key=lambda x: x[0])[1] if learned else None

    def observe(self, s: int, lg: LoweredGraph) -> bool:
        """Learn from a lowering at size s; True when this observation completed a template.

        Three lowerings at different sizes of a class are the least a template is learned
        from: two fit the functions, the third confirms them (a lowering that branches on a
        size threshold has to branch alike three times)."""
        pattern = self.bases.pattern(s)
        c = self.classes.setdefault(pattern, _Learning())
        if c.dead or c.template is not None or any(s == t for t, _ in c.obs):
            return False
        c.obs.append((s, _fields(lg)))
        if len(c.obs) < 3:
            return False
        probes = [self.bases.at(p) for p in _PROBES if self.bases.pattern(p) == pattern]
        learned = _learn(c.obs, self.bases, probes)
        if learned is None and len(c.obs) < _MAX_OBSERVATIONS:
            return False
        if isinstance(learned, _Template):
            c.template = learned
        else:
            c.dead = True
        c.obs = []
        return c.template is not None


def check(reused: LoweredGraph, lowered: LoweredGraph, s: int) -> None:
    """Raise if a graph instantiated at size s differs from the lowering at s."""
    if _fields(reused) != _fields(lowered):
        raise RuntimeError(f"torch_tpu internal error: the compiled graph reused across sizes differs from its "
                           f"lowering at size {s}; TORCH_TPU_SHAPE_TEMPLATES=0 avoids it (please report)")


def nearby_sizes(template: GraphTemplate, s: int, count: int) -> list[int]:
    """Up to `count` sizes in s's class at which the template would still learn: where to lower
    a graph, without running it, to learn it from one call. Each is the nearest (below s first)
    at which a function of s that the sizes so far agree on changes (attention's 32-padded
    length is the same from 193 to 224), since a fit needs every function to take two values
    (_learn); when none is left to change, the nearest remaining size."""
    pattern = template.bases.pattern(s)

    def fits(t: int) -> bool:
        return t >= 1 and template.bases.pattern(t) == pattern and template.learning(t)

    # Below first: a smaller size is valid wherever s is, a larger one can pass a bound of the
    # model (its positions, a causal-mask buffer).
    order = [*range(s - 1, max(s - _NEARBY_SPAN, 0), -1), *range(s + 1, s + _NEARBY_SPAN)]
    out: list[int] = []
    while len(out) < count:
        seen = [template.bases.at(t) for t in (s, *out)]
        constant = [k for k in range(len(seen[0])) if len({a[k] for a in seen}) == 1]
        pick = next((t for t in order if t not in out and fits(t)
                     and any(template.bases.at(t)[k] != seen[0][k] for k in constant)), None)
        if pick is None:
            pick = next((t for t in order if t not in out and fits(t)), None)
        if pick is None:
            break
        out.append(pick)
    return out


def inputs_at(gm: fx.GraphModule, args: list, size_at: tuple[int, int], t: int) -> list | None:
    """gm's inputs as they would be at size t: args whose traced shape does not involve the
    size as they are, the others as uninitialized tensors of their dtype and device with the
    traced sizes and strides evaluated at t, size arguments as t's values. For lowering only
    (lowerings read metadata, never the values of tensors bound as parameters). None when a
    traced value cannot be evaluated at t."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    i, d = size_at
    v = placeholders[i].meta.get("val")
    sym = (v if d < 0 else v.shape[d]).node.expr

    def at_t(e) -> int:
        return int(e.node.expr.xreplace({sym: t})) if isinstance(e, torch.SymInt) else int(e)

    out: list = []
    for n, a in zip(placeholders, args):
        v = n.meta.get("val")
        try:
            if isinstance(v, torch.SymInt):
                out.append(at_t(v))
            elif isinstance(v, torch.Tensor) and isinstance(a, torch.Tensor) and \
                    any(isinstance(e, torch.SymInt) for e in (*v.shape, *v.stride())):
                out.append(torch.empty_strided([at_t(e) for e in v.shape], [at_t(e) for e in v.stride()],
                                               dtype=a.dtype, device=a.device))
            else:
                out.append(a)
        except (TypeError, ValueError):  # a value that is not an integer at t
            return None
    return out
