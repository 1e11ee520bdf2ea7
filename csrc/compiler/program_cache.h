// In-memory program cache: call-signature key -> compiled Program, bounded LRU.
//
// Design: the key is a flat vector of 64-bit words the dispatcher writes while it walks an ATen
// call's arguments (op identity, dtypes, shapes, baked arguments), with its hash computed
// alongside, so a lookup neither allocates nor lowers anything. Entries are shared_ptrs: a
// program evicted while queued work still runs it stays alive until that work finishes.
// Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

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
  struct Entry {
    std::vector<int64_t> words;
    uint64_t hash;
    std::shared_ptr<Program> program;
  };
  using List = std::list<Entry>;
  mutable std::mutex mu_;
  size_t capacity_;
  List lru_;  // front = most recently used
  std::unordered_multimap<uint64_t, List::iterator> index_;
  CacheStats stats_;
};

// The process-wide cache used by the eager modes (TORCH_TPU_PROGRAM_CACHE_SIZE entries).
ProgramCache& eager_cache();

}  // namespace torch_tpu::compiler
