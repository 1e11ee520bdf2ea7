// The lowering bridge: the per-op program cache's miss hook (exec::set_compile_hook) that
// describes an ATen call to torch_tpu.lowering.bridge.lower_from_dispatch (argument format:
// that module's docstring), reads back the graph (python/ir_convert.h) and its output plan
// (python/plan_convert.h), and compiles the Program. Lowering errors keep their Python type.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu::python {

// Installs `fn` (lower_from_dispatch) and the compile hook that calls it.
void set_lowering_callback(pybind11::object fn);

}  // namespace torch_tpu::python
