// Fused-mode bindings: flushing, fusion diagnostics, and the user's source line for provenance.
#include <Python.h>
#include <frameobject.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <unordered_map>

#include "exec/fused.h"
#include "exec/recompiles.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

// Frames from torch's and our own package are library code: provenance names the first frame
// outside them. Classification is memoized per code object (kept alive by the memo).
bool is_library_code(PyCodeObject* code) {
  static std::unordered_map<PyCodeObject*, bool> memo;
  auto it = memo.find(code);
  if (it != memo.end()) return it->second;
  std::string file;
  if (const char* s = PyUnicode_AsUTF8(code->co_filename)) file = s;
  bool library = file.find("/torch/") != std::string::npos || file.find("/torch_tpu/") != std::string::npos ||
                 file.rfind("<frozen", 0) == 0 || file.find("/contextlib.py") != std::string::npos;
  Py_INCREF(code);
  memo.emplace(code, library);
  return library;
}

// "file:line" of a frame, interned per (code object, bytecode offset): a loop records the same
// few call sites over and over, so after the first time this is one hash lookup; the line
// number (a scan of the code's line table, slow for long functions such as the optimizers')
// is computed once per call site. Code objects stay alive through is_library_code's memo.
// Guarded by the GIL.
const std::string* line_of(PyCodeObject* code, PyFrameObject* frame) {
  static auto* sites = new std::unordered_map<PyCodeObject*, std::unordered_map<int, std::string>>();
  auto& of_code = (*sites)[code];
  const int lasti = PyFrame_GetLasti(frame);
  auto it = of_code.find(lasti);
  if (it == of_code.end()) {
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    it = of_code.emplace(lasti, std::string(file ? file : "?") + ":" + std::to_string(PyFrame_GetLineNumber(frame)))
             .first;
  }
  return &it->second;
}

const std::string* user_source_line() {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return nullptr;
  py::gil_scoped_acquire gil;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) return nullptr;
  Py_INCREF(frame);
  // The innermost frame names the line when every frame is library code; its line is only
  // looked up then.
  PyFrameObject* innermost = frame;
  Py_INCREF(innermost);
  const std::string* out = nullptr;
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    if (!is_library_code(code)) out = line_of(code, frame);
    Py_DECREF(code);
    if (out != nullptr) {
      Py_DECREF(frame);
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  if (out == nullptr) {
    PyCodeObject* code = PyFrame_GetCode(innermost);
    out = line_of(code, innermost);
    Py_DECREF(code);
  }
  Py_DECREF(innermost);
  return out;
}

}  // namespace

void init_fused_bindings(py::module_& m) {
  exec::set_source_line_hook(&user_source_line);
  // cause: a flush cause's name (device::flush_cause_name), as torch_tpu.metrics() reports it.
  m.def("_fused_flush", [](int device, const std::string& cause) {
    int k = 0;
    while (k < static_cast<int>(device::FlushCause::kCount) &&
           cause != device::flush_cause_name(static_cast<device::FlushCause>(k))) {
      ++k;
    }
    if (k == static_cast<int>(device::FlushCause::kCount)) throw py::value_error("unknown flush cause: " + cause);
    py::gil_scoped_release no_gil;
    exec::fused_flush(static_cast<c10::DeviceIndex>(device), static_cast<device::FlushCause>(k));
  });
  m.def("_set_debug_fusion", [](bool enabled) { exec::set_debug_fusion(enabled); });
  m.def("_get_debug_fusion", [] { return exec::debug_fusion(); });
  m.def("_fused_metrics", [] {
    exec::FusedStats s = exec::fused_stats();
    py::dict d;
    py::dict causes;
    for (int c = 0; c < static_cast<int>(device::FlushCause::kCount); ++c) {
      if (s.flushes_by_cause[c] > 0) causes[device::flush_cause_name(static_cast<device::FlushCause>(c))] = s.flushes_by_cause[c];
    }
    uint64_t total = 0;
    for (uint64_t n : s.flushes_by_cause) total += n;
    d["flushes"] = total;
    d["flushes_by_cause"] = causes;
    d["ops_recorded"] = s.ops_recorded;
    d["ops_fused"] = s.ops_fused;
    d["graphs_compiled"] = s.graphs_compiled;
    d["graph_cache_hits"] = s.graph_cache_hits;
    d["kernels_launched"] = s.kernels_launched;
    d["stores_skipped"] = s.stores_skipped;
    d["bytes_not_materialized"] = s.bytes_not_materialized;
    d["graph_compile_seconds"] = static_cast<double>(s.compile_ns) / 1e9;
    d["largest_graph_ops"] = s.largest_graph_ops;
    py::list lines;
    for (const auto& [line, n] : exec::top_host_read_lines(10)) lines.append(py::make_tuple(line, n));
    d["host_read_flush_lines"] = lines;
    return d;
  });
  m.def("_reset_fused_metrics", [] { exec::reset_fused_stats(); });
  // The eager recompile explainer (exec/recompiles.h).
  m.def("_eager_recompiles", [] {
    exec::RecompileStats s = exec::recompile_stats();
    py::dict d, by_op;
    for (const auto& [op, n] : s.by_op) by_op[py::str(op)] = n;
    py::list recent;
    for (const auto& e : s.recent) {
      py::dict r;
      r["kind"] = e.kind;
      r["what"] = e.what;
      r["reason"] = e.reason;
      r["source"] = e.source.empty() ? py::object(py::none()) : py::object(py::str(e.source));
      recent.append(r);
    }
    d["count"] = s.count;
    d["by_op"] = by_op;
    d["recent"] = recent;
    return d;
  });
  m.def("_reset_eager_recompiles", [] { exec::reset_recompile_stats(); });
  m.def("_set_recompile_log", [](bool on) { exec::set_recompile_log(on); });
  m.def("_recompile_log", [] { return exec::recompile_log(); });
  m.def("_set_recompile_warn", [](int64_t n) { exec::set_recompile_warn(n); });
  m.def("_recompile_warn", [] { return exec::recompile_warn(); });
}

}  // namespace torch_tpu::python
