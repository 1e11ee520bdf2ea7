// Python view of the PJRT runtime: plugin discovery and loading, client information and device
// memory statistics. Used by torch_tpu (search path at import), tests/pjrt and
// bench/device/pjrt_cuda.py.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "device/stream.h"
#include "python/bindings.h"
#include "runtime/pjrt/pjrt_runtime.h"
#include "runtime/pjrt/plugin.h"

namespace py = pybind11;

namespace torch_tpu::python {

static py::dict plugin_dict(const pjrt::Plugin& p) {
  py::dict d;
  d["path"] = p.path();
  d["api_version"] = py::make_tuple(p.major(), p.minor());
  py::dict attrs;
  for (const auto& [k, v] : p.attributes()) attrs[py::str(k)] = v;
  d["attributes"] = attrs;
  return d;
}

static py::dict client_dict(const pjrt::Client& c) {
  py::dict d = plugin_dict(c.plugin());
  d["platform"] = c.platform_name();
  d["platform_version"] = c.platform_version();
  py::list devices;
  for (const auto& dev : c.devices()) {
    py::dict x;
    x["id"] = dev.id;
    x["kind"] = dev.kind;
    x["name"] = dev.name;
    devices.append(x);
  }
  d["devices"] = devices;
  return d;
}

void init_pjrt_bindings(py::module_& m) {
  m.def("_pjrt_set_search_path", &pjrt::set_search_path, py::arg("dirs"),
        "Directories searched for PJRT plugins (torch_tpu passes sys.path at import).");
  m.def("_pjrt_discover", &pjrt::discover_plugins, "Installed PJRT plugins found in the search path, best first.");
  m.def(
      "_pjrt_candidates", [] { return pjrt::discovery_candidates(); },
      "Relative paths looked for in each search directory.");
  m.def("_pjrt_tpu_present", &pjrt::tpu_device_present,
        "Whether the machine shows a TPU device node (libtpu is auto-selected only then).");
  m.def("_pjrt_plugin_path", &pjrt::plugin_path,
        "The plugin TORCH_TPU_RUNTIME=pjrt would load (raises naming what was looked for if none).");
  m.def(
      "_pjrt_load", [](const std::string& path) { return plugin_dict(*pjrt::Plugin::load(path)); }, py::arg("path"),
      "Loads and initializes a PJRT plugin (once per path): {path, api_version, attributes}.");
  m.def(
      "_pjrt_client_info",
      [](const std::string& path, const std::string& options) {
        auto client = pjrt::Client::create(pjrt::Plugin::load(path), pjrt::parse_client_options(options));
        return client_dict(*client);
      },
      py::arg("path"), py::arg("options") = "",
      "Creates (and destroys) a client of the plugin at `path`: {platform, platform_version, devices, ...}.");
  m.def(
      "_pjrt_struct_sizes",
      [](const std::string& path) {
        py::list out;
        for (const auto& s : pjrt::probe_struct_sizes(*pjrt::Plugin::load(path)))
          out.append(py::make_tuple(s.name, s.ours, s.plugin));
        return out;
      },
      py::arg("path"),
      "[(struct, our struct_size, the plugin's minimum or -1)] for every argument struct we pass "
      "(XLA-based plugins only; see plugin.h).");
  m.def("_pjrt_check_api_version", &pjrt::check_api_version, py::arg("major"), py::arg("minor"),
        py::arg("api_struct_size"), py::arg("version_struct_size"),
        "'' when a plugin reporting these numbers is compatible, else the reason.");
  m.def(
      "_pjrt_compile_options", [] { return py::bytes(pjrt::compile_options_proto()); },
      "The serialized xla.CompileOptionsProto passed to PJRT_Client_Compile.");
  m.def(
      "_pjrt_info",
      []() -> py::object {
        pjrt::PjrtRuntime* rt = pjrt::active_pjrt_runtime();
        if (rt == nullptr) return py::none();
        py::dict d = client_dict(rt->client());
        d["executions_per_device"] = rt->executions_per_device();
        d["compiles"] = rt->compiles();
        pjrt::ExecutableCacheStats c = rt->executable_cache_stats();
        py::dict cache;
        cache["enabled"] = c.enabled;
        cache["directory"] = c.directory;
        cache["hits"] = c.hits;
        cache["misses"] = c.misses;
        cache["writes"] = c.writes;
        d["executable_cache"] = cache;
        const pjrt::TransferStats& t = rt->transfers();
        py::dict transfers;
        transfers["uploads"] = t.uploads.load();
        transfers["upload_bytes"] = t.upload_bytes.load();
        transfers["downloads"] = t.downloads.load();
        transfers["download_bytes"] = t.download_bytes.load();
        d["transfers"] = transfers;
        py::dict checks;  // EmitOptions::index_checks
        checks["checked_runs"] = rt->index_checks().checked_runs.load();
        checks["failures"] = rt->index_checks().failures.load();
        d["index_checks"] = checks;
        pjrt::ResidencyStats r = rt->residency_stats();
        py::dict resident;
        resident["entries"] = r.entries;
        resident["bytes"] = r.bytes;
        resident["hits"] = r.hits;
        resident["adopted"] = r.adopted;
        resident["uploads_kept"] = r.uploads_kept;
        resident["syncs"] = r.syncs;
        resident["sync_bytes"] = r.sync_bytes;
        resident["dropped_unread"] = r.dropped_unread;
        resident["donated"] = r.donated;
        d["resident"] = resident;
        py::dict launched;
        launched["enabled"] = rt->launched().enabled();
        launched["programs"] = rt->launched().launched();
        launched["failed"] = rt->launched().failed();
        launched["pending"] = rt->launched().pending();
        d["launched"] = launched;
        const pjrt::OutOfMemoryStats& o = rt->out_of_memory();
        py::dict oom;
        oom["evictions"] = o.evictions.load();
        oom["evicted_bytes"] = o.evicted_bytes.load();
        oom["retried"] = o.retried.load();
        oom["raised"] = o.raised.load();
        d["out_of_memory"] = oom;
        return d;
      },
      "The active PJRT runtime's client ({platform, devices, executions_per_device, compiles, "
      "executable_cache, transfers, index_checks, resident, ...}), or None on another runtime.");
  m.def(
      "_pjrt_set_async",
      [](bool on) {
        pjrt::PjrtRuntime* rt = pjrt::active_pjrt_runtime();
        TORCH_CHECK(rt != nullptr, "torch_tpu: the PJRT runtime is not active (TORCH_TPU_RUNTIME)");
        py::gil_scoped_release no_gil;  // queued work may need the GIL to drop tensors
        device::synchronize_device(-1);
        rt->launched().set_enabled(on);
      },
      py::arg("on"),
      "Asynchronous completion of launched programs on (default, TORCH_TPU_PJRT_ASYNC) or off "
      "(each program waited for at its launch), for benchmarks comparing both in one process.");
  m.def(
      "_pjrt_inject_async_failure",
      [](const std::string& message) {
        pjrt::PjrtRuntime* rt = pjrt::active_pjrt_runtime();
        TORCH_CHECK(rt != nullptr, "torch_tpu: the PJRT runtime is not active (TORCH_TPU_RUNTIME)");
        rt->launched().inject_failure(message);
      },
      py::arg("message"),
      "Tests only: the next program launched asynchronously reports `message` as its device "
      "failure when it is awaited (XLA's CPU plugin has no program that fails at run time).");
  m.def(
      "_pjrt_inject_out_of_memory",
      [](int uploads, int executions) {
        pjrt::PjrtRuntime* rt = pjrt::active_pjrt_runtime();
        TORCH_CHECK(rt != nullptr, "torch_tpu: the PJRT runtime is not active (TORCH_TPU_RUNTIME)");
        rt->inject_out_of_memory(uploads, executions);
      },
      py::arg("uploads") = 0, py::arg("executions") = 0,
      "Tests only: the next `uploads` program uploads and `executions` program executions fail as "
      "a plugin's RESOURCE_EXHAUSTED would (XLA's CPU plugin allocates from host RAM).");
  m.def(
      "_pjrt_device_bytes",
      [](size_t device) -> py::object {
        pjrt::PjrtRuntime* rt = pjrt::active_pjrt_runtime();
        if (rt == nullptr || device >= rt->client().devices().size()) return py::none();
        const pjrt::DeviceBytes& b = rt->client().device_bytes(device);
        return py::make_tuple(b.current(), b.peak());
      },
      py::arg("device") = 0,
      "(current, peak) bytes of the PJRT buffers this process holds on a device (the plugin's "
      "on-device sizes), or None on another runtime.");
  m.def(
      "_pjrt_reset_peak_device_bytes",
      [](size_t device) {
        pjrt::PjrtRuntime* rt = pjrt::active_pjrt_runtime();
        if (rt != nullptr && device < rt->client().devices().size()) rt->client().device_bytes(device).reset_peak();
      },
      py::arg("device") = 0, "Resets the peak of _pjrt_device_bytes to the current figure.");
  m.def(
      "_pjrt_set_resident",
      [](bool on) {
        pjrt::PjrtRuntime* rt = pjrt::active_pjrt_runtime();
        TORCH_CHECK(rt != nullptr, "torch_tpu: the PJRT runtime is not active (TORCH_TPU_RUNTIME)");
        py::gil_scoped_release no_gil;  // queued work may need the GIL to drop tensors
        device::synchronize_device(-1);
        rt->set_resident(on);
      },
      py::arg("on"),
      "Turns the PJRT runtime's resident buffers off (device copies come back to host memory and "
      "every program stages its inputs and outputs) or on again; for benchmarks comparing both in one "
      "process. No effect with TORCH_TPU_PJRT_RESIDENT=0.");
  m.def(
      "_pjrt_memory_stats",
      [](size_t device) {
        pjrt::PjrtRuntime* rt = pjrt::active_pjrt_runtime();
        TORCH_CHECK(rt != nullptr, "torch_tpu: the PJRT runtime is not active (TORCH_TPU_RUNTIME)");
        pjrt::DeviceMemoryStats s = rt->client().memory_stats(device);
        py::dict d;
        d["bytes_in_use"] = s.bytes_in_use;
        d["peak_bytes_in_use"] = s.peak_bytes_in_use;
        d["num_allocs"] = s.num_allocs;
        d["largest_alloc_size"] = s.largest_alloc_size;
        d["bytes_limit"] = s.bytes_limit;
        d["bytes_reserved"] = s.bytes_reserved;
        d["peak_bytes_reserved"] = s.peak_bytes_reserved;
        return d;
      },
      py::arg("device") = 0, "PJRT_Device_MemoryStats of a PJRT device (-1: not reported by the plugin).");
}

}  // namespace torch_tpu::python
