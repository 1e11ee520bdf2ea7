// torch_tpu._C: importing it registers the tpu kernels (static initializers in the core) and
// exposes the functions the Python package builds its API on.
#include <pybind11/pybind11.h>

#include "python/bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tpu native extension";
  torch_tpu::python::init_ir_bindings(m);
  torch_tpu::python::init_device_bindings(m);
  torch_tpu::python::init_exec_bindings(m);
  torch_tpu::python::init_fused_bindings(m);
  torch_tpu::python::init_cache_bindings(m);
  torch_tpu::python::init_stablehlo_bindings(m);
  torch_tpu::python::init_compile_bindings(m);
  torch_tpu::python::init_pjrt_bindings(m);
  torch_tpu::python::init_distributed_bindings(m);
  torch_tpu::python::init_profiler_bindings(m);
}
