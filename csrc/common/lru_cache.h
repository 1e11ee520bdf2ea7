// A bounded least-recently-used map from a word key to a value: the one LRU of the in-memory
// caches, the per-op program cache (compiler/program_cache.h) and the fused-graph cache
// (exec/fused.cpp).
//
// Design: a key is a vector of 64-bit words its writer hashes while writing it (common/hash.h,
// mix_word), so the cache never hashes a key itself. Entries sit in a list in use order (front:
// the most recent) and a multimap from hash to list position finds them; find() compares words
// only within the hash's bucket and moves a hit to the front with a splice: a hit allocates
// nothing. An insert beyond capacity evicts from the back. Rejected: a clock per entry with a
// scan for the oldest at eviction (what the fused cache did): cheaper hits by a splice, but an
// eviction costs a pass over every entry.
//
// Not thread-safe: its owner locks (ProgramCache holds a mutex; the fused cache lives under
// fused.cpp's lock). Values are usually shared_ptrs, so one evicted while in use stays alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torch_tpu {

struct LruStats {
  uint64_t hits = 0, misses = 0, inserts = 0, evictions = 0;
};

template <class Value>
class LruCache {
 public:
  using Key = std::vector<int64_t>;

  // Holds at most `capacity` entries (at least one).
  explicit LruCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // The value stored under `words` (whose hash is `hash`), now the most recently used, or null
  // (a miss). The pointer is valid until the next insert() or clear().
  Value* find(const Key& words, uint64_t hash) {
    auto [lo, hi] = index_.equal_range(hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second->words == words) {
        lru_.splice(lru_.begin(), lru_, it->second);
        stats_.hits++;
        return &it->second->value;
      }
    }
    stats_.misses++;
    return nullptr;
  }

  // Stores `value` under `words` as the most recently used entry, or replaces the value of an
  // equal key in place (two threads that missed together both compiled it); then evicts the
  // least recently used entries beyond capacity.
  void insert(Key words, uint64_t hash, Value value) {
    auto [lo, hi] = index_.equal_range(hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second->words == words) {
        it->second->value = std::move(value);
        return;
      }
    }
    lru_.push_front(Entry{std::move(words), hash, std::move(value)});
    index_.emplace(hash, lru_.begin());
    stats_.inserts++;
    while (lru_.size() > capacity_) evict_last();
  }

  void clear() {
    lru_.clear();
    index_.clear();
  }

  size_t size() const { return lru_.size(); }
  size_t capacity() const { return capacity_; }
  const LruStats& stats() const { return stats_; }

 private:
  struct Entry {
    Key words;
    uint64_t hash;
    Value value;
  };
  using List = std::list<Entry>;

  void evict_last() {
    auto last = std::prev(lru_.end());
    auto [lo, hi] = index_.equal_range(last->hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == last) {
        index_.erase(it);
        break;
      }
    }
    lru_.pop_back();
    stats_.evictions++;
  }

  size_t capacity_;
  List lru_;  // front: the most recently used
  std::unordered_multimap<uint64_t, typename List::iterator> index_;
  LruStats stats_;
};

}  // namespace torch_tpu
