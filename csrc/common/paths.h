// Paths shared by the program disk cache (compiler/disk_cache) and the PJRT executable cache
// (runtime/pjrt/executable_cache): both live under one cache root.
#pragma once

#include <string>

namespace torch_tpu {

// `path` made absolute against the current directory (not normalized: ".." and symbolic links
// are resolved by compiler::open_trusted_dir). "" stays "". Never throws.
std::string absolute_path(const std::string& path);

// The root directory from TORCH_TPU_CACHE_DIR / XDG_CACHE_HOME / HOME, absolute (a relative
// TORCH_TPU_CACHE_DIR is resolved against the current directory now); "" when disabled
// (TORCH_TPU_CACHE_DIR set to "" or "off").
std::string default_cache_root();

}  // namespace torch_tpu
