// Python bindings for execution: modes, metrics, the program cache, the environment registry,
// and the lowering bridge (the compile hook that calls torch_tpu.lowering on a cache miss).
#include <pybind11/complex.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <complex>

#include "common/config.h"
#include "compiler/program_cache.h"
#include "exec/call.h"
#include "exec/metrics.h"
#include "exec/mode.h"
#include "python/bindings.h"
#include "python/ir_convert.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/native_kernels.h"
#include "runtime/host/scratch_allocator.h"

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

compiler::ReturnSpec parse_return(const py::handle& h) {
  compiler::ReturnSpec r;
  if (h.is_none()) {
    r.kind = compiler::ReturnSpec::Kind::Undefined;
  } else if (py::isinstance<py::int_>(h)) {
    r.kind = compiler::ReturnSpec::Kind::New;
    r.index = h.cast<int32_t>();
  } else if (py::isinstance<py::tuple>(h)) {
    r.kind = compiler::ReturnSpec::Kind::Binding;
    r.index = h.cast<py::tuple>()[1].cast<int32_t>();
  } else {
    r.kind = compiler::ReturnSpec::Kind::List;
    for (const auto& item : h.cast<py::list>()) r.items.push_back(parse_return(item));
  }
  return r;
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
  auto prog = std::make_shared<compiler::Program>();
  std::vector<int32_t> output_nodes;
  try {
    py::tuple res = (*g_lower)(info.qualname, info.overload, describe(info, args, call));
    prog->graph = graph_from_python(res[0].cast<py::list>());
    int32_t new_count = 0;
    for (const auto& o : res[1].cast<py::list>()) {
      auto t = o.cast<py::tuple>();
      compiler::OutputSpec spec;
      spec.node = t[0].cast<int32_t>();
      spec.target = t[1].cast<int32_t>();
      if (spec.target < 0) {
        spec.new_index = new_count++;
        std::optional<c10::ScalarType> complex_dtype;
        if (t.size() > 2) complex_dtype = static_cast<c10::ScalarType>(t[2].cast<int>());
        prog->new_tensors.push_back(compiler::new_tensor_for(prog->graph.node(spec.node), complex_dtype));
      }
      prog->outputs.push_back(spec);
      output_nodes.push_back(spec.node);
    }
    for (const auto& r : res[2].cast<py::list>()) prog->returns.push_back(parse_return(r));
    prog->rng_counters = res[3].cast<uint64_t>();
    prog->baked_scalars = res[4].cast<bool>();
  } catch (py::error_already_set& e) {
    if (e.matches(PyExc_NotImplementedError) && exec::cpu_fallback_enabled()) return nullptr;
    rethrow_as_torch_error(e);
  }
  py::gil_scoped_release no_gil;
  exec::finish_program(*prog, output_nodes);
  return prog;
}

}  // namespace

void init_exec_bindings(py::module_& m) {
  m.def("_set_lowering_callback", [](py::object fn) {
    if (g_lower == nullptr) g_lower = new py::object();
    *g_lower = std::move(fn);
    exec::set_compile_hook(&compile_with_python);
  });
  m.def("_runtime_name", [] { return std::string(exec::selected_runtime().name()); });
  m.def("_get_mode", [] { return std::string(exec::mode_name(exec::mode())); });
  m.def("_set_mode", [](const std::string& name) {
    py::gil_scoped_release no_gil;
    exec::set_mode(exec::parse_mode(name));
  });
  m.def("_get_fallback", [] { return exec::cpu_fallback_enabled(); });
  m.def("_set_fallback", [](bool enabled) { exec::set_cpu_fallback(enabled); });
  m.def("_metrics", [] {
    auto& mt = exec::metrics();
    auto cache = compiler::eager_cache().stats();
    py::dict d;
    d["ops_dispatched"] = mt.ops_dispatched.load();
    d["programs_executed"] = mt.programs_executed.load();
    d["cache_hits"] = mt.cache_hits.load();
    d["cache_misses"] = mt.cache_misses.load();
    d["programs_compiled"] = mt.programs_compiled.load();
    d["compile_seconds"] = static_cast<double>(mt.compile_ns.load()) / 1e9;
    d["bytes_to_device"] = mt.bytes_to_device.load();
    d["bytes_from_device"] = mt.bytes_from_device.load();
    d["bytes_device_to_device"] = mt.bytes_device_to_device.load();
    d["host_syncs"] = mt.host_syncs.load();
    d["cache_entries"] = cache.entries;
    d["cache_evictions"] = cache.evictions;
    py::dict fb;
    for (const auto& [op, n] : exec::fallback_counts()) fb[py::str(op)] = n;
    d["fallbacks"] = fb;
    return d;
  });
  m.def("_reset_metrics", [] { exec::reset_metrics(); });
  // metrics()["host_threads"]: kernels split across threads, work waiting threads ran.
  m.def("_host_thread_stats", [] {
    py::dict d;
    d["kernel_splits"] = runtime::host::splits_with_helpers();
    d["waiting_thread_work"] = runtime::host::work_run_by_waiting_threads();
    return d;
  });
  m.def("_native_kernel_stats", [] {
    const runtime::host::NativeTierStats st = runtime::host::native_tier_stats();
    py::dict d;
    d["requested"] = st.requested;
    d["loaded"] = st.loaded;
    d["from_disk"] = st.from_disk;
    d["failed"] = st.failed;
    d["compile_seconds"] = static_cast<double>(st.compile_ns) / 1e9;
    d["last_error"] = st.last_error;
    return d;
  });
  m.def("_host_scratch_stats", [] {
    const runtime::host::ScratchStats st = runtime::host::scratch_stats();
    py::dict d;
    d["live_bytes"] = st.live_bytes;
    d["cached_bytes"] = st.cached_bytes;
    d["hits"] = st.hits;
    d["misses"] = st.misses;
    return d;
  });
  m.def("_clear_program_cache", [] { compiler::eager_cache().clear(); });
  m.def("_env_registry", [] {
    py::list l;
    for (const auto& v : config::registry()) l.append(py::make_tuple(v.name, v.default_value, v.doc));
    return l;
  });
}

}  // namespace torch_tpu::python
