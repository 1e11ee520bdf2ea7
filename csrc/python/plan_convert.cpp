// The output plan's one reader (see plan_convert.h).
#include "python/plan_convert.h"

#include <torch/csrc/utils/pybind.h>

#include <string>

#include "common/check.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

// The geometry of a ("v" | "w", index, sizes, strides, offset, base sizes, base strides) return.
compiler::BindingView binding_view(const py::tuple& t) {
  TPU_CHECK_VALUE(t.size() == 7, "output plan: a view return has 7 fields, got ", t.size());
  return {t[2].cast<std::vector<int64_t>>(), t[3].cast<std::vector<int64_t>>(), t[4].cast<int64_t>(),
          t[5].cast<std::vector<int64_t>>(), t[6].cast<std::vector<int64_t>>()};
}

// One return; `constant` receives the value of a ("c", value) return.
compiler::ReturnSpec return_from_python(const py::handle& h, c10::IValue* constant) {
  using Kind = compiler::ReturnSpec::Kind;
  auto t = h.cast<py::tuple>();
  TPU_CHECK_VALUE(t.size() >= 2, "output plan: a return has a tag and a value");
  const auto tag = t[0].cast<std::string>();
  compiler::ReturnSpec r;
  if (tag == "c") {
    r.kind = Kind::Undefined;
    py::handle v = t[1];
    if (v.is_none()) return r;
    TPU_CHECK_VALUE(constant != nullptr, "output plan: a constant return inside a list");
    if (py::isinstance<py::bool_>(v)) {
      *constant = v.cast<bool>();
    } else if (py::isinstance<py::int_>(v)) {
      *constant = v.cast<int64_t>();
    } else {
      TPU_CHECK_VALUE(py::isinstance<py::float_>(v), "output plan: a constant return of type ",
                      std::string(py::str(py::type::handle_of(v))));
      *constant = v.cast<double>();
    }
  } else if (tag == "l") {
    r.kind = Kind::List;
    for (const auto& item : t[1].cast<py::list>()) r.items.push_back(return_from_python(item, nullptr));
  } else {
    r.index = t[1].cast<int32_t>();
    if (tag == "n") {
      r.kind = Kind::New;
    } else if (tag == "i") {
      r.kind = Kind::Binding;
    } else if (tag == "v" || tag == "w") {
      r.kind = tag == "v" ? Kind::View : Kind::NewView;
      r.view = binding_view(t);
    } else {
      TPU_CHECK_VALUE(false, "output plan: unknown return tag '", tag, "'");
    }
  }
  return r;
}

}  // namespace

exec::OutputPlan output_plan_from_python(const py::list& outputs, const py::list& returns,
                                         const py::list& host_outputs) {
  exec::OutputPlan plan;
  plan.outputs.reserve(outputs.size());
  for (const auto& o : outputs) {
    auto t = o.cast<py::tuple>();
    TPU_CHECK_VALUE(t.size() == 2 || t.size() == 3, "output plan: an output is (node, target[, extra])");
    exec::OutputPlan::Output out;
    out.node = t[0].cast<int32_t>();
    out.target = t[1].cast<int32_t>();
    if (t.size() == 3 && out.target >= 0) out.snapshot = t[2].cast<bool>();
    if (t.size() == 3 && out.target < 0) out.complex_dtype = static_cast<c10::ScalarType>(t[2].cast<int>());
    plan.outputs.push_back(out);
  }
  plan.returns.reserve(returns.size());
  plan.constants.resize(returns.size());
  for (size_t k = 0; k < returns.size(); ++k) plan.returns.push_back(return_from_python(returns[k], &plan.constants[k]));
  for (const auto& h : host_outputs) {
    auto t = h.cast<py::tuple>();
    TPU_CHECK_VALUE(t.size() == 2, "output plan: a host output is (node, binding)");
    plan.host_outputs.emplace_back(t[0].cast<int32_t>(), t[1].cast<int32_t>());
  }
  return plan;
}

}  // namespace torch_tpu::python
