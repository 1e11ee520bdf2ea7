#include "compiler/disk_cache.h"

#include <atomic>
#include <cctype>
#include <mutex>

#include <c10/util/Exception.h>
#include <torch/version.h>

#include "common/config.h"
#include "common/paths.h"
#include "compiler/program_serialize.h"
#include "ir/ops.h"

namespace torch_tpu::compiler {

std::string cache_version(const std::string& lowering_fingerprint) {
  std::string fp;
  for (char c : lowering_fingerprint) {  // keep the directory name a plain file name
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') fp += c;
  }
  return "v" + std::to_string(kDiskFormatVersion) + "-torch" + TORCH_VERSION + "-ir" +
         std::to_string(ir::kNumOpKinds) + "." + std::to_string(kProgramFormatVersion) + "." +
         std::to_string(kCompilerVersion) + (fp.empty() ? "" : "-" + fp);
}

namespace {
std::atomic<DiskCache*> g_disk{nullptr};
std::once_flag g_disk_once;
}  // namespace

DiskCache* process_disk_cache() {
  DiskCache* c = g_disk.load(std::memory_order_acquire);
  return c != nullptr && c->enabled() ? c : nullptr;
}

DiskCacheStats process_disk_cache_stats() {
  DiskCache* c = g_disk.load(std::memory_order_acquire);
  return c != nullptr ? c->stats() : DiskCacheStats{};
}

void configure_disk_cache(const std::string& lowering_fingerprint) {
  std::call_once(g_disk_once, [&] {
    std::string size = config::get("TORCH_TPU_CACHE_MAX_BYTES");
    uint64_t max_bytes = 0;
    try {
      max_bytes = config::parse_size(size);
    } catch (const c10::Error&) {
      TORCH_CHECK_VALUE(false, "torch_tpu: TORCH_TPU_CACHE_MAX_BYTES='", size,
                        "' is not a size (expected e.g. 1GiB, 512MiB or a byte count)");
    }
    std::string root = default_cache_root();
    // Leaked on purpose: dispatch may use it from any thread until the process exits.
    g_disk.store(new DiskCache(root, cache_version(lowering_fingerprint), max_bytes), std::memory_order_release);
  });
}

}  // namespace torch_tpu::compiler
