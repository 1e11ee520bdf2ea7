// Caching allocator for host programs' intermediates (scratch_allocator.h).
#include "runtime/host/scratch_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <pthread.h>

#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "common/config.h"

namespace torch_tpu::runtime::host {
namespace {

constexpr size_t kRound = size_t{64} << 10;

thread_local bool t_in_scope = false;

class ScratchAllocator final : public c10::Allocator {
 public:
  explicit ScratchAllocator(c10::Allocator* wrapped)
      : wrapped_(wrapped), limit_(config::parse_size(config::get("TORCH_TPU_HOST_SCRATCH_CACHE"))) {}

  c10::DataPtr allocate(size_t n) override {
    if (!t_in_scope || n < kMinScratchBytes) return wrapped_->allocate(n);
    const size_t size = (n + kRound - 1) / kRound * kRound;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= size;
        stats_.hits++;
        return take_locked(p, size);
      }
    }
    void* p = c10::alloc_cpu(size);  // outside the lock; throws c10::Error when memory is exhausted
    std::lock_guard<std::mutex> g(mu_);
    stats_.misses++;
    return take_locked(p, size);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &raw_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  // Takes back a scratch block; false if p is not one (then it belongs to the wrapped allocator).
  bool release(void* p) {
    size_t size = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = live_.find(p);
      if (it == live_.end()) return false;
      size = it->second;
      live_.erase(it);
      stats_.live_bytes -= size;
      if (stats_.cached_bytes + size <= limit_) {
        free_[size].push_back(p);
        stats_.cached_bytes += size;
        return true;
      }
    }
    c10::free_cpu(p);
    return true;
  }

  void release_cache() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> g(mu_);
      for (auto& [size, list] : free_) blocks.insert(blocks.end(), list.begin(), list.end());
      free_.clear();
      stats_.cached_bytes = 0;
    }
    for (void* p : blocks) c10::free_cpu(p);
  }

  ScratchStats stats() {
    std::lock_guard<std::mutex> g(mu_);
    return stats_;
  }

  c10::Allocator* wrapped() const { return wrapped_; }

  // In a child of fork(): the mutex may have been held by a thread that does not exist there
  // (a stream worker mid-program), and a raw free takes it. The blocks stay as they were.
  void reset_mutex_after_fork() { new (&mu_) std::mutex(); }

 private:
  // Registers block p as live (caller holds mu_).
  c10::DataPtr take_locked(void* p, size_t size) {
    live_[p] = size;
    stats_.live_bytes += size;
    return {p, p, &free_scratch, c10::Device(c10::DeviceType::CPU)};
  }

  static void free_scratch(void* p);
  static void raw_free(void* p);

  c10::Allocator* const wrapped_;
  const uint64_t limit_;
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> cached blocks
  std::unordered_map<void*, size_t> live_;               // scratch blocks in use -> rounded size
  ScratchStats stats_;
};

// Installed on first use; leaked on purpose (tensors are freed during interpreter shutdown).
ScratchAllocator* instance() {
  static ScratchAllocator* a = [] {
    auto* s = new ScratchAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(s);
    pthread_atfork(nullptr, nullptr, [] { instance()->reset_mutex_after_fork(); });
    return s;
  }();
  return a;
}

void ScratchAllocator::free_scratch(void* p) { instance()->release(p); }

void ScratchAllocator::raw_free(void* p) {
  ScratchAllocator* a = instance();
  if (!a->release(p)) a->wrapped()->raw_deleter()(p);
}

}  // namespace

ScratchScope::ScratchScope() : outer_(!t_in_scope) {
  instance();
  t_in_scope = true;
}

ScratchScope::~ScratchScope() {
  if (outer_) t_in_scope = false;
}

void release_scratch_cache() { instance()->release_cache(); }

ScratchStats scratch_stats() { return instance()->stats(); }

}  // namespace torch_tpu::runtime::host
