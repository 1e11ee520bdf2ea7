// Persistent cache of compiled PJRT executables: a second process (or a restart) loads what an
// earlier one compiled instead of running the plugin's compiler again.
//
// Design:
//   * Where: <cache root>/pjrt/<version>/, through DiskCache (authenticated entries,
//     atomic writes, 0700 directories, LRU size bound; TORCH_TPU_CACHE_DIR=off disables it
//     with the program cache's disk tier). The root is separate from the program tier's so the
//     two never evict each other's directories as "other versions".
//   * Version: a serialized executable is only valid for the plugin build that made it, so the
//     directory name hashes the plugin's path, file size and mtime, its API version and
//     attributes, the client's platform name and version, and our compile options.
//   * Entries: keyed by a 64-bit FNV-1a of the StableHLO text and its length; the payload holds
//     the text itself and then PJRT_Executable_Serialize's bytes, so a hash collision is a miss
//     and never the wrong program.
//   * A plugin that cannot serialize (UNIMPLEMENTED) disables the cache for the process after
//     one warning; an entry that fails to load is discarded as corrupt and recompiled.
// Thread-safe (DiskCache is; counters are atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/disk_cache.h"
#include "runtime/pjrt/client.h"

namespace torch_tpu::pjrt {

struct ExecutableCacheStats {
  bool enabled = false;
  std::string directory;
  int64_t hits = 0, misses = 0, writes = 0;
};

class ExecutableCache {
 public:
  // The cache for `client`'s plugin, or null when the disk cache is off (TORCH_TPU_CACHE_DIR).
  // Never throws: an unusable directory warns (DiskCache) and disables it.
  static std::unique_ptr<ExecutableCache> open(const Client& client, const std::string& compile_options);

  // The executable stored for `mlir`, loaded on the client, or null (miss). Never throws.
  std::unique_ptr<LoadedExecutable> load(const Client& client, const std::string& mlir);
  // Serializes and stores a freshly compiled executable. Never throws.
  void store(const Client& client, const std::string& mlir, const LoadedExecutable& executable);
  ExecutableCacheStats stats() const;

 private:
  explicit ExecutableCache(std::unique_ptr<DiskCache> disk) : disk_(std::move(disk)) {}
  static std::vector<int64_t> key_of(const std::string& mlir);

  std::unique_ptr<DiskCache> disk_;
  std::atomic<bool> serializable_{true};
  std::atomic<int64_t> hits_{0}, misses_{0}, writes_{0};
};

}  // namespace torch_tpu::pjrt
