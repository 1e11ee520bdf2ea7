// Loading a PJRT C API plugin: dlopen, GetPjrtApi, version and layout checks, initialization,
// discovery, and the one place where PJRT errors become exceptions.
//
// Design: a plugin is loaded once per path and never unloaded (PJRT plugins keep process-wide
// state, e.g. CUDA contexts and thread pools, and do not support dlclose). Loading checks, in
// order: the file exists, dlopen succeeds, the library exports GetPjrtApi, the table it returns
// reports major version c::kMajor and minor >= c::kMinMinor and a struct_size that covers every
// slot we call (c_api.h), and PJRT_Plugin_Initialize succeeds. Each failure is a c10::Error
// whose message names the path and what was wrong, so a mismatched or foreign library fails
// with a clear Python exception instead of undefined behaviour.
//
// Thread safety: load() and discovery are thread-safe; Plugin is immutable after load.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/pjrt/c_api.h"

namespace torch_tpu::pjrt {

// Checks a plugin's reported API version and the sizes of its PJRT_Api and PJRT_Api_Version
// structs against what c_api.h declares. Returns "" when compatible, else the reason (one
// sentence naming the versions). Pure; never throws (unit-tested with synthetic numbers).
std::string check_api_version(int major, int minor, size_t api_struct_size, size_t version_struct_size);

class Plugin {
 public:
  // The plugin at `path`, loaded and initialized on the first call for that path. Throws
  // c10::Error (RuntimeError) naming the path and the failure (missing file, dlopen error,
  // no GetPjrtApi symbol, version mismatch, initialization error).
  static std::shared_ptr<const Plugin> load(const std::string& path);

  const c::PJRT_Api& api() const { return *api_; }
  const std::string& path() const { return path_; }
  int major() const { return api_->pjrt_api_version.major_version; }
  int minor() const { return api_->pjrt_api_version.minor_version; }
  // Plugin attributes (xla_version, stablehlo_current_version, ...) as "name=value" strings.
  const std::vector<std::pair<std::string, std::string>>& attributes() const { return attributes_; }

  // Throws the c10::Error matching `error`'s code (INVALID_ARGUMENT: ValueError, UNIMPLEMENTED:
  // NotImplementedError, RESOURCE_EXHAUSTED: OutOfMemoryError, others: RuntimeError) with a
  // message "PJRT <what> failed (<code>): <plugin's message> [plugin <path>]", after freeing
  // `error`. No-op for a null error.
  void check(c::PJRT_Error* error, const char* what) const;
  // The error's message and code, and frees it (for paths that must not throw, e.g. destructors).
  std::string take_message(c::PJRT_Error* error, c::PJRT_Error_Code* code = nullptr) const;

  Plugin(const c::PJRT_Api* api, std::string path) : api_(api), path_(std::move(path)) {}

 private:
  const c::PJRT_Api* api_;
  std::string path_;
  std::vector<std::pair<std::string, std::string>> attributes_;
};

// For each argument struct torch_tpu passes: {name, our struct_size, the plugin's minimum (or -1
// when it could not be learned)}. Learned by calling each function with struct_size 16, which
// XLA-based plugins (jax's CUDA plugins, libtpu) refuse before reading anything else, naming the
// size they expect. A diagnostic for tests and the device check, not run at load: another
// plugin implementation might read the bogus struct. Requires an initialized plugin.
struct StructSize {
  std::string name;
  size_t ours = 0;
  long long plugin = -1;
};
std::vector<StructSize> probe_struct_sizes(const Plugin& plugin);

// Directories searched for installed plugins (normally Python's sys.path, set by torch_tpu at
// import). Thread-safe.
void set_search_path(std::vector<std::string> dirs);
// Relative paths looked for in each search directory, in order of preference:
// libtpu/libtpu.so, jax_plugins/xla_cuda13/xla_cuda_plugin.so, jax_plugins/xla_cuda12/....
const std::vector<std::string>& discovery_candidates();
// The existing candidate files, best first (only stat() calls: cheap). Never throws.
std::vector<std::string> discover_plugins();
// Whether the machine shows a TPU (/dev/accel* or /dev/vfio/<n>). libtpu is only auto-selected
// when it does: off a TPU VM its initialization waits a long time on the GCE metadata server.
// Never throws.
bool tpu_device_present();
// The plugin to use: TORCH_TPU_PJRT_PLUGIN when set (which must then exist), else the first
// discovered one. Throws c10::Error naming the variable and every location looked at when none
// is found.
std::string plugin_path();

}  // namespace torch_tpu::pjrt
