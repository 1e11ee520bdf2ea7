// Python binding of the StableHLO emitter, used by tests/stablehlo (which run the emitted module
// on JAX's CPU backend) and by tools that want to look at the StableHLO of a program; and the
// hook through which torch_tpu.jax_runtime installs the JAX runtime's engine.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "ir/verifier.h"
#include "python/bindings.h"
#include "python/ir_convert.h"
#include "runtime/jax/jax_runtime.h"
#include "stablehlo/emitter.h"

namespace py = pybind11;

namespace torch_tpu::python {

void init_stablehlo_bindings(py::module_& m) {
  m.def(
      "_stablehlo_emit",
      [](const py::list& nodes, const std::vector<int32_t>& outputs, const std::string& module_name, bool flat_tensors,
         const std::vector<int32_t>& argument_aliases, const std::vector<std::vector<int64_t>>& argument_layouts,
         const std::vector<std::tuple<int64_t, std::vector<int64_t>>>& argument_views,
         const std::vector<std::vector<int64_t>>& result_layouts,
         const std::vector<std::tuple<int64_t, std::vector<int64_t>, bool>>& result_views) {
        ir::Graph g = graph_from_python(nodes);
        stablehlo::EmitOptions options;
        options.module_name = module_name;
        options.flat_tensors = flat_tensors;
        options.argument_aliases = argument_aliases;
        options.argument_layouts = argument_layouts;
        for (const auto& [elements, strides] : argument_views) options.argument_views.push_back({elements, strides});
        options.result_layouts = result_layouts;
        for (const auto& [elements, strides, alias] : result_views)
          options.result_views.push_back({elements, strides, alias});
        try {
          return stablehlo::emit_stablehlo(g, outputs, options);
        } catch (const ir::VerifyError& e) {
          throw std::runtime_error(e.what());  // RuntimeError, as _ir_verify raises
        }
      },
      py::arg("nodes"), py::arg("outputs"), py::arg("module_name") = "torch_tpu", py::arg("flat_tensors") = false,
      py::arg("argument_aliases") = std::vector<int32_t>{},
      py::arg("argument_layouts") = std::vector<std::vector<int64_t>>{},
      py::arg("argument_views") = std::vector<std::tuple<int64_t, std::vector<int64_t>>>{},
      py::arg("result_layouts") = std::vector<std::vector<int64_t>>{},
      py::arg("result_views") = std::vector<std::tuple<int64_t, std::vector<int64_t>, bool>>{},
      "MLIR text (StableHLO) of the wire-format graph `nodes` computing `outputs`; see csrc/stablehlo/emitter.h.");
  m.def(
      "_set_jax_engine", [](const py::object& engine) { runtime::jax::set_engine(engine); }, py::arg("engine"),
      "Installs the engine of TORCH_TPU_RUNTIME=jax (torch_tpu/jax_runtime.py); see csrc/runtime/jax/jax_runtime.h.");
}

}  // namespace torch_tpu::python
