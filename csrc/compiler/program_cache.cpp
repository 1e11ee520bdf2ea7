#include "compiler/program_cache.h"

#include "common/config.h"

namespace torch_tpu::compiler {

ProgramCache::ProgramCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

std::shared_ptr<Program> ProgramCache::find(const std::vector<int64_t>& words, uint64_t hash) {
  std::lock_guard<std::mutex> g(mu_);
  auto range = index_.equal_range(hash);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second->words == words) {
      lru_.splice(lru_.begin(), lru_, it->second);
      stats_.hits++;
      return it->second->program;
    }
  }
  stats_.misses++;
  return nullptr;
}

void ProgramCache::insert(const std::vector<int64_t>& words, uint64_t hash, std::shared_ptr<Program> program) {
  std::lock_guard<std::mutex> g(mu_);
  auto range = index_.equal_range(hash);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second->words == words) {
      it->second->program = std::move(program);  // a racing thread compiled it too
      return;
    }
  }
  lru_.push_front(Entry{words, hash, std::move(program)});
  index_.emplace(hash, lru_.begin());
  stats_.inserts++;
  while (lru_.size() > capacity_) {
    auto last = std::prev(lru_.end());
    auto r = index_.equal_range(last->hash);
    for (auto it = r.first; it != r.second; ++it) {
      if (it->second == last) {
        index_.erase(it);
        break;
      }
    }
    lru_.pop_back();
    stats_.evictions++;
  }
}

CacheStats ProgramCache::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  CacheStats s = stats_;
  s.entries = lru_.size();
  s.capacity = capacity_;
  return s;
}

void ProgramCache::clear() {
  std::lock_guard<std::mutex> g(mu_);
  lru_.clear();
  index_.clear();
}

ProgramCache& eager_cache() {
  static auto* c = new ProgramCache(static_cast<size_t>(config::get_int("TORCH_TPU_PROGRAM_CACHE_SIZE")));
  return *c;
}

}  // namespace torch_tpu::compiler
