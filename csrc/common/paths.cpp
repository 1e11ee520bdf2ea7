#include "common/paths.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/config.h"

namespace torch_tpu {

std::string absolute_path(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) return path;  // open_trusted_dir refuses it
  return std::string(cwd) + (std::strcmp(cwd, "/") == 0 ? "" : "/") + path;
}

std::string default_cache_root() {
  if (std::optional<std::string> dir = config::get_if_set("TORCH_TPU_CACHE_DIR")) {  // set: "" or "off" disable
    return *dir == "off" ? "" : absolute_path(*dir);
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/torch_tpu";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    return std::string(home) + "/.cache/torch_tpu";
  }
  return "";
}

}  // namespace torch_tpu
