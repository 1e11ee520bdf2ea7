// Python bindings of the IR and of host execution, used by tests/ir to compare the C++ verifier,
// printer, hash and host runtime with builder.py's reference semantics. Not a user API.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include "common/check.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "python/bindings.h"
#include "python/ir_convert.h"
#include "runtime/runtime.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

template <typename T>
std::vector<T> list_of(const py::handle& seq) {
  std::vector<T> out;
  for (const py::handle& h : seq) out.push_back(h.cast<T>());
  return out;
}

runtime::Binding binding_from_python(const py::handle& obj, size_t index) {
  runtime::Binding b;
  if (THPVariable_Check(obj.ptr())) {
    const at::Tensor& t = THPVariable_Unpack(obj.ptr());
    TPU_CHECK_VALUE(t.device().is_cpu(), "_ir_run_host: input ", index,
                    " must be a CPU tensor, got ", t.device());
    b.kind = runtime::Binding::Kind::Tensor;
    b.dtype = t.scalar_type();
    b.data = t.numel() ? const_cast<void*>(t.const_data_ptr()) : nullptr;
    b.sizes.assign(t.sizes().begin(), t.sizes().end());
    b.strides.assign(t.strides().begin(), t.strides().end());
    return b;
  }
  b.kind = runtime::Binding::Kind::Scalar;
  if (py::isinstance<py::bool_>(obj)) {  // before int: bool is an int subclass
    b.dtype = at::kBool;
    b.i = obj.cast<bool>();
  } else if (py::isinstance<py::int_>(obj)) {
    b.dtype = at::kLong;
    b.i = obj.cast<int64_t>();
  } else if (py::isinstance<py::float_>(obj)) {
    b.dtype = at::kDouble;
    b.d = obj.cast<double>();
  } else {
    TPU_CHECK_TYPE(false, "_ir_run_host: input ", index, " must be a tensor, float, int or bool");
  }
  return b;
}

// Seeds are uint64 in the generator but may arrive as negative Python ints (int64 views).
uint64_t u64_from_python(const py::int_& v) {
  unsigned long long x = PyLong_AsUnsignedLongLongMask(v.ptr());
  if (PyErr_Occurred()) throw py::error_already_set();
  return x;
}

ir::Graph verified(const py::list& nodes) {
  ir::Graph g = graph_from_python(nodes);
  ir::verify(g);
  return g;
}

}  // namespace

ir::Graph graph_from_python(const py::list& nodes) {
  ir::Graph g;
  g.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    py::tuple t = nodes[i].cast<py::tuple>();
    TPU_CHECK_VALUE(t.size() == 6, "IR node ", i,
                    ": expected (op_id, operands, dtype, shape, iattrs, fattrs), got ", t.size(),
                    " fields");
    ir::Node n;
    auto op = t[0].cast<int64_t>();
    TPU_CHECK_VALUE(op >= 0 && op < ir::kNumOpKinds, "IR node ", i, ": invalid op id ", op);
    n.kind = static_cast<ir::OpKind>(op);
    auto code = t[2].cast<int64_t>();
    TPU_CHECK_VALUE(ir::is_valid_dtype(static_cast<int>(code)) && code == static_cast<int>(code),
                    "IR node ", i, ": invalid dtype code ", code);
    n.dtype = static_cast<ir::DType>(code);
    n.operands = list_of<int32_t>(t[1]);
    n.shape = list_of<int64_t>(t[3]);
    n.iattrs = list_of<int64_t>(t[4]);
    n.fattrs = list_of<double>(t[5]);
    g.add(std::move(n));
  }
  return g;
}

void init_ir_bindings(py::module_& m) {
  m.def(
      "_ir_verify",
      [](const py::list& nodes) {
        try {
          verified(nodes);
        } catch (const ir::VerifyError& e) {
          throw std::runtime_error(e.what());  // RuntimeError in Python
        }
      },
      py::arg("nodes"));
  m.def(
      "_ir_print", [](const py::list& nodes) { return ir::to_string(graph_from_python(nodes)); },
      py::arg("nodes"));
  m.def(
      "_ir_hash", [](const py::list& nodes) { return graph_from_python(nodes).hash(); },
      py::arg("nodes"));
  m.def("_ir_op_names", [] {
    std::vector<std::string> names;
    for (int i = 0; i < ir::kNumOpKinds; ++i)
      names.emplace_back(ir::op_name(static_cast<ir::OpKind>(i)));
    return names;
  });
  m.def(
      "_ir_run_host",
      [](const py::list& nodes, const std::vector<int32_t>& outputs, const py::list& inputs,
         const py::int_& rng_seed, const py::int_& rng_offset) {
        ir::Graph g;
        try {
          g = verified(nodes);
        } catch (const ir::VerifyError& e) {
          throw std::runtime_error(e.what());
        }
        std::vector<runtime::Binding> bindings;
        bindings.reserve(inputs.size());
        for (size_t i = 0; i < inputs.size(); ++i)
          bindings.push_back(binding_from_python(inputs[i], i));
        std::vector<at::Tensor> results;
        std::vector<runtime::OutputTarget> targets;
        for (int32_t o : outputs) {
          TPU_CHECK_VALUE(o >= 0 && o < g.size(), "_ir_run_host: output ", o, " not in the graph");
          const ir::Node& n = g.node(o);
          at::Tensor t =
              at::empty(n.shape, at::TensorOptions().dtype(static_cast<at::ScalarType>(n.dtype)));
          runtime::OutputTarget target;
          target.node = o;
          target.dest.dtype = t.scalar_type();
          target.dest.data = t.numel() ? t.mutable_data_ptr() : nullptr;
          target.dest.sizes.assign(t.sizes().begin(), t.sizes().end());
          target.dest.strides.assign(t.strides().begin(), t.strides().end());
          targets.push_back(std::move(target));
          results.push_back(std::move(t));
        }
        runtime::RngState rng{u64_from_python(rng_seed), u64_from_python(rng_offset)};
        {
          py::gil_scoped_release no_gil;
          auto exe = runtime::host_runtime().compile(g, outputs);
          exe->run(bindings, targets, rng);
        }
        return results;
      },
      py::arg("nodes"), py::arg("outputs"), py::arg("inputs"), py::arg("rng_seed") = 0,
      py::arg("rng_offset") = 0);
}

}  // namespace torch_tpu::python
