// Python bindings for the program cache's disk tier: configuring it at import (with the
// lowering fingerprint only Python can compute) and its statistics.
#include <torch/csrc/utils/pybind.h>

#include "compiler/disk_cache.h"
#include "python/bindings.h"
#include "runtime/host/native_kernels.h"

namespace py = pybind11;

namespace torch_tpu::python {

void init_cache_bindings(py::module_& m) {
  m.def("_configure_disk_cache", [](const std::string& fingerprint) {
    compiler::configure_disk_cache(fingerprint);
    // The host runtime's native kernels persist in the same tier (native_kernels.h).
    if (DiskCache* disk = compiler::process_disk_cache()) {
      runtime::host::set_native_kernel_store(
          {[disk](const std::vector<int64_t>& key) { return disk->load(key); },
           [disk](const std::vector<int64_t>& key, std::string_view library) { disk->store(key, library); }});
    }
  });
  m.def("_disk_cache_stats", [] {
    DiskCacheStats s;
    {
      py::gil_scoped_release no_gil;  // may scan the directory
      s = compiler::process_disk_cache_stats();
    }
    py::dict d;
    d["enabled"] = s.enabled;
    d["directory"] = s.directory;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["writes"] = s.writes;
    d["corrupt"] = s.corrupt;
    d["evictions"] = s.evictions;
    d["bytes"] = s.bytes;
    d["max_bytes"] = s.max_bytes;
    return d;
  });
}

}  // namespace torch_tpu::python
