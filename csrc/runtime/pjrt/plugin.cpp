#include "runtime/pjrt/plugin.h"

#include <c10/util/Exception.h>
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cctype>
#include <map>
#include <mutex>
#include <sstream>

#include "common/check.h"
#include "common/config.h"

namespace torch_tpu::pjrt {

std::string check_api_version(int major, int minor, size_t api_struct_size, size_t version_struct_size) {
  std::ostringstream why;
  if (version_struct_size < sizeof(c::PJRT_Api_Version)) {
    why << "its PJRT_Api_Version struct has " << version_struct_size << " bytes, expected at least "
        << sizeof(c::PJRT_Api_Version) << " (not a PJRT C API plugin, or a pre-release one)";
  } else if (major != c::kMajor) {
    why << "it implements PJRT C API " << major << "." << minor << ", torch_tpu supports major version " << c::kMajor
        << " (minor >= " << c::kMinMinor << ")";
  } else if (minor < c::kMinMinor) {
    why << "it implements PJRT C API " << major << "." << minor << ", older than the oldest supported " << c::kMajor
        << "." << c::kMinMinor << " (upgrade the plugin)";
  } else if (api_struct_size < sizeof(c::PJRT_Api)) {
    why << "its PJRT_Api function table has " << api_struct_size << " bytes, fewer than the " << sizeof(c::PJRT_Api)
        << " torch_tpu reads (API " << major << "." << minor << " claims more)";
  }
  return why.str();
}

static const char* code_name(c::PJRT_Error_Code code) {
  static const char* names[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  int i = static_cast<int>(code);
  return i >= 0 && i <= 16 ? names[i] : "UNKNOWN_CODE";
}

std::string Plugin::take_message(c::PJRT_Error* error, c::PJRT_Error_Code* code) const {
  if (error == nullptr) return {};
  c::PJRT_Error_Message_Args m{};
  m.struct_size = sizeof(m);
  m.error = error;
  api_->PJRT_Error_Message_(&m);
  std::string message(m.message != nullptr ? m.message : "", m.message_size);
  c::PJRT_Error_GetCode_Args g{};
  g.struct_size = sizeof(g);
  g.error = error;
  c::PJRT_Error* code_error = api_->PJRT_Error_GetCode(&g);
  if (code != nullptr) *code = code_error == nullptr ? g.code : c::PJRT_Error_Code_UNKNOWN;
  c::PJRT_Error_Destroy_Args d{};
  d.struct_size = sizeof(d);
  d.error = error;
  api_->PJRT_Error_Destroy_(&d);
  if (code_error != nullptr) {
    d.error = code_error;
    api_->PJRT_Error_Destroy_(&d);
  }
  return message;
}

void Plugin::check(c::PJRT_Error* error, const char* what) const {
  if (error == nullptr) return;
  c::PJRT_Error_Code code = c::PJRT_Error_Code_UNKNOWN;
  std::string message = take_message(error, &code);
  std::ostringstream full;
  full << "torch_tpu: PJRT " << what << " failed (" << code_name(code) << "): " << message << " [plugin " << path_
       << "]";
  switch (code) {
    case c::PJRT_Error_Code_INVALID_ARGUMENT:
      TORCH_CHECK_VALUE(false, full.str());
    case c::PJRT_Error_Code_UNIMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, full.str());
    case c::PJRT_Error_Code_RESOURCE_EXHAUSTED:
      TORCH_CHECK_WITH(OutOfMemoryError, false, full.str());
    default:
      TORCH_CHECK(false, full.str());
  }
}

static bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::shared_ptr<const Plugin> Plugin::load(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Plugin>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;

  TPU_CHECK(is_file(path), "PJRT plugin ", path, " does not exist (or is not a file)");
  // RTLD_LOCAL: the plugin's own copies of LLVM/absl/protobuf stay private to it.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    TPU_CHECK(false, "cannot load PJRT plugin ", path, ": ", err != nullptr ? err : "dlopen failed");
  }
  auto* get_api = reinterpret_cast<c::GetPjrtApiFn*>(::dlsym(handle, "GetPjrtApi"));
  TPU_CHECK(get_api != nullptr, path,
            " is not a PJRT plugin: it does not export GetPjrtApi (a PJRT C API plugin is e.g. "
            "libtpu.so or jax_plugins/xla_cuda13/xla_cuda_plugin.so)");
  const c::PJRT_Api* api = get_api();
  TPU_CHECK(api != nullptr, "PJRT plugin ", path, ": GetPjrtApi returned null");
  std::string why = check_api_version(api->pjrt_api_version.major_version, api->pjrt_api_version.minor_version,
                                      api->struct_size, api->pjrt_api_version.struct_size);
  TPU_CHECK(why.empty(), "PJRT plugin ", path, " is incompatible: ", why);

  auto plugin = std::make_shared<Plugin>(api, path);
  c::PJRT_Plugin_Initialize_Args init{};
  init.struct_size = sizeof(init);
  plugin->check(api->PJRT_Plugin_Initialize(&init), "Plugin_Initialize");

  c::PJRT_Plugin_Attributes_Args attrs{};
  attrs.struct_size = sizeof(attrs);
  c::PJRT_Error* err = api->PJRT_Plugin_Attributes(&attrs);
  if (err == nullptr) {
    for (size_t i = 0; i < attrs.num_attributes; ++i) {
      const c::PJRT_NamedValue& v = attrs.attributes[i];
      std::string value;
      switch (v.type) {
        case c::PJRT_NamedValue_kString:
          value.assign(v.string_value, v.value_size);
          break;
        case c::PJRT_NamedValue_kInt64:
          value = std::to_string(v.int64_value);
          break;
        case c::PJRT_NamedValue_kInt64List:
          for (size_t k = 0; k < v.value_size; ++k) value += (k ? "." : "") + std::to_string(v.int64_array_value[k]);
          break;
        case c::PJRT_NamedValue_kFloat:
          value = std::to_string(v.float_value);
          break;
        case c::PJRT_NamedValue_kBool:
          value = v.bool_value ? "true" : "false";
          break;
      }
      plugin->attributes_.emplace_back(std::string(v.name, v.name_size), value);
    }
  } else {
    plugin->take_message(err);  // attributes are informational only
  }
  loaded.emplace(path, plugin);
  return plugin;
}

static std::mutex search_mu;
static std::vector<std::string>& search_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

void set_search_path(std::vector<std::string> dirs) {
  std::lock_guard<std::mutex> lock(search_mu);
  search_dirs() = std::move(dirs);
}

const std::vector<std::string>& discovery_candidates() {
  static const std::vector<std::string> names = {
      "libtpu/libtpu.so",
      "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
      "jax_plugins/xla_cuda12/xla_cuda_plugin.so",
  };
  return names;
}

std::vector<std::string> discover_plugins() {
  std::vector<std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(search_mu);
    dirs = search_dirs();
  }
  std::vector<std::string> found;
  for (const std::string& rel : discovery_candidates()) {
    for (const std::string& dir : dirs) {
      if (dir.empty()) continue;
      std::string p = dir + "/" + rel;
      if (is_file(p)) {
        found.push_back(p);
        break;
      }
    }
  }
  return found;
}

bool tpu_device_present() {
  auto any_entry = [](const char* dir, const char* prefix) {
    DIR* d = ::opendir(dir);
    if (d == nullptr) return false;
    bool found = false;
    std::string pre(prefix);
    while (dirent* e = ::readdir(d)) {
      std::string name(e->d_name);
      if (name.size() > pre.size() && name.compare(0, pre.size(), pre) == 0 &&
          (pre.empty() ? std::isdigit(static_cast<unsigned char>(name[0])) != 0 : true)) {
        found = true;
        break;
      }
    }
    ::closedir(d);
    return found;
  };
  return any_entry("/dev", "accel") || any_entry("/dev/vfio", "");
}

std::string plugin_path() {
  std::string configured = config::get("TORCH_TPU_PJRT_PLUGIN");
  if (!configured.empty()) {
    TPU_CHECK(is_file(configured), "TORCH_TPU_PJRT_PLUGIN=", configured, " does not exist (or is not a file)");
    return configured;
  }
  std::vector<std::string> found = discover_plugins();
  if (!found.empty()) return found.front();
  std::ostringstream looked;
  size_t ndirs = 0;
  {
    std::lock_guard<std::mutex> lock(search_mu);
    ndirs = search_dirs().size();
  }
  for (size_t i = 0; i < discovery_candidates().size(); ++i) looked << (i ? ", " : "") << discovery_candidates()[i];
  TPU_CHECK(false, "TORCH_TPU_RUNTIME=pjrt: no PJRT plugin found. Looked for TORCH_TPU_PJRT_PLUGIN (unset) and for ",
            looked.str(), " in the ", ndirs,
            " directories of sys.path. Install libtpu (TPU VMs) or jax-cuda13-pjrt (NVIDIA GPUs), or set "
            "TORCH_TPU_PJRT_PLUGIN=/path/to/plugin.so");
}

}  // namespace torch_tpu::pjrt
