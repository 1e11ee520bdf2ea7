// Pieces of the torch_tpu._C extension module, each defined in its own file.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu::python {
void init_ir_bindings(pybind11::module_& m);         // ir_bindings.cpp: graphs, host execution of IR
void init_device_bindings(pybind11::module_& m);     // device_bindings.cpp: devices, memory, streams, rng
void init_exec_bindings(pybind11::module_& m);       // exec_bindings.cpp: modes, metrics, the lowering callback
void init_fused_bindings(pybind11::module_& m);      // fused_bindings.cpp: flushing, fusion diagnostics
void init_cache_bindings(pybind11::module_& m);      // cache_bindings.cpp: the program cache's disk tier
void init_stablehlo_bindings(pybind11::module_& m);  // stablehlo_bindings.cpp: IR -> StableHLO text
void init_compile_bindings(pybind11::module_& m);    // compile_bindings.cpp: FX graphs compiled as one program
void init_pjrt_bindings(pybind11::module_& m);       // pjrt_bindings.cpp: PJRT plugins, clients, memory stats
void init_distributed_bindings(pybind11::module_& m);  // distributed_bindings.cpp: the tpu c10d backend
void init_profiler_bindings(pybind11::module_& m);   // profiler_bindings.cpp: profile records, memory history
}  // namespace torch_tpu::python
