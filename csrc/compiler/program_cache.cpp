#include "compiler/program_cache.h"

#include "common/config.h"

namespace torch_tpu::compiler {

ProgramCache::ProgramCache(size_t capacity) : lru_(capacity) {}

std::shared_ptr<Program> ProgramCache::find(const std::vector<int64_t>& words, uint64_t hash) {
  std::lock_guard<std::mutex> g(mu_);
  std::shared_ptr<Program>* p = lru_.find(words, hash);
  return p ? *p : nullptr;
}

void ProgramCache::insert(const std::vector<int64_t>& words, uint64_t hash, std::shared_ptr<Program> program) {
  std::lock_guard<std::mutex> g(mu_);
  lru_.insert(words, hash, std::move(program));
}

CacheStats ProgramCache::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  const LruStats& l = lru_.stats();
  return CacheStats{l.hits, l.misses, l.inserts, l.evictions, lru_.size(), lru_.capacity()};
}

void ProgramCache::clear() {
  std::lock_guard<std::mutex> g(mu_);
  lru_.clear();
}

ProgramCache& eager_cache() {
  static auto* c = new ProgramCache(static_cast<size_t>(config::get_int("TORCH_TPU_PROGRAM_CACHE_SIZE")));
  return *c;
}

}  // namespace torch_tpu::compiler
