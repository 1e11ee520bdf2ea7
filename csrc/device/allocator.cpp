#include "device/allocator.h"
#include "device/memory_history.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/fork_guard.h"
#include "device/device.h"
#include "device/stream.h"
#include "runtime/device_services.h"
#include "runtime/residency.h"

namespace torch_tpu::device {
namespace {

constexpr size_t kSmall = 1 << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = 128 << 10;

size_t round_size(size_t n) {
  size_t r = n < kSmall ? kSmallRound : kLargeRound;
  return (n + r - 1) / r * r;
}

struct Block {
  void* ptr;
  size_t size;       // rounded, of the memory held
  size_t requested;  // what the caller asked for
  size_t charged;    // the request rounded: what memory_allocated counts (a reused block may be larger)
  c10::DeviceIndex device;
};

struct Pool {
  mutable std::mutex mu;
  std::map<size_t, std::vector<Block*>> cached;  // rounded size -> free blocks (no empty lists)
  std::unordered_map<const void*, Block*> live;
  MemoryStats stats;
  std::atomic<double> fraction{1.0};  // of the device's capacity this process may reserve

  void release_cache_locked() {
    for (auto& [size, blocks] : cached) {
      for (Block* b : blocks) {
        std::free(b->ptr);
        stats.reserved -= b->size;
        delete b;
      }
    }
    cached.clear();
    stats.cached_blocks = 0;
  }
};

// Leaked on purpose: tensors can be freed during interpreter shutdown, after static
// destructors would have run.
std::vector<std::unique_ptr<Pool>>& pools() {
  static auto* p = [] {
    auto* v = new std::vector<std::unique_ptr<Pool>>();
    for (int i = 0; i < count(); ++i) v->push_back(std::make_unique<Pool>());
    return v;
  }();
  return *p;
}

Pool& pool(c10::DeviceIndex d) {
  check_index(d);
  return *pools()[static_cast<size_t>(d)];
}

void free_block(void* ctx) {
  if (in_bad_fork()) return;  // the pools' locks may be held by threads the fork did not copy
  auto* b = static_cast<Block*>(ctx);
  if (memory_history::recording()) [[unlikely]] memory_history::record_free(b->device, b->ptr, b->size);
  runtime::released(b->ptr, b->size);  // before the block can be handed out again
  Pool& p = *pools()[static_cast<size_t>(b->device)];
  std::lock_guard<std::mutex> g(p.mu);
  p.live.erase(b->ptr);
  p.stats.allocated -= b->charged;
  p.stats.requested -= b->requested;
  p.stats.num_frees++;
  p.stats.active_blocks--;
  p.cached[b->size].push_back(b);
  p.stats.cached_blocks++;
}

std::string fmt_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace

DeviceAllocator& DeviceAllocator::get() {
  static DeviceAllocator* a = new DeviceAllocator();  // leaked: frees can run at exit
  return *a;
}

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) { return allocate_on(current(), nbytes); }

namespace {
c10::DataPtr allocate_block(c10::DeviceIndex device, size_t nbytes);
}  // namespace

c10::DataPtr DeviceAllocator::allocate_on(c10::DeviceIndex device, size_t nbytes) {
  if (memory_history::recording()) [[unlikely]] {
    c10::DataPtr d = allocate_block(device, nbytes);
    if (d.get() != nullptr) memory_history::record_alloc(device, d.get(), static_cast<Block*>(d.get_context())->size);
    return d;
  }
  return allocate_block(device, nbytes);
}

std::vector<BlockInfo> DeviceAllocator::blocks(c10::DeviceIndex device) const {
  Pool& p = pool(device);
  std::lock_guard<std::mutex> g(p.mu);
  std::vector<BlockInfo> out;
  for (const auto& [ptr, b] : p.live) out.push_back(BlockInfo{ptr, b->size, b->requested, true});
  for (const auto& [size, list] : p.cached) {
    for (const Block* b : list) out.push_back(BlockInfo{b->ptr, b->size, 0, false});
  }
  return out;
}

namespace {
// A free block for a request of `size` (rounded) bytes: one of exactly that size, else the
// smallest cached block at most twice as large. Without the second rule a
// loop whose sizes change every step (a new sequence length) found no block of its exact size,
// mapped fresh pages for ~40 tensors a step and let the blocks of earlier sizes pile up in the
// cache (25 MB a step in a GPT-2 loop) until the capacity forced a full release.
Block* take_cached_locked(Pool& p, size_t size) {
  auto it = p.cached.lower_bound(size);
  if (it == p.cached.end() || it->first > 2 * size) return nullptr;
  Block* b = it->second.back();
  it->second.pop_back();
  if (it->second.empty()) p.cached.erase(it);
  return b;
}

c10::DataPtr allocate_block(c10::DeviceIndex device, size_t nbytes) {
  check_not_in_bad_fork();
  mark_initialized();
  c10::Device dev(c10::DeviceType::PrivateUse1, device);
  Pool& p = pool(device);
  if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, nullptr, dev);
  const size_t size = round_size(nbytes);
  const uint64_t full = capacity(device);
  const double fraction = p.fraction.load(std::memory_order_relaxed);
  const uint64_t cap = fraction < 1.0 ? static_cast<uint64_t>(static_cast<double>(full) * fraction) : full;
  for (int attempt = 0;; ++attempt) {
    {
      std::lock_guard<std::mutex> g(p.mu);
      Block* b = take_cached_locked(p, size);
      if (b != nullptr) {
        p.stats.cached_blocks--;
        p.stats.num_cache_hits++;
      } else if (p.stats.reserved + size <= cap) {
        void* ptr = std::aligned_alloc(64, size);
        if (ptr != nullptr) {
          b = new Block{ptr, size, 0, size, device};
          p.stats.reserved += size;
          p.stats.reserved_peak = std::max(p.stats.reserved_peak, p.stats.reserved);
        }
      } else if (attempt == 0 && !p.cached.empty()) {
        p.release_cache_locked();
        p.stats.num_alloc_retries++;
        continue;
      }
      if (b != nullptr) {
        b->requested = nbytes;
        b->charged = size;
        p.live[b->ptr] = b;
        p.stats.allocated += size;
        p.stats.allocated_peak = std::max(p.stats.allocated_peak, p.stats.allocated);
        p.stats.requested += nbytes;
        p.stats.requested_peak = std::max(p.stats.requested_peak, p.stats.requested);
        p.stats.num_allocs++;
        p.stats.active_blocks++;
        return c10::DataPtr(b->ptr, b, &free_block, dev);
      }
      if (attempt >= 2) {
        p.stats.num_ooms++;
        uint64_t free_bytes = cap > p.stats.reserved ? cap - p.stats.reserved : 0;
        const std::string limit = cap < full ? "this process may use " + fmt_bytes(cap) + " of the device's " +
                                                   fmt_bytes(full) + " (torch.tpu.set_per_process_memory_fraction)"
                                             : "the device has a capacity of " + fmt_bytes(cap);
        TORCH_CHECK_WITH(OutOfMemoryError, false, "torch_tpu: out of memory on tpu:", static_cast<int>(device),
                         ". Tried to allocate ", fmt_bytes(nbytes), "; ", limit, ", of which ",
                         fmt_bytes(p.stats.allocated), " is allocated by tensors and ", fmt_bytes(free_bytes),
                         " is free (", fmt_bytes(p.stats.reserved - p.stats.allocated),
                         " cached). Free tensors or raise TORCH_TPU_HOST_MEMORY.");
      }
    }
    // Queued work may hold the last references to tensors: let it finish, then retry.
    p.stats.num_alloc_retries++;
    {
      FlushCauseScope cause(FlushCause::kMemory);
      synchronize_device(device);
    }
    runtime::release_cached_memory();
    std::lock_guard<std::mutex> g(p.mu);
    p.release_cache_locked();
  }
}
}  // namespace

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  runtime::before_host_read(src, count);
  runtime::before_host_write(dest, count, /*every_byte=*/true);
  std::memcpy(dest, src, count);
}

MemoryStats DeviceAllocator::stats(c10::DeviceIndex device) const {
  Pool& p = pool(device);
  std::lock_guard<std::mutex> g(p.mu);
  return p.stats;
}

void DeviceAllocator::reset_peak(c10::DeviceIndex device) {
  Pool& p = pool(device);
  std::lock_guard<std::mutex> g(p.mu);
  p.stats.allocated_peak = p.stats.allocated;
  p.stats.reserved_peak = p.stats.reserved;
  p.stats.requested_peak = p.stats.requested;
}

void DeviceAllocator::reset_accumulated(c10::DeviceIndex device) {
  Pool& p = pool(device);
  std::lock_guard<std::mutex> g(p.mu);
  p.stats.num_allocs = p.stats.num_frees = p.stats.num_ooms = 0;
  p.stats.num_alloc_retries = p.stats.num_cache_hits = 0;
}

void DeviceAllocator::empty_cache(c10::DeviceIndex device) {
  {
    Pool& p = pool(device);
    std::lock_guard<std::mutex> g(p.mu);
    p.release_cache_locked();
  }
  runtime::release_cached_memory();  // host programs' cached intermediates live in the same RAM
}

c10::DeviceIndex DeviceAllocator::device_of(const void* ptr) const {
  for (size_t d = 0; d < pools().size(); ++d) {
    Pool& p = *pools()[d];
    std::lock_guard<std::mutex> g(p.mu);
    if (p.live.count(ptr)) return static_cast<c10::DeviceIndex>(d);
  }
  return -1;
}

void DeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  synchronize_device(-1);
  for (c10::DeviceIndex d = 0; d < count(); ++d) empty_cache(d);
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  const MemoryStats s = stats(device);
  c10::CachingDeviceAllocator::DeviceStats out;
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  auto set = [](c10::CachingAllocator::Stat& st, uint64_t current, uint64_t peak) {
    st.current = static_cast<int64_t>(current);
    st.peak = static_cast<int64_t>(peak);
  };
  set(out.allocated_bytes[kAll], s.allocated, s.allocated_peak);
  set(out.reserved_bytes[kAll], s.reserved, s.reserved_peak);
  set(out.requested_bytes[kAll], s.requested, s.requested_peak);
  set(out.active_bytes[kAll], s.allocated, s.allocated_peak);
  set(out.active[kAll], s.active_blocks, s.active_blocks);
  set(out.inactive_split[kAll], s.cached_blocks, s.cached_blocks);
  out.allocation[kAll].allocated = static_cast<int64_t>(s.num_allocs);
  out.allocation[kAll].freed = static_cast<int64_t>(s.num_frees);
  out.allocation[kAll].current = static_cast<int64_t>(s.active_blocks);
  out.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries);
  out.num_ooms = static_cast<int64_t>(s.num_ooms);
  return out;
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  const uint64_t total = capacity(device);
  const uint64_t reserved = stats(device).reserved;
  return {static_cast<size_t>(total > reserved ? total - reserved : 0), static_cast<size_t>(total)};
}

void DeviceAllocator::set_memory_fraction(c10::DeviceIndex device, double fraction) {
  TORCH_CHECK_VALUE(fraction >= 0.0 && fraction <= 1.0, "Invalid fraction value: ", fraction, ". Allowed range: 0~1");
  pool(device).fraction.store(fraction);
}

double DeviceAllocator::memory_fraction(c10::DeviceIndex device) const { return pool(device).fraction.load(); }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &DeviceAllocator::get());

}  // namespace torch_tpu::device
