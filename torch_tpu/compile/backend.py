"""The "tpu" Dynamo backend: AOTAutograd, then each forward/backward graph as one program.

Dynamo hands over a Torch-level FX graph; ``aot_module_simplified`` traces it to functional
ATen graphs (a joint graph split by the min-cut rematerialization partitioner when gradients
are needed, one inference graph otherwise) and calls ``_compile_graph`` for each. A graph is lowered once
(``lower_graph``) and compiled in C++ (``torch_tpu._C._CompiledGraph``); each call is then one
C++ ``run`` on the inputs list. A graph with a node the table cannot lower runs its ATen ops
eagerly instead (warned once per op, counted in ``stats()``).
"""

from __future__ import annotations

import functools
import hashlib
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.fx as fx

from .. import _C
from ..lowering import shape_templates
from ..lowering.registry import is_user_lowering
from .decompositions import decompositions
from .flex_attention import inline_flex_attention
from . import graph_templates, padded_buckets
from .lower_graph import (LoweredGraph, Symbolic, Unsupported, effect_checks, graph_constants, input_kind,
                          lower_graph)
from .stats import counters, record_fallback, record_recompile

# Compiled programs by (graph code, input signature): a graph Dynamo recompiles with other
# guards but the same ATen code and inputs reuses its program.
_PROGRAMS: dict[tuple, _C._CompiledGraph] = {}
_MAX_PROGRAMS = 256


def _signature(inputs: Sequence) -> tuple:
    sig = []
    for x in inputs:
        k = input_kind(x)
        if k == "t":
            sig.append((tuple(int(s) for s in x.shape), x.dtype, x.device.type))
        elif k == "i":
            sig.append(("i", x))
        else:
            sig.append(k)
    return tuple(sig)


@functools.cache
def _graph_lowering_hash() -> str:
    """Hash of the whole-graph lowering's source (the directory version covers lowering/ and ir/)."""
    return hashlib.sha256(Path(__file__).with_name("lower_graph.py").read_bytes()).hexdigest()[:16]


def _disk_key(code: str, sig: tuple, channels_last: frozenset[int] = frozenset()) -> str:
    """The disk tier's key text: everything the lowered program depends on besides the
    lowering sources and the extension, which the disk cache's directory version covers."""
    return f"{_graph_lowering_hash()}\n{code}\n{sig!r}\n{sorted(channels_last)!r}"


def uses_user_lowering(gm: fx.GraphModule) -> bool:
    """A graph with an op whose lowering a user registered: its program is not stored on disk."""
    return any(n.op == "call_function" and is_user_lowering(n.target) for n in gm.graph.nodes)


def _symbolic(x) -> bool:
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in x.shape)
    return isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _saved_for_backward_start() -> int | None:
    """Index of the first output of the forward graph being compiled that AOTAutograd saves for
    the backward (None when unknown: no tracing context, effect tokens, another torch version).

    The forward returns (mutated inputs, user outputs, intermediate bases, rng offset, saved
    tensors, saved symints); ``fw_metadata.num_forward`` counts what precedes the saved values.
    """
    from torch._guards import TracingContext

    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    start = getattr(meta, "num_forward", None)
    return start if isinstance(start, int) and not getattr(meta, "tokens", None) else None


def _channels_last_saved(gm: fx.GraphModule, saved_start: int | None) -> frozenset[int]:
    """Positions of a forward graph's outputs to allocate channels-last: the 4-d float
    activations saved for the backward of a graph with 2-d convolutions. The host runtime runs
    such chains channels-last (kernels_contract.cpp), so the saved values are stored without a
    layout conversion and the backward reads them in that layout; the user never sees them."""
    if saved_start is None or _C._runtime_name() != "host":
        return frozenset()
    convs = (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default)

    def val_4d(n: object) -> torch.Tensor | None:
        val = n.meta.get("val") if isinstance(n, fx.Node) else None
        return val if isinstance(val, torch.Tensor) and val.dim() == 4 else None

    if not any(n.op == "call_function" and n.target in convs and val_4d(n.args[1]) is not None
               for n in gm.graph.nodes):
        return frozenset()
    results = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    results = results if isinstance(results, (list, tuple)) else [results]
    return frozenset(i for i in range(saved_start, len(results))
                     if (v := val_4d(results[i])) is not None and v.dtype.is_floating_point)


def _program(gm: fx.GraphModule, inputs: Sequence, saved_start: int | None = None,
             lower: Callable[[], LoweredGraph] | None = None) -> _C._CompiledGraph:
    """The compiled program for gm on inputs of this signature (memory, then disk, then lowered
    by ``lower``, lower_graph by default)."""
    constants = [x for _, x in graph_constants(gm)]
    sig = _signature([*inputs, *constants])
    channels_last = _channels_last_saved(gm, saved_start)
    key = (gm.code, sig, channels_last)
    prog = _PROGRAMS.get(key)
    if prog is not None:
        counters().graphs_reused += 1
        return prog
    disk_key = _disk_key(gm.code, sig, channels_last) if not uses_user_lowering(gm) else None
    prog = _C._CompiledGraph.load(disk_key, len(inputs) + len(constants)) if disk_key is not None else None
    if prog is not None:
        counters().graphs_loaded += 1
    else:
        lg = lower() if lower is not None else lower_graph(gm, inputs, saved_start)
        # A value also returned to the user (the same node, or an alias of it) keeps its layout.
        visible = {r[1] for r in lg.returns[:saved_start or 0] if r[0] == "n"}
        news = sorted({lg.returns[i][1] for i in channels_last if lg.returns[i][0] == "n"} - visible)
        prog = _C._CompiledGraph(lg.nodes, lg.outputs, lg.returns, lg.rng_counters, lg.num_inputs, news,
                                 lg.host_outputs)
        if disk_key is not None:
            prog.store(disk_key)
        counters().graphs_compiled += 1
    if len(_PROGRAMS) >= _MAX_PROGRAMS:
        del _PROGRAMS[next(iter(_PROGRAMS))]  # oldest first; callables still hold their programs
    _PROGRAMS[key] = prog
    return prog


def _boxed(fn: Callable[[list], list]) -> Callable[[list], list]:
    fn._boxed_call = True  # type: ignore[attr-defined]  # AOTAutograd passes one list of inputs
    return fn


def _runner(gm: fx.GraphModule, prog: _C._CompiledGraph) -> Callable[[list], list]:
    """prog.run on the graph's inputs and its tensor constants (bound after the inputs),
    followed by the error checks gm orders with effect tokens (linalg.cholesky's
    not-positive-definite error): the program returns the checked tensors last."""
    run = prog.run
    constants = [x for _, x in graph_constants(gm)]
    checks = effect_checks(gm)
    if constants:
        run_on_inputs = run

        def run(args: list) -> list:
            args.extend(constants)
            return run_on_inputs(args)

    if not checks:
        return run
    n = len(checks)

    def checked_run(args: list) -> list:
        outs = run(args)
        checked = outs[-n:]
        del outs[-n:]
        for t, (op, rest, kwargs) in zip(checked, checks):
            op(t, *rest, **kwargs)  # a host read of the checked tensor, as in eager mode
        return outs

    return checked_run


def _eager(gm: fx.GraphModule) -> Callable[[list], list]:
    def run(args: list) -> list:
        return gm(*args)

    return _boxed(run)


def _eager_fused(gm: fx.GraphModule) -> Callable[[list], list]:
    """gm's ATen ops recorded in fused mode (run as fused graphs when the call returns; debug
    mode keeps running one op at a time): beyond TORCH_TPU_COMPILE_MAX_SHAPES a new shape costs
    fused mode's graph composition from per-op programs, not a whole-graph lowering."""
    from ..modes import get_mode, mode

    def run(args: list) -> list:
        if get_mode() == "debug":
            return gm(*args)
        with mode("fused"):
            return gm(*args)

    return _boxed(run)


def _reshaping(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of gm whose ``view`` nodes are ``reshape``s, for running its ops eagerly: a tpu
    op may write its result in another layout than the traced one (products in their reader's
    layout, computed views returned as saved activations), where ``view`` raises and
    ``reshape`` copies. AOTAutograd's graphs are functional, so no node relies on the alias."""
    views = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default}
    if not any(n.op == "call_function" and n.target in views for n in gm.graph.nodes):
        return gm
    graph = fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    out = fx.GraphModule(gm, graph)
    for n in out.graph.nodes:
        if n.op == "call_function" and n.target in views:
            n.target = torch.ops.aten.reshape.default
    out.recompile()
    return out


_max_shapes: int | None = None


def max_shapes() -> int:
    """Concrete input signatures compiled per dynamic-shape graph (TORCH_TPU_COMPILE_MAX_SHAPES)."""
    global _max_shapes
    if _max_shapes is None:
        from ..config import get

        text = get("TORCH_TPU_COMPILE_MAX_SHAPES")
        try:
            _max_shapes = int(text)
        except ValueError:
            raise ValueError(f"TORCH_TPU_COMPILE_MAX_SHAPES={text!r} is not an integer") from None
    return _max_shapes


def set_max_shapes(n: int) -> None:
    """Python equivalent of TORCH_TPU_COMPILE_MAX_SHAPES; applies to later calls of every graph."""
    global _max_shapes
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"max_shapes must be a non-negative int, got {n!r}")
    _max_shapes = n


def _describe(sig: tuple) -> str:
    """Input signature for messages: tensor shapes as lists, size values as numbers."""
    def one(s) -> str:
        if isinstance(s, tuple) and s and isinstance(s[0], tuple):
            return str(list(s[0]))
        if isinstance(s, tuple) and len(s) == 2 and s[0] == "i":
            return str(s[1])
        return str(s)

    return ", ".join(one(s) for s in sig)


def _changes(was: tuple, now: tuple) -> str:
    """Which inputs' shapes or size values differ between two signatures, in words."""
    if len(was) != len(now):
        return f"{len(was)} -> {len(now)} inputs"
    diffs = [f"input {i} {_describe((a,))} -> {_describe((b,))}" for i, (a, b) in enumerate(zip(was, now)) if a != b]
    more = f" (and {len(diffs) - 4} more)" if len(diffs) > 4 else ""
    return ", ".join(diffs[:4]) + more


class _Specializing:
    """A graph with symbolic shapes: one program per concrete input signature, made at first use.

    At most ``max_shapes()`` signatures are lowered (each warns, with the shapes that changed,
    and counts as a recompile). A graph of one size symbol whose ops lower alike at every size
    learns from its lowerings how its IR depends on the size (graph_templates); once confirmed,
    a new size writes into the learned graph instead of lowering (counted as an instance, no
    warning), so on the host runtime every size gets a program and the limit no longer applies
    (on PJRT each size is still an XLA compile and counts). Otherwise calls with
    further signatures run the graph's ATen ops eagerly (cached per op by the current mode), so
    a stream of ever-new shapes cannot make compile time grow without bound. At most
    ``_MAX_INSTANCES`` programs per graph are kept, least recently made first out.
    """

    _MAX_INSTANCES = 64

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.programs: dict[tuple, Callable[[list], list]] = {}  # a program's run per signature
        self.programs_buckets = padded_buckets.generation()  # the bucket setting they were chosen under
        self.lowered = 0  # what the limit counts: signatures lowered (on PJRT also those instantiated)
        self.first_sig: tuple | None = None
        self.eager: Callable[[list], list] | None = None
        self.over_limit: Callable[[list], list] | None = None
        self._boxed_call = True
        self.size_at = graph_templates.size_symbol(gm) if graph_templates.eligible(gm) else None
        self.template = graph_templates.GraphTemplate(graph_templates.size_functions(gm)) \
            if self.size_at is not None else None
        self.buckets: dict[int, tuple | padded_buckets.Rejected] = {}  # bucket -> (padded graph, program)

    def _size(self, args: list) -> int | None:
        if self.size_at is None or not shape_templates.enabled():
            return None
        i, d = self.size_at
        return int(args[i]) if d < 0 else int(args[i].shape[d])

    def __call__(self, args: list) -> list:
        if self.eager is not None:
            return self.eager(args)
        if self.programs_buckets != padded_buckets.generation():
            self.programs.clear()
            self.programs_buckets = padded_buckets.generation()
        sig = _signature(args)
        run = self.programs.get(sig)
        if run is None:
            run = self._specialize(sig, args)
            if run is None:
                return self._beyond_limit(args)
        return run(args)

    def _specialize(self, sig: tuple, args: list) -> Callable[[list], list] | None:
        """A run for sig's program (bucketed, instantiated, loaded or lowered); None past the limit."""
        s = self._size(args)
        template = self.template if s is not None else None
        if template is not None and padded_buckets.buckets() is not None:
            self._learn_ahead(template, s, args)
            run = self._bucketed(template, s)
            if run is not None:
                self.programs[sig] = run
                return run
        instance = template.instance(s) if template is not None else None
        # On PJRT every size is an XLA compile, learned or not: the limit counts them all.
        if self.lowered >= max_shapes() and (instance is None or _C._runtime_name() != "host"):
            return None

        lowered: list[LoweredGraph] = []

        def lower() -> LoweredGraph:
            lg = lower_graph(self.gm, args)
            lowered.append(lg)
            if instance is not None:  # verifying: the program runs the instance that was checked
                graph_templates.check(instance, lg, s)
                return instance
            if template is not None and template.observe(s, lg):
                counters().graph_templates += 1
            return lg

        verify = instance is not None and shape_templates.verifying()
        try:
            prog = _program(self.gm, args, lower=lower if instance is None or verify else lambda: instance)
            if template is not None and instance is None and not lowered and template.learning(s):
                # Served by the memory or disk cache: the template still learns from this size
                # (else a warm cache would keep a learned graph from ever running padded).
                lower()
        except Unsupported as e:
            record_fallback(e.op, str(e))
            self.eager = _eager(self.gm)
            return self.eager
        counters().specializations += 1
        if instance is not None:
            counters().graph_instances += 1
            self.lowered += _C._runtime_name() != "host"
        else:
            self.lowered += 1
            if self.first_sig is not None:
                record_recompile("a dynamic-shape graph for new input shapes",
                                 f"{_changes(self.first_sig, sig)}; {self.lowered} of at most "
                                 f"{max_shapes()} (TORCH_TPU_COMPILE_MAX_SHAPES)", _source_line(self.gm))
            self.first_sig = self.first_sig or sig
        if len(self.programs) >= self._MAX_INSTANCES:
            del self.programs[next(iter(self.programs))]
        run = self.programs[sig] = _runner(self.gm, prog)
        return run

    def _learn_ahead(self, template: graph_templates.GraphTemplate, s: int, args: list) -> None:
        """With buckets on, learn the template at the first call: from lowerings at s and at two to
        four nearby sizes of its class (inputs made at those sizes, never run), so the first call runs
        padded instead of compiling exact programs at three learning sizes (on PJRT, an XLA
        compile each). A graph that does not learn this way goes on as before."""
        if template.generic() is not None or not template.learning(s) or effect_checks(self.gm):
            return
        # Two nearby sizes complete a fit; the other two are lowered only while it is ambiguous.
        for t in (s, *graph_templates.nearby_sizes(template, s, 4)):
            if template.decided(s):
                return
            inputs = args if t == s else graph_templates.inputs_at(self.gm, args, self.size_at, t)
            if inputs is None or not template.learning(t):
                return
            try:
                lg = lower_graph(self.gm, inputs)
            except (Unsupported, Symbolic):
                return  # the normal path lowers s and reports it
            except Exception:  # noqa: BLE001 - a size the user never ran may break a lowering
                if t == s:
                    raise
                return  # (a bound of the model); the graph learns from the sizes it runs
            if template.observe(t, lg):
                counters().graph_templates += 1

    def _bucketed(self, template: graph_templates.GraphTemplate, s: int) -> Callable[[list], list] | None:
        """A run of the padded program of s's bucket, once the graph is learned at sizes where
        s and its functions differ; None while it is not, past the last bucket, or when the
        graph cannot run padded (warned once, with the op)."""
        learned = template.generic()
        b = padded_buckets.bucket_for(s, padded_buckets.buckets() or [])
        if learned is None or b is None or effect_checks(self.gm):
            return None
        entry = self.buckets.get(b)
        if entry is None:
            try:
                pg = padded_buckets.pad_graph(learned.graph, learned.trie, template.bases.at(b),
                                              len(template.bases.at(b)), b)
            except padded_buckets.Rejected as e:
                entry = self.buckets[b] = e
                counters().bucket_rejections += 1
                if len(self.buckets) == 1:
                    warnings.warn(f"torch_tpu.compile: {_source_line(self.gm) or 'a graph'} cannot run padded to "
                                  f"buckets ({e}); it keeps one program per size", stacklevel=2)
            else:
                lg = pg.graph
                prog = _C._CompiledGraph(lg.nodes, lg.outputs, lg.returns, lg.rng_counters, lg.num_inputs, [],
                                         lg.host_outputs)
                counters().graph_buckets += 1
                entry = self.buckets[b] = (pg, prog)
        if isinstance(entry, padded_buckets.Rejected):
            return None
        pg, prog = entry
        constants = [x for _, x in graph_constants(self.gm)]
        bases = template.bases

        def run(args: list) -> list:
            size = self._size(args)
            outs = padded_buckets.run_padded(pg, prog.run, args, constants, bases.at(size))
            if shape_templates.verifying():  # the exact program for this size must agree
                exact = _runner(self.gm, _program(self.gm, args, lower=lambda: lower_graph(self.gm, args)))
                padded_buckets.check(outs, exact(list(args)), size, b)
            return outs

        return run

    def _beyond_limit(self, args: list) -> list:
        counters().shape_limit_hits += 1
        if self.over_limit is None:
            warnings.warn(f"torch_tpu.compile: a dynamic-shape graph reached TORCH_TPU_COMPILE_MAX_SHAPES="
                          f"{max_shapes()} compiled shapes; calls with other shapes run its ops eagerly",
                          stacklevel=2)
            self.over_limit = _eager_fused(_reshaping(self.gm))
        return self.over_limit(args)


def _compile_graph(gm: fx.GraphModule, example_inputs: Sequence,
                   saved_start: int | None = None) -> Callable[[list], list]:
    """fw/bw/inference compiler for AOTAutograd: a boxed callable running gm. saved_start: see
    _saved_for_backward_start (forward graphs only)."""
    if any(_symbolic(x) for x in example_inputs):
        # Checked before anything calls int() on a symbolic size: that would add a guard
        # specializing the graph, and Dynamo would recompile for every new shape.
        return _Specializing(gm)
    try:
        prog = _program(gm, example_inputs, saved_start)
    except Symbolic:
        return _Specializing(gm)
    except Unsupported as e:
        record_fallback(e.op, str(e))
        return _eager(gm)
    run = _runner(gm, prog)

    def call(args: list) -> list:
        return run(args)

    return _boxed(call)


def _compile_forward(gm: fx.GraphModule, example_inputs: Sequence) -> Callable[[list], list]:
    """AOTAutograd's forward (and inference) compiler: knows which outputs are saved."""
    return _compile_graph(gm, example_inputs, _saved_for_backward_start())


_LAST_CONTEXT: object = None  # the frame compile last counted as a recompile


def _note_recompile(gm: fx.GraphModule) -> None:
    """Counts Dynamo's re-capture of a frame it compiled before, with the guard that failed.

    Dynamo numbers the compiles of each frame (``CompileId.frame_compile_id``, 0 for the first)
    and records the first failed guard of the previous compile as ``recompile_reason`` in its
    metrics context before calling the backend. One count per frame compile: a frame split by
    graph breaks hands over several graphs.
    """
    from torch._guards import CompileContext

    global _LAST_CONTEXT
    ctx = CompileContext.try_get()
    cid = None if ctx is None else ctx.compile_id
    if cid is None or not cid.frame_compile_id or ctx is _LAST_CONTEXT:
        return
    # The context object is the frame compile's identity: ids restart after torch._dynamo.reset().
    _LAST_CONTEXT = ctx
    reason = None
    try:
        from torch._dynamo.utils import get_metrics_context

        reason = get_metrics_context()._metrics.get("recompile_reason")
    except (ImportError, AttributeError):  # another torch version: the count still holds
        pass
    record_recompile(f"{_frame_name(gm)} (compile #{cid.frame_compile_id} of this frame)",
                     reason or "guard failure (reason not reported by this torch version)", _source_line(gm))


def _source_line(gm: fx.GraphModule) -> str | None:
    """'file:line' of the user's code that the graph's first traced node came from."""
    for node in gm.graph.nodes:
        found = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
        if found:
            return f"{found[-1][0]}:{found[-1][1]}"
    return None


def _frame_name(gm: fx.GraphModule) -> str:
    """'fn (file:line)' of the compiled frame, from the first node's recorded user stack."""
    for node in gm.graph.nodes:
        m = re.search(r'File "([^"]+)", line (\d+), in (\S+)', node.meta.get("stack_trace") or "")
        if m:
            return f"{m.group(3)} ({m.group(1)}:{m.group(2)})"
    return "a compiled frame"


def tpu_backend(gm: fx.GraphModule, example_inputs: Sequence, **kwargs) -> Callable:
    """The Dynamo backend registered as "tpu"."""
    from torch._functorch.aot_autograd import aot_module_simplified

    counters().graphs_seen += 1
    _note_recompile(gm)
    inline_flex_attention(gm)
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    # Inductor's partitioner: what the backward needs is saved or recomputed by cost (views and
    # cheap elementwise chains are recomputed), not everything the forward computed saved.
    return aot_module_simplified(gm, example_inputs, fw_compiler=_compile_forward, bw_compiler=_compile_graph,
                                 partition_fn=min_cut_rematerialization_partition,
                                 decompositions=decompositions(), keep_inference_input_mutations=True)
