// The JAX runtime (TORCH_TPU_RUNTIME=jax): every program runs as StableHLO on JAX's CPU backend.
//
// Design: a development and test runtime that verifies the StableHLO path end to end (strict,
// fused and compiled modes, OpInfo, training) on a machine without an accelerator. It is the
// PJRT runtime's job with JAX's CPU client standing in for the plugin, reached through a Python
// engine (torch_tpu/jax_runtime.py) because jaxlib has no C++ API we could link against.
//  * Device memory stays host RAM (the device layer is the host runtime's), so the runtime only
//    translates: compile() emits the graph's live part as a StableHLO module (csrc/stablehlo,
//    live_arguments_only) and the engine parses and compiles it once; the executable keeps the
//    engine's compiled object.
//  * run() gathers each module argument into a dense tensor of the argument's dtype and shape
//    (strided device memory, a scalar, or the RNG seed/offset), calls the engine, and copies
//    each result into its destinations (through their strides, converting the dtype), in node
//    order. Every input is read before any output is written, so `snapshot` and `allow_direct`
//    hold by construction.
//  * Threads: runs come from stream worker threads (or inline from the caller); each call into
//    Python takes the GIL. A thread that waits for a stream must therefore not hold the GIL,
//    which the extension's and PyTorch's blocking calls guarantee by releasing it. Once the
//    interpreter is finalizing, run() raises instead of touching Python, and Python objects
//    owned by executables are leaked rather than released.
//  * Differences from the host runtime are StableHLO's (docs/stablehlo.md): gather/scatter clamp
//    out-of-range indices, integer division by zero does not raise, and a failing run cannot name
//    the node that failed (last_failed_node() stays -1).
#pragma once

#include "runtime/runtime.h"

namespace pybind11 {
class object;  // the header stays free of Python
}

namespace torch_tpu::runtime::jax {

// Installs the engine: a Python object with `compile(text: str) -> object` and
// `execute(compiled, args: list[torch.Tensor]) -> list[torch.Tensor]` (CPU tensors, one per
// module result). Called with the GIL held, by torch_tpu.jax_runtime.install().
void set_engine(const pybind11::object& engine);

// The runtime (lives forever). Compiling without an installed engine raises RuntimeError.
Runtime& jax_runtime();

}  // namespace torch_tpu::runtime::jax
