// Conversion of a lowering's output plan (Python lists; the format is in exec/output_plan.h)
// into exec::OutputPlan: the only reader of that format, shared by the per-op lowering bridge
// (exec_bindings.cpp) and compiled graphs (compile_bindings.cpp). It checks the tuples' layout
// and tags (ValueError); indices are checked by exec::program_from_plan.
#pragma once

#include <pybind11/pybind11.h>

#include "exec/output_plan.h"

namespace torch_tpu::python {

exec::OutputPlan output_plan_from_python(const pybind11::list& outputs, const pybind11::list& returns,
                                         const pybind11::list& host_outputs);

}  // namespace torch_tpu::python
