"""Lowering reuse across sizes: a per-op program miss at a new size without re-running the lowering.

A training loop whose sequence length changes every step misses the per-op program cache for
every op at every new length, and each miss runs the op's Python lowering (most of a miss's
cost, docs/notes/shape-templates.md). For most ops the lowering builds the same graph at every
size: only the sizes written into node shapes and attributes differ. This module learns that
per call signature and then writes the new sizes into the graph it learned instead of lowering.

- Signature: the op and its argument descriptions (bridge.py) with every tensor size other
  than 0 and 1 replaced by a size class: sizes equal to each other share a class, so the
  broadcast pattern, the equalities between dimensions and every non-size argument are part
  of the signature; 0 and 1 stay literal (lowerings special-case them).
- Learning: two lowerings of a signature at different sizes are compared. Every integer in
  node shapes and integer attributes must either be equal in both (a constant), equal to the
  same varying size class in both (a slot), or an affine function ``a*size + b`` of one varying
  class with integral a and b (an embedding backward's ``2*n`` rows of a ``[2, n]`` index);
  floats, op kinds, operands, dtypes, the output plan and RNG counters must be equal. Anything
  else (a size computed from two varying sizes, a different graph) marks the signature as not
  reusable.
- Confirmation: the third lowering at new sizes is compared with the graph instantiated from
  the learned one; only an exact match enables reuse, so a lowering that branches on a size
  threshold must branch the same way three times to be trusted, and an op list bounds where
  that is tried at all (pointwise ops and the listed structured ones, whose lowerings only
  check sizes against 0, 1 and each other).
- Reuse: classes that did not vary while learning are pinned to their values; the varying
  ones fill the slots. A call whose pinned classes differ is lowered as usual, and it may start
  another template of the same signature: one signature covers calls whose sizes differ in
  value but not in pattern, e.g. every linear layer of a model (``addmm`` of ``[n, 128]`` by
  ``[128, 384]`` and by ``[128, 512]``), and a template learned from two calls of different
  layers pins the token count, which changes with the next batch. Up to
  ``_MAX_LEARNERS`` pairings are followed per signature until one confirms.
TORCH_TPU_SHAPE_TEMPLATES=0 turns it off; stats() counts reuses. Under TORCH_TPU_VERIFY=1 and in
debug mode every reuse is checked against a fresh lowering and a difference raises.
"""

from __future__ import annotations

import functools

import torch

from .. import _C, config

# Structured (non-pointwise) ops whose lowerings use sizes only as shapes: matmuls, reductions,
# softmax and norms with their backward, losses, embedding, indexing by tensors, copies.
# Pointwise ops (torch.Tag.pointwise) are always eligible.
_STRUCTURED = frozenset({
    "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm",
    "aten::sum", "aten::amax", "aten::amin", "aten::mean", "aten::var", "aten::std", "aten::argmax", "aten::argmin",
    "aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data", "aten::_log_softmax_backward_data",
    "aten::native_layer_norm", "aten::native_layer_norm_backward",
    "aten::nll_loss_forward", "aten::nll_loss_backward",
    "aten::embedding", "aten::embedding_dense_backward", "aten::index_select",
    "aten::cat", "aten::copy_", "aten::_to_copy", "aten::clone", "aten::fill_", "aten::zero_",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
})

_COMPLEX_CODES = frozenset({8, 9, 10})  # complex32/64/128 in bridge._SCALAR_TYPES order
_MAX_SIGNATURES = 4096  # learning state is dropped past this many signatures (a bound, not a cache)
_MAX_LEARNERS = 4  # lowerings, candidates and templates kept per signature


class _State:
    """What is known of one signature: confirmed templates, recent lowerings and the candidates
    learned from pairs of them."""

    __slots__ = ("templates", "seen", "candidates", "dead")

    def __init__(self) -> None:
        self.templates: list[_Template] = []  # confirmed, fewest pinned classes first
        self.seen: list[tuple[list[int], tuple]] = []  # recent (sizes, lowering result)
        self.candidates: list[tuple[list[int], _Template]] = []  # (first sizes, learned from two)
        self.dead = False  # the graph depends on sizes beyond slots: always lower


class _Template:
    __slots__ = ("result", "patches", "pinned")

    def __init__(self, result: tuple, patches: list[tuple[int, int, int, int, int, int]],
                 pinned: list[tuple[int, int]]):
        self.result = result  # a lowering result at some sizes
        # (node, field 3 = shape / 4 = iattrs, position, size class, a, b): the integer there is
        # a * size + b
        self.patches = patches
        self.pinned = pinned  # (size class, value) that must hold

    def fits(self, sizes: list[int]) -> bool:
        return all(sizes[c] == v for c, v in self.pinned)


_states: dict[tuple, _State] = {}
_stats = {"reused": 0, "learned": 0, "rejected": 0}
_enabled = config.get_bool("TORCH_TPU_SHAPE_TEMPLATES")
_verify = config.get_bool("TORCH_TPU_VERIFY")  # the rule C++ reads it with (exec/compile.cpp)


def verifying() -> bool:
    """Whether reuses are checked against a fresh lowering (TORCH_TPU_VERIFY=1, debug mode)."""
    return _verify or _C._get_mode() == "debug"


def set_verify(enabled: bool) -> None:
    """Check every reuse against a fresh lowering (tests; TORCH_TPU_VERIFY=1 sets it at import)."""
    global _verify
    _verify = bool(enabled)


def check(qualname: str, overload: str, descs: list, reused: tuple, lowered: tuple) -> None:
    """Raise if a reused graph differs from the one the lowering built for the same call."""
    if reused != lowered:
        raise RuntimeError(f"torch_tpu internal error: the graph reused across sizes for {qualname}.{overload} "
                           f"differs from its lowering at {descs!r}; TORCH_TPU_SHAPE_TEMPLATES=0 avoids it "
                           "(please report)")


def stats() -> dict[str, int]:
    """Misses served from a learned graph (reused), signatures confirmed (learned) and found
    size-dependent (rejected) since start or reset()."""
    return dict(_stats)


def reset_stats() -> None:
    """Zero the counters (torch_tpu.reset_metrics); what was learned stays."""
    for k in _stats:
        _stats[k] = 0


def reset() -> None:
    """Forget every signature and zero the counters."""
    _states.clear()
    reset_stats()


def enabled() -> bool:
    """Whether lowerings are reused across sizes (per op here, per graph in torch.compile)."""
    return _enabled


def set_enabled(enabled: bool) -> None:
    """Turn reuse on or off for this process (TORCH_TPU_SHAPE_TEMPLATES sets the start value)."""
    global _enabled
    _enabled = bool(enabled)
    reset()


@functools.cache
def eligible(qualname: str, overload: str) -> bool:
    """Whether lowerings of this op overload may be reused across sizes."""
    if qualname in _STRUCTURED:
        return True
    ns, name = qualname.split("::")
    packet = getattr(getattr(torch.ops, ns, None), name, None)
    if packet is None:
        return False
    # An out= or grad_input= overload is as pointwise as its functional one (gelu.out is untagged).
    names = [overload or "default"]
    for suffix in ("_out", "out", "grad_input"):
        if names[0].endswith(suffix):
            names.append(names[0][: -len(suffix)] or "default")
    for n in names:
        op = getattr(packet, n, None)
        if op is not None and torch.Tag.pointwise in op.tags:
            return True
    return False


def _canonical(desc, classes: dict[int, int], sizes: list[int]):
    """desc with sizes replaced by classes (-1 - index); None when the call is not eligible."""
    if isinstance(desc, tuple) and desc and desc[0] == "T":
        _, binding, code, shape, bits = desc
        if code in _COMPLEX_CODES:
            return None
        labels = []
        for s in shape:
            if s <= 1:
                labels.append(s)
                continue
            c = classes.get(s)
            if c is None:
                c = classes[s] = len(sizes)
                sizes.append(s)
            labels.append(-1 - c)
        return ("T", binding, code, tuple(labels), bits)
    if isinstance(desc, tuple) and desc and desc[0] == "S":
        _, binding, code, wrapped, value, special = desc
        if code in _COMPLEX_CODES:
            return None
        # A runtime scalar: its value is not in the graph unless special (then it is constant).
        return ("S", binding, code, wrapped, value if special else None, special)
    if isinstance(desc, (list, tuple)):
        out = []
        for d in desc:
            c = _canonical(d, classes, sizes)
            if c is None and d is not None:
                return None
            out.append(c)
        return tuple(out)
    return desc


def signature(qualname: str, overload: str, descs: list) -> tuple[tuple, list[int]] | None:
    """(signature, size of each class) of a call, or None when its lowering is never reused."""
    if not _enabled or not eligible(qualname, overload):
        return None
    sizes: list[int] = []
    canon = _canonical(descs, {}, sizes)
    if canon is None or not sizes:
        return None
    return (qualname, overload, canon), sizes


def lookup(sig: tuple, sizes: list[int]) -> tuple | None:
    """The lowering result for these sizes from one of the signature's confirmed templates."""
    state = _states.get(sig)
    if state is None:
        return None
    for t in state.templates:
        if t.fits(sizes):
            _stats["reused"] += 1
            return _instantiate(t, sizes)
    return None


def observe(sig: tuple, sizes: list[int], result: tuple) -> None:
    """Learn from a lowering the bridge ran for this signature at these sizes."""
    if result[4]:  # scalars were baked in: the graph depends on values the signature drops
        return
    state = _states.get(sig)
    if state is None:
        if len(_states) >= _MAX_SIGNATURES:
            _states.clear()
        state = _states[sig] = _State()
    if state.dead or any(t.fits(sizes) for t in state.templates):
        return
    # A candidate whose pins hold is confirmed or refuted by this lowering.
    for k, (first, cand) in enumerate(state.candidates):
        if cand.fits(sizes) and sizes != first:
            if _instantiate(cand, sizes) != result:
                _reject(state)
                return
            del state.candidates[k]
            state.templates.append(cand)
            state.templates.sort(key=lambda t: len(t.pinned))
            del state.templates[_MAX_LEARNERS:]
            _stats["learned"] += 1
            break
    else:
        # Paired with the recent lowering it differs from in the most classes: the fewer
        # classes the candidate pins, the more later calls it serves.
        other = max(state.seen, key=lambda o: sum(x != y for x, y in zip(o[0], sizes)), default=None)
        if other is not None and other[0] != sizes:
            cand = _learn(*other, sizes, result)
            if cand is None:
                _reject(state)
                return
            state.candidates.append((other[0], cand))
            del state.candidates[:-_MAX_LEARNERS]
    if all(o[0] != sizes for o in state.seen):
        state.seen.append((list(sizes), result))
        del state.seen[:-_MAX_LEARNERS]


def _reject(state: _State) -> None:
    state.dead, state.seen, state.candidates = True, [], []
    _stats["rejected"] += 1


def _learn(a: list[int], ra: tuple, b: list[int], rb: tuple) -> _Template | None:
    """The template two lowerings at sizes a and b agree on, or None."""
    nodes_a, outputs_a, codes_a, rng_a, _ = ra
    nodes_b, outputs_b, codes_b, rng_b, _ = rb
    if len(a) != len(b) or rng_a != rng_b or outputs_a != outputs_b or codes_a != codes_b:
        return None
    if len(nodes_a) != len(nodes_b):
        return None
    varying = {}  # (value at a, value at b) -> class
    for c, (va, vb) in enumerate(zip(a, b)):
        if va != vb:
            varying.setdefault((va, vb), c)
    patches: list[tuple[int, int, int, int, int, int]] = []
    for i, (na, nb) in enumerate(zip(nodes_a, nodes_b)):
        if na == nb:
            continue
        # (op, operands, dtype code, shape, iattrs, fattrs): only shapes and iattrs may differ.
        if na[0] != nb[0] or na[1] != nb[1] or na[2] != nb[2] or na[5] != nb[5]:
            return None
        for field in (3, 4):
            fa, fb = na[field], nb[field]
            if len(fa) != len(fb):
                return None
            for pos, (va, vb) in enumerate(zip(fa, fb)):
                if va == vb:
                    continue
                c = varying.get((va, vb))
                fit = (c, 1, 0) if c is not None else _affine(va, vb, varying)
                if fit is None:
                    return None  # not a function of one size (n * d of two varying sizes)
                patches.append((i, field, pos, *fit))
    pinned = [(c, v) for c, (v, w) in enumerate(zip(a, b)) if v == w]
    return _Template(ra, patches, pinned)


def _affine(va: int, vb: int, varying: dict[tuple[int, int], int]) -> tuple[int, int, int] | None:
    """(class, a, b) with ``a*size + b`` giving va and vb at the two lowerings' sizes of the
    class, a and b integral; the first varying class that fits (the third lowering confirms)."""
    for (sa, sb), c in varying.items():
        a, r = divmod(vb - va, sb - sa)
        if r == 0 and a != 0:
            return c, a, va - a * sa
    return None


def _instantiate(t: _Template, sizes: list[int]) -> tuple:
    nodes, outputs, codes, rng, baked = t.result
    if not t.patches:
        return t.result
    nodes = list(nodes)
    edits: dict[int, list] = {}
    for i, field, pos, c, a, b in t.patches:
        node = edits.get(i)
        if node is None:
            node = edits[i] = [list(x) if k in (3, 4) else x for k, x in enumerate(nodes[i])]
        node[field][pos] = a * sizes[c] + b
    for i, node in edits.items():
        node[3], node[4] = tuple(node[3]), tuple(node[4])
        nodes[i] = tuple(node)
    return nodes, outputs, codes, rng, baked
