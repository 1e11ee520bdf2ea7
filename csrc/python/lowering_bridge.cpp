// The lowering bridge (see lowering_bridge.h).
#include "python/lowering_bridge.h"

#include <pybind11/complex.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <complex>

#include "compiler/program_serialize.h"
#include "exec/call.h"
#include "exec/mode.h"
#include "exec/output_plan.h"
#include "python/ir_convert.h"
#include "python/plan_convert.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

py::object* g_lower = nullptr;  // torch_tpu.lowering.bridge.lower_from_dispatch (leaked on purpose)

py::object tensor_desc(const at::Tensor& t, int32_t& binding, bool keys_contiguity = false) {
  if (!t.defined()) return py::none();
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    py::tuple shape(t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) shape[i] = t.size(i);
    const int bits = (t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0) | (keys_contiguity && t.is_contiguous() ? 4 : 0);
    return py::make_tuple("T", binding++, static_cast<int>(t.scalar_type()), shape, bits);
  }
  // A CPU 0-d tensor: a runtime scalar.
  auto s = t.item();
  if (s.isComplex()) {  // baked: exec/dispatch.cpp keys on its value
    auto z = s.toComplexDouble();
    return py::make_tuple("S", binding++, static_cast<int>(t.scalar_type()),
                          t.unsafeGetTensorImpl()->is_wrapped_number(), std::complex<double>(z.real(), z.imag()),
                          false);
  }
  py::object value = s.isFloatingPoint() ? py::object(py::float_(s.toDouble()))
                     : s.isBoolean()     ? py::object(py::bool_(s.toBool()))
                                         : py::object(py::int_(s.toLong()));
  bool special = (s.isFloatingPoint() && (s.toDouble() == 1.0 || (s.toDouble() == 0.0 && !std::signbit(s.toDouble())))) ||
                 (!s.isFloatingPoint() && (s.toLong() == 1 || s.toLong() == 0));
  return py::make_tuple("S", binding++, static_cast<int>(t.scalar_type()),
                        t.unsafeGetTensorImpl()->is_wrapped_number(), value, special);
}

// A Scalar argument (or one element of a Scalar[]) bound as runtime input `binding`.
py::tuple scalar_desc(const c10::Scalar& s, int32_t binding) {
  if (s.isComplex()) {
    auto z = s.toComplexDouble();
    return py::make_tuple("S", binding, static_cast<int>(c10::kComplexDouble), true,
                          std::complex<double>(z.real(), z.imag()), false);
  }
  if (s.isFloatingPoint()) {
    double d = s.toDouble();
    bool special = d == 1.0 || (d == 0.0 && !std::signbit(d));
    return py::make_tuple("S", binding, static_cast<int>(c10::kDouble), true, d, special);
  }
  if (s.isBoolean()) return py::make_tuple("S", binding, static_cast<int>(c10::kBool), true, s.toBool(), true);
  int64_t i = s.toLong();
  return py::make_tuple("S", binding, static_cast<int>(c10::kLong), true, i, i == 0 || i == 1);
}

py::list describe(const exec::OpInfo& info, c10::ArrayRef<c10::IValue> args, const exec::CallState& call) {
  py::list descs;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    int32_t binding = call.first_binding[i];
    switch (info.kinds[i]) {
      case exec::ArgKind::Tensor:
        if (v.isTensor()) {
          descs.append(tensor_desc(v.toTensor(), binding, info.keys_contiguity));
        } else if (v.isNone()) {
          descs.append(py::none());
        } else if (v.isTensorList()) {
          py::list l;
          for (const at::Tensor& t : v.toTensorList()) l.append(tensor_desc(t, binding));
          descs.append(l);
        } else {
          py::list l;
          for (const auto& e : v.toListRef()) l.append(e.isNone() ? py::none() : tensor_desc(e.toTensor(), binding));
          descs.append(l);
        }
        break;
      case exec::ArgKind::RuntimeScalar:
        descs.append(v.isNone() ? py::object(py::none()) : scalar_desc(v.toScalar(), binding));
        break;
      case exec::ArgKind::RuntimeScalarList: {
        py::list l;
        for (const auto& e : v.toListRef()) l.append(scalar_desc(e.toScalar(), binding++));
        descs.append(l);
        break;
      }
      case exec::ArgKind::Generator: descs.append(py::none()); break;
      case exec::ArgKind::Baked: descs.append(torch::jit::toPyObject(v)); break;
    }
  }
  return descs;
}

[[noreturn]] void rethrow_as_torch_error(py::error_already_set& e) {
  std::string msg = py::str(e.value());
  if (e.matches(PyExc_NotImplementedError)) TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
  if (e.matches(PyExc_IndexError)) TORCH_CHECK_INDEX(false, msg);
  if (e.matches(PyExc_TypeError)) TORCH_CHECK_TYPE(false, msg);
  if (e.matches(PyExc_ValueError)) TORCH_CHECK_VALUE(false, msg);
  TORCH_CHECK(false, msg);
}

std::shared_ptr<compiler::Program> compile_with_python(const c10::OperatorHandle& /*op*/, const exec::OpInfo& info,
                                                       c10::ArrayRef<c10::IValue> args, const exec::CallState& call) {
  py::gil_scoped_acquire gil;
  ir::Graph graph;
  exec::OutputPlan plan;
  try {
    py::tuple res = (*g_lower)(info.qualname, info.overload, describe(info, args, call));
    graph = graph_from_python(res[0].cast<py::list>());
    plan = output_plan_from_python(res[1].cast<py::list>(), res[2].cast<py::list>(), py::list());
    plan.rng_counters = res[3].cast<uint64_t>();
    plan.baked_scalars = res[4].cast<bool>();
  } catch (py::error_already_set& e) {
    if (e.matches(PyExc_NotImplementedError) && exec::cpu_fallback_enabled()) return nullptr;
    rethrow_as_torch_error(e);
  }
  py::gil_scoped_release no_gil;
  auto prog = exec::program_from_plan(std::move(graph), plan, static_cast<int32_t>(call.bindings.size()),
                                      info.qualname);
  exec::finish_program(*prog, compiler::output_nodes(*prog));
  return prog;
}

}  // namespace

void set_lowering_callback(py::object fn) {
  if (g_lower == nullptr) g_lower = new py::object();
  *g_lower = std::move(fn);
  exec::set_compile_hook(&compile_with_python);
}

}  // namespace torch_tpu::python
