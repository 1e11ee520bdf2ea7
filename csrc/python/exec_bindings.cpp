// Python bindings for execution: modes, metrics, the program cache, the environment registry,
// and installing the lowering bridge (python/lowering_bridge.h).
#include <torch/csrc/utils/pybind.h>

#include "common/config.h"
#include "compiler/program_cache.h"
#include "exec/call.h"
#include "exec/metrics.h"
#include "exec/mode.h"
#include "python/bindings.h"
#include "python/lowering_bridge.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/native_kernels.h"
#include "runtime/host/scratch_allocator.h"

namespace py = pybind11;

namespace torch_tpu::python {

void init_exec_bindings(py::module_& m) {
  m.def("_set_lowering_callback", &set_lowering_callback, py::arg("fn"),
        "Installs torch_tpu.lowering.bridge.lower_from_dispatch as the per-op cache miss hook.");
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
