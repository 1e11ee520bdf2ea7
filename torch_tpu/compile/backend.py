"""The "tpu" Dynamo backend: AOTAutograd, then each forward/backward graph as one program.

Dynamo hands over a Torch-level FX graph; ``aot_module_simplified`` traces it to functional
ATen graphs (a joint graph split by the default partitioner when gradients are needed, one
inference graph otherwise) and calls ``_compile_graph`` for each. A graph is lowered once
(``lower_graph``) and compiled in C++ (``torch_tpu._C._CompiledGraph``); each call is then one
C++ ``run`` on the inputs list. A graph with a node the table cannot lower runs its ATen ops
eagerly instead (warned once per op, counted in ``stats()``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
import torch.fx as fx

from .. import _C
from ..lowering.registry import lookup
from .stats import counters, record_fallback
from .lower_graph import Symbolic, Unsupported, input_kind, lower_graph

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


def _program(gm: fx.GraphModule, inputs: Sequence) -> _C._CompiledGraph:
    """The compiled program for gm on inputs of this signature (lowered on a miss)."""
    key = (gm.code, _signature(inputs))
    prog = _PROGRAMS.get(key)
    if prog is not None:
        counters().graphs_reused += 1
        return prog
    lg = lower_graph(gm, inputs)
    prog = _C._CompiledGraph(lg.nodes, lg.outputs, lg.returns, lg.rng_counters, lg.num_inputs)
    if len(_PROGRAMS) >= _MAX_PROGRAMS:
        del _PROGRAMS[next(iter(_PROGRAMS))]  # oldest first; callables still hold their programs
    _PROGRAMS[key] = prog
    counters().graphs_compiled += 1
    return prog


def _boxed(fn: Callable[[list], list]) -> Callable[[list], list]:
    fn._boxed_call = True  # type: ignore[attr-defined]  # AOTAutograd passes one list of inputs
    return fn


def _eager(gm: fx.GraphModule) -> Callable[[list], list]:
    def run(args: list) -> list:
        return gm(*args)

    return _boxed(run)


class _Specializing:
    """A graph with symbolic shapes: one program per concrete input signature, made at first use."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.programs: dict[tuple, _C._CompiledGraph] = {}
        self.eager: Callable[[list], list] | None = None
        self._boxed_call = True

    def __call__(self, args: list) -> list:
        if self.eager is not None:
            return self.eager(args)
        sig = _signature(args)
        prog = self.programs.get(sig)
        if prog is None:
            try:
                prog = _program(self.gm, args)
            except Unsupported as e:
                record_fallback(e.op, str(e))
                self.eager = _eager(self.gm)
                return self.eager(args)
            counters().specializations += 1
            self.programs[sig] = prog
        return prog.run(args)


def _compile_graph(gm: fx.GraphModule, example_inputs: Sequence) -> Callable[[list], list]:
    """fw/bw/inference compiler for AOTAutograd: a boxed callable running gm."""
    try:
        prog = _program(gm, example_inputs)
    except Symbolic:
        return _Specializing(gm)
    except Unsupported as e:
        record_fallback(e.op, str(e))
        return _eager(gm)
    run = prog.run

    def call(args: list) -> list:
        return run(args)

    return _boxed(call)


@functools.cache
def decompositions() -> dict:
    """Core ATen decompositions of the ops the lowering table has no lowering for.

    Ops with a lowering stay whole (one lowering is usually tighter than its decomposition:
    layer norm, softmax, their backwards); the rest are decomposed while AOTAutograd traces.
    """
    from torch._decomp import core_aten_decompositions

    return {op: fn for op, fn in core_aten_decompositions().items()
            if isinstance(op, torch._ops.OpOverload) and lookup(op) is None}


def tpu_backend(gm: fx.GraphModule, example_inputs: Sequence, **kwargs) -> Callable:
    """The Dynamo backend registered as "tpu"."""
    from torch._functorch.aot_autograd import aot_module_simplified

    counters().graphs_seen += 1
    return aot_module_simplified(gm, example_inputs, fw_compiler=_compile_graph, bw_compiler=_compile_graph,
                                 decompositions=decompositions(), keep_inference_input_mutations=True)
