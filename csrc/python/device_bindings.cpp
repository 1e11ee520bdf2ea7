// Python bindings for devices, memory statistics, streams and generators (torch.tpu.*).
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "common/blocking_wait.h"
#include "common/fork_guard.h"
#include "device/allocator.h"
#include "device/device.h"
#include "device/generator.h"
#include "device/stream.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

// The GIL side of common/blocking_wait.h.
void* release_gil_if_held() {
  if (Py_IsInitialized() == 0 || PyGILState_Check() == 0) return nullptr;
  return PyEval_SaveThread();
}
void reacquire_gil(void* thread_state) { PyEval_RestoreThread(static_cast<PyThreadState*>(thread_state)); }
constexpr BlockingWaitHooks kGilHooks{release_gil_if_held, reacquire_gil};

}  // namespace

void init_device_bindings(py::module_& m) {
  using namespace torch_tpu::device;
  set_blocking_wait_hooks(&kGilHooks);
  m.def("_check_config", [] { check_config(); });
  m.def("_device_count", [] { return static_cast<int>(count()); });
  m.def("_in_bad_fork", [] { return torch_tpu::in_bad_fork(); });
  m.def("_current_device", [] { return static_cast<int>(current()); });
  m.def("_set_device", [](int i) {
    set_current(static_cast<c10::DeviceIndex>(i));
    mark_initialized();
  });
  m.def("_is_initialized", [] { return initialized(); });
  m.def("_mark_initialized", [] { mark_initialized(); });
  m.def("_check_device", [](int i) { check_index(static_cast<c10::DeviceIndex>(i)); });
  m.def("_device_name", [](int i) {
    check_index(static_cast<c10::DeviceIndex>(i));
    return name(static_cast<c10::DeviceIndex>(i));
  });
  m.def("_device_capacity", [](int i) {
    check_index(static_cast<c10::DeviceIndex>(i));
    return capacity(static_cast<c10::DeviceIndex>(i));
  });
  m.def("_synchronize", [](int i) {
    py::gil_scoped_release no_gil;
    synchronize_device(static_cast<c10::DeviceIndex>(i));
  }, py::arg("device") = -1);

  m.def("_memory_stats", [](int i) {
    auto s = DeviceAllocator::get().stats(static_cast<c10::DeviceIndex>(i));
    py::dict d;
    d["allocated_bytes.all.current"] = s.allocated;
    d["allocated_bytes.all.peak"] = s.allocated_peak;
    d["reserved_bytes.all.current"] = s.reserved;
    d["reserved_bytes.all.peak"] = s.reserved_peak;
    d["requested_bytes.all.current"] = s.requested;
    d["requested_bytes.all.peak"] = s.requested_peak;
    d["active.all.current"] = s.active_blocks;
    d["inactive_split.all.current"] = s.cached_blocks;
    d["num_alloc_retries"] = s.num_alloc_retries;
    d["num_ooms"] = s.num_ooms;
    d["allocation.all.allocated"] = s.num_allocs;
    d["allocation.all.freed"] = s.num_frees;
    d["num_cache_hits"] = s.num_cache_hits;
    return d;
  });
  m.def("_set_sync_debug_mode", [](int mode) { set_sync_debug_mode(mode); });
  m.def("_sync_debug_mode", [] { return sync_debug_mode(); });
  m.def("_set_memory_fraction", [](double fraction, int i) {
    DeviceAllocator::get().set_memory_fraction(static_cast<c10::DeviceIndex>(i), fraction);
  });
  m.def("_memory_fraction",
        [](int i) { return DeviceAllocator::get().memory_fraction(static_cast<c10::DeviceIndex>(i)); });
  m.def("_reset_peak_memory_stats", [](int i) { DeviceAllocator::get().reset_peak(static_cast<c10::DeviceIndex>(i)); });
  m.def("_reset_accumulated_memory_stats",
        [](int i) { DeviceAllocator::get().reset_accumulated(static_cast<c10::DeviceIndex>(i)); });
  m.def("_empty_cache", [](int i) {
    py::gil_scoped_release no_gil;
    synchronize_device(static_cast<c10::DeviceIndex>(i));
    DeviceAllocator::get().empty_cache(static_cast<c10::DeviceIndex>(i));
  });

  // Streams are exchanged as (stream_id, device_index) pairs; Python wraps them in torch.Stream.
  m.def("_current_stream", [](int i) {
    auto s = current_stream(static_cast<c10::DeviceIndex>(i));
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()));
  });
  m.def("_default_stream", [](int i) {
    auto s = default_stream(static_cast<c10::DeviceIndex>(i));
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()));
  });
  m.def("_set_stream", [](int64_t id, int i) {
    exchange_stream(c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(i)), id));
  });

  m.def("_default_generator", [](int i) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(i))));
  });
}

}  // namespace torch_tpu::python
