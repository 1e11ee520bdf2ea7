// Profiler bindings: the records of exec/profiler.h (python -m torch_tpu profile,
// torch_tpu.diagnose) and the allocator history of device/memory_history.h
// (torch.tpu.memory._record_memory_history / _snapshot).
#include <Python.h>
#include <frameobject.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "device/allocator.h"
#include "device/memory_history.h"
#include "exec/profiler.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

constexpr int kMaxFrames = 64;

// The frame at (code object, bytecode offset), interned: its line number (a scan of the code's
// line table) and strings are made once per call site. Code objects stay alive (referenced
// here), so their addresses are never reused. Guarded by the GIL.
const device::memory_history::Frame* interned_frame(PyCodeObject* code, PyFrameObject* frame) {
  static auto* memo = new std::unordered_map<PyCodeObject*, std::unordered_map<int, device::memory_history::Frame*>>();
  auto [it, fresh] = memo->try_emplace(code);
  if (fresh) Py_INCREF(code);
  const int lasti = PyFrame_GetLasti(frame);
  auto& at = it->second[lasti];
  if (at == nullptr) {
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* name = PyUnicode_AsUTF8(code->co_name);
    at = new device::memory_history::Frame{file ? file : "?", PyFrame_GetLineNumber(frame), name ? name : "?"};
  }
  return at;
}

struct StackHash {
  size_t operator()(const std::vector<const device::memory_history::Frame*>& v) const {
    size_t h = v.size();
    for (const auto* f : v) h = h * 1000003u ^ std::hash<const void*>()(f);
    return h;
  }
};

// The calling thread's Python stack, innermost first, interned. Threads without a Python thread
// state (stream workers) get null: they must not take the GIL (common/blocking_wait.h).
device::memory_history::Frames python_stack() {
  if (!Py_IsInitialized() || _Py_IsFinalizing() || PyGILState_GetThisThreadState() == nullptr) return nullptr;
  py::gil_scoped_acquire gil;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) return nullptr;
  static auto* stacks =
      new std::unordered_map<std::vector<const device::memory_history::Frame*>, device::memory_history::Frames,
                             StackHash>();
  std::vector<const device::memory_history::Frame*> key;
  key.reserve(16);
  Py_INCREF(frame);
  while (frame != nullptr && static_cast<int>(key.size()) < kMaxFrames) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    key.push_back(interned_frame(code, frame));
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (PyErr_Occurred()) PyErr_Clear();
  auto it = stacks->find(key);
  if (it == stacks->end()) {
    auto frames = std::make_shared<const std::vector<const device::memory_history::Frame*>>(key);
    it = stacks->emplace(std::move(key), std::move(frames)).first;
  }
  return it->second;
}

py::list frames_list(const device::memory_history::Frames& frames) {
  py::list out;
  if (!frames) return out;
  for (const auto* f : *frames) {
    py::dict d;
    d["filename"] = f->filename;
    d["line"] = f->line;
    d["name"] = f->name;
    out.append(d);
  }
  return out;
}

// "file:line" of the innermost frame outside torch, torch_tpu and the import/runpy plumbing
// (the user's allocation site), "" when every frame is library code, "-" without a Python stack
// (the autograd engine's backward thread, a worker).
std::string user_site(const device::memory_history::Frames& frames) {
  if (!frames) return "-";
  for (const auto* f : *frames) {
    const std::string& file = f->filename;
    if (file.find("/torch/") != std::string::npos || file.find("/torch_tpu/") != std::string::npos ||
        file.rfind("<frozen", 0) == 0 || file.find("/runpy.py") != std::string::npos ||
        file.find("/contextlib.py") != std::string::npos) {
      continue;
    }
    return file + ":" + std::to_string(f->line);
  }
  return "";
}

py::list site_list(const std::vector<exec::profiler::SiteCount>& sites) {
  py::list out;
  for (const auto& s : sites) out.append(py::make_tuple(s.line, s.op, s.count, s.wait_ns));
  return out;
}

}  // namespace

void init_profiler_bindings(py::module_& m) {
  device::memory_history::set_stack_hook(&python_stack);
  m.def("_profiler_set_enabled", [](bool on) { exec::profiler::set_enabled(on); });
  m.def("_profiler_enabled", [] { return exec::profiler::enabled(); });
  m.def("_profiler_reset", [] { exec::profiler::reset(); });
  m.def("_profiler_now_ns", [] { return exec::profiler::now_ns(); });
  // Each event: (name, ops, cause, start_ns, end_ns, bytes, device, stream, kernels, clusters).
  m.def("_profiler_take_device_events", [] {
    std::vector<exec::profiler::DeviceEvent> events;
    {
      py::gil_scoped_release no_gil;
      events = exec::profiler::take_device_events();
    }
    py::list out;
    for (const auto& e : events) {
      out.append(py::make_tuple(e.name, e.ops, e.cause, e.start_ns, e.end_ns, e.bytes, e.device, e.stream, e.kernels,
                                e.clusters));
    }
    return out;
  });
  // Each site: (line, op, count, wait_ns).
  m.def("_profiler_host_syncs", [] { return site_list(exec::profiler::host_syncs()); });
  m.def("_profiler_fallbacks", [] { return site_list(exec::profiler::fallbacks()); });

  m.def("_memory_record_history", [](bool on, size_t max_entries, bool stacks) {
    device::memory_history::set_recording(on, max_entries, stacks);
  });
  m.def("_memory_history_clear", [] { device::memory_history::clear(); });
  m.def("_memory_history_recording", [] { return device::memory_history::recording(); });
  // Each block: (address, size, requested_size, active, frames).
  m.def("_memory_blocks", [](int device) {
    py::list out;
    for (const auto& b : device::DeviceAllocator::get().blocks(static_cast<c10::DeviceIndex>(device))) {
      out.append(py::make_tuple(reinterpret_cast<uint64_t>(b.ptr), b.size, b.requested, b.active,
                                frames_list(b.active ? device::memory_history::frames_of(b.ptr) : nullptr)));
    }
    return out;
  });
  // Each entry: (action, address, size, device, user site): the trace without whole stacks.
  m.def("_memory_trace_sites", [] {
    std::unordered_map<const void*, std::string> memo;  // per interned stack
    py::list out;
    for (const auto& e : device::memory_history::trace()) {
      auto [it, fresh] = memo.try_emplace(e.frames.get());
      if (fresh) it->second = user_site(e.frames);
      out.append(py::make_tuple(e.action, e.addr, e.size, e.device, it->second));
    }
    return out;
  });
  // Each entry: (action, address, size, device, time_us, frames).
  m.def("_memory_trace", [] {
    py::list out;
    for (const auto& e : device::memory_history::trace()) {
      out.append(py::make_tuple(e.action, e.addr, e.size, e.device, e.time_us, frames_list(e.frames)));
    }
    return out;
  });
}

}  // namespace torch_tpu::python
