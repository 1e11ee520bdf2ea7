// Python bindings for compiled mode (torch.compile(backend="tpu")): exec::CompiledGraph
// (csrc/exec/compiled.h) as _C._CompiledGraph, and the registrations user lowerings need.
// Python values become IValues here; the engine runs without the GIL.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <vector>

#include "aten/kernels.h"
#include "common/check.h"
#include "exec/call.h"
#include "exec/compiled.h"
#include "exec/disk_tier.h"
#include "python/bindings.h"
#include "python/ir_convert.h"
#include "python/plan_convert.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

// A graph's inputs: tensors, bools, ints, floats and None, in placeholder order.
std::vector<c10::IValue> graph_inputs(const py::list& inputs) {
  std::vector<c10::IValue> values;
  values.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    py::handle h = inputs[i];
    if (THPVariable_Check(h.ptr())) {
      values.emplace_back(THPVariable_Unpack(h.ptr()));
    } else if (py::isinstance<py::bool_>(h)) {
      values.emplace_back(h.cast<bool>());
    } else if (py::isinstance<py::int_>(h)) {
      values.emplace_back(h.cast<int64_t>());
    } else if (py::isinstance<py::float_>(h)) {
      values.emplace_back(h.cast<double>());
    } else {
      TPU_CHECK_TYPE(h.is_none(), "compiled graph: unsupported input ", i, " of type ",
                     std::string(py::str(py::type::handle_of(h))));
      values.emplace_back();
    }
  }
  return values;
}

py::list graph_results(const std::vector<c10::IValue>& results) {
  py::list out(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const c10::IValue& v = results[i];
    if (v.isTensor()) {
      out[i] = py::cast(v.toTensor());
    } else if (v.isBool()) {
      out[i] = py::bool_(v.toBool());
    } else if (v.isInt()) {
      out[i] = py::int_(v.toInt());
    } else if (v.isDouble()) {
      out[i] = py::float_(v.toDouble());
    } else {
      out[i] = py::none();
    }
  }
  return out;
}

}  // namespace

void init_compile_bindings(py::module_& m) {
  m.def("_padded_flat_copy", &aten::padded_flat_copy, py::arg("x"), py::arg("total"),
        "x's elements then zeros as a new 1-D tpu tensor of `total` elements, copied without a device "
        "program and queued behind x's producer (padded programs' input binding).");
  m.def("_register_lowered_op", &exec::register_lowered_op, py::arg("qualname"), py::arg("overload"),
        "Makes tpu calls of a user op go through its registered lowering.");
  m.def("_set_lowering_fingerprint", &exec::disk_tier::set_lowering_fingerprint, py::arg("name"), py::arg("overload"),
        py::arg("fingerprint"),
        "Keys an op's programs in the disk tier by its user lowering's code (schema overload name: '' for default).");
  py::class_<exec::CompiledGraph>(m, "_CompiledGraph",
                                  "One FX graph compiled as one program (torch.compile(backend='tpu')).")
      .def(py::init([](const py::list& nodes, const py::list& outputs, const py::list& returns, uint64_t rng_counters,
                       int32_t num_inputs, const std::vector<int32_t>& channels_last, const py::list& host_outputs) {
             ir::Graph graph = graph_from_python(nodes);
             exec::OutputPlan plan = output_plan_from_python(outputs, returns, host_outputs);
             plan.rng_counters = rng_counters;
             py::gil_scoped_release no_gil;
             return std::make_unique<exec::CompiledGraph>(std::move(graph), plan, num_inputs, channels_last);
           }),
           py::arg("nodes"), py::arg("outputs"), py::arg("returns"), py::arg("rng_counters"), py::arg("num_inputs"),
           py::arg("channels_last") = std::vector<int32_t>{}, py::arg("host_outputs") = py::list())
      .def(
          "run",
          [](exec::CompiledGraph& g, const py::list& inputs) {
            std::vector<c10::IValue> values = graph_inputs(inputs);
            std::vector<c10::IValue> results;
            {
              py::gil_scoped_release no_gil;
              results = g.run(values);
            }
            return graph_results(results);
          },
          py::arg("inputs"))
      .def_static("load", &exec::CompiledGraph::load, py::arg("key"), py::arg("num_inputs"),
                  py::call_guard<py::gil_scoped_release>(),
                  "The graph an earlier process stored under key (disk tier), or None.")
      .def("store", &exec::CompiledGraph::store, py::arg("key"), py::call_guard<py::gil_scoped_release>(),
           "Writes the graph to the disk tier under key.")
      .def_property_readonly("calls", &exec::CompiledGraph::calls)
      .def_property_readonly("num_nodes", &exec::CompiledGraph::num_nodes)
      .def("describe", &exec::CompiledGraph::describe);
}

}  // namespace torch_tpu::python
