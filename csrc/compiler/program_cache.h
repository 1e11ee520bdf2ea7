// In-memory program cache: call-signature key -> compiled Program, bounded LRU.
//
// Design: the key is a flat vector of 64-bit words the dispatcher writes while it walks an ATen
// call's arguments (op identity, dtypes, shapes, baked arguments), with its hash computed
// alongside, so a lookup neither allocates nor lowers anything (the LRU is common/lru_cache.h,
// under a mutex). Entries are shared_ptrs: a program evicted while queued work still runs it
// stays alive until that work finishes. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/lru_cache.h"
#include "compiler/program.h"

namespace torch_tpu::compiler {

struct CacheStats {
  uint64_t hits = 0, misses = 0, inserts = 0, evictions = 0, entries = 0, capacity = 0;
};

class ProgramCache {
 public:
  explicit ProgramCache(size_t capacity);
  // Null on a miss. `words` must stay unchanged during the call.
  std::shared_ptr<Program> find(const std::vector<int64_t>& words, uint64_t hash);
  void insert(const std::vector<int64_t>& words, uint64_t hash, std::shared_ptr<Program> program);
  CacheStats stats() const;
  void clear();

 private:
  mutable std::mutex mu_;
  LruCache<std::shared_ptr<Program>> lru_;
};

// The process-wide cache used by the eager modes (TORCH_TPU_PROGRAM_CACHE_SIZE entries).
ProgramCache& eager_cache();

}  // namespace torch_tpu::compiler
