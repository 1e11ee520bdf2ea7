"""The test oracle for csrc/stablehlo: run emitted StableHLO text on JAX's CPU backend.

How a module runs (the recipe a PJRT runtime follows too): parse the MLIR text in a context with
the StableHLO/CHLO dialects registered (``jax._src.interpreters.mlir.make_ir_context`` +
``jax._src.lib.mlir.ir.Module.parse``), compile it for one CPU device with
``backend.compile_and_load(module, executable_devices=DeviceList, compile_options=...)`` and call
``executable.execute(list_of_device_buffers)``, which returns one buffer per function result.

Importing this module enables JAX's 64-bit mode (the IR has i64/f64 values). It also keeps a
record of which (IR op, dtype) pairs were emitted and verified, which tools/gen_stablehlo_table.py
collects through conftest.py.
"""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import torch
from jax._src import compiler, xla_bridge
from jax._src.interpreters import mlir
from jax._src.lib import xla_client as xc
from jax._src.lib.mlir import ir

from torch_tpu import _C
from torch_tpu.ir import builder as B
from torch_tpu.ir.builder import GraphBuilder, Value

jax.config.update("jax_enable_x64", True)

# (op name, dtype name) -> "emitted" or "verified" (the table in docs/stablehlo.md).
RECORD: dict[tuple[str, str], str] = {}


def _backend():
    return xla_bridge.get_backend("cpu")


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def from_numpy(a: np.ndarray) -> torch.Tensor:
    a = np.array(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def run_module(text: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Parse, compile and run a StableHLO text module on one JAX CPU device."""
    backend = _backend()
    device = backend.devices()[0]
    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
        exe = backend.compile_and_load(module, executable_devices=xc.DeviceList((device,)), compile_options=options)
    buffers = [jax.device_put(to_numpy(t), device) for t in inputs]
    return [from_numpy(np.asarray(o)) for o in exe.execute(buffers)]


def graph_inputs(g: GraphBuilder) -> list[torch.Tensor]:
    """The emitted function's arguments for a reference-mode graph: parameter data by binding,
    then the RNG seed and offset if the graph has them (see csrc/stablehlo/emitter.h)."""
    params: dict[int, torch.Tensor] = {}
    rng = False
    for node, v in zip(g.nodes, g.values):
        if node[0] != B.OP_ID["parameter"]:
            continue
        if node[4][0] < 0:
            rng = True
        else:
            params[node[4][0]] = v.data
    inputs = [params[k] for k in sorted(params)]
    if rng:
        seed = g.reference_seed - 2**64 if g.reference_seed >= 2**63 else g.reference_seed
        inputs += [torch.tensor(seed, dtype=torch.int64), torch.tensor(g.reference_offset, dtype=torch.int64)]
    return inputs


def _key(g: GraphBuilder, node: tuple) -> tuple[str, str] | None:
    op = B.OPS[node[0]]
    if op in ("parameter",):
        return None
    # The operand dtype names the case (compare, convert, sort and argmax change the dtype).
    operand = {"select": 1, "rng_uniform": None, "rng_normal": None}.get(op, 0)
    code = g.nodes[node[1][operand]][2] if node[1] and operand is not None else node[2]
    return op, str(B.DTYPE_FROM_CODE[code]).removeprefix("torch.")


def _live_nodes(g: GraphBuilder, outs: list[Value]) -> list[tuple]:
    live = {o.id for o in outs}
    for i in range(len(g.nodes) - 1, -1, -1):
        if i in live:
            live.update(g.nodes[i][1])
    return [g.nodes[i] for i in sorted(live)]


def emit_and_run(g: GraphBuilder, outs: list[Value]) -> list[torch.Tensor]:
    text = _C._stablehlo_emit(g.serialize(), [o.id for o in outs])
    for node in _live_nodes(g, outs):
        k = _key(g, node)
        if k is not None:
            RECORD.setdefault(k, "emitted")
    return run_module(text, graph_inputs(g))


def check(g: GraphBuilder, *outs: Value, exact: bool = True, want: list[torch.Tensor] | None = None,
          **tol) -> list[torch.Tensor]:
    """Emit `outs`, run them on JAX and compare with the reference data (or `want`).

    Integer/bool results are always exact; float results are exact when `exact`, else compared
    with assert_close's default tolerances for the dtype (or the given rtol/atol)."""
    got = emit_and_run(g, list(outs))
    assert len(got) == len(outs)
    for i, (v, t) in enumerate(zip(outs, got)):
        expected = v.data if want is None else want[i]
        assert t.dtype == v.dtype and tuple(t.shape) == v.shape, (t.dtype, t.shape, v)
        if v.dtype.is_floating_point and not exact:
            torch.testing.assert_close(t, expected, equal_nan=True, **tol)
        else:
            torch.testing.assert_close(t, expected, rtol=0, atol=0, equal_nan=True)
    for node in _live_nodes(g, list(outs)):
        k = _key(g, node)
        if k is not None:
            RECORD[k] = "verified"
    return got
