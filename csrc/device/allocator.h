// Caching allocator for tpu device memory, one pool per device.
//
// Design: blocks are rounded up (512 B below 1 MiB, 128 KiB above) and recycled by exact
// rounded size, so a training loop that allocates the same shapes every step stops calling the
// system allocator after the first step. Each device has a capacity; an allocation that does
// not fit first releases the cache, then waits for the device's queued work (whose tensors may
// be the ones holding memory), then raises c10::OutOfMemoryError naming the request and the
// device's figures. The process stays usable afterwards. On the host runtime device memory is
// host RAM (64-byte aligned), so a DataPtr's address is a host pointer.
//
// Thread safety: all methods are thread-safe (one mutex per device). Frees may come from
// worker threads when queued work releases the last reference to a tensor.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torch_tpu::device {

struct MemoryStats {
  uint64_t allocated = 0, allocated_peak = 0;  // bytes in live blocks (rounded sizes)
  uint64_t reserved = 0, reserved_peak = 0;    // live + cached bytes
  uint64_t requested = 0, requested_peak = 0;  // bytes asked for (unrounded)
  uint64_t num_allocs = 0, num_frees = 0, num_ooms = 0, num_alloc_retries = 0, num_cache_hits = 0;
  uint64_t active_blocks = 0, cached_blocks = 0;
};

// One block of the pool, for torch.tpu.memory._snapshot(): a live block (active) or a cached one.
struct BlockInfo {
  const void* ptr = nullptr;
  uint64_t size = 0;       // rounded
  uint64_t requested = 0;  // bytes asked for (live blocks)
  bool active = false;
};

// Derives from c10::DeviceAllocator so that torch.accelerator.memory_* (which looks the
// allocator up with c10::getDeviceAllocator) reports the tpu figures.
class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  // The process-wide allocator registered for PrivateUse1. Never null.
  static DeviceAllocator& get();

  // Allocates on the calling thread's current device.
  c10::DataPtr allocate(size_t nbytes) override;
  // Allocates on a given device. Throws c10::OutOfMemoryError when it cannot fit.
  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes);
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  MemoryStats stats(c10::DeviceIndex device) const;
  // Every block the device's pool holds (live and cached). Thread-safe; throws for a bad index.
  std::vector<BlockInfo> blocks(c10::DeviceIndex device) const;
  void reset_peak(c10::DeviceIndex device);
  void reset_accumulated(c10::DeviceIndex device);
  // Returns cached (unused) blocks of a device to the system.
  void empty_cache(c10::DeviceIndex device);
  // The device owning ptr (a tpu allocation's base address), or -1.
  c10::DeviceIndex device_of(const void* ptr) const;

  // c10::DeviceAllocator (torch.accelerator.*).
  bool initialized() override { return true; }
  // Waits for every device's queued work (which may hold the last references to tensors),
  // then releases every device's cache.
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  // Queued work holds references to its tensors: nothing to record.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override { reset_accumulated(device); }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak(device); }
  // (free, total) bytes; free excludes memory held by the cache, like torch.tpu.mem_get_info.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // torch.tpu.set_per_process_memory_fraction: allocations beyond fraction x capacity of the
  // device raise OutOfMemoryError (after releasing the cache and waiting for queued work).
  void set_memory_fraction(c10::DeviceIndex device, double fraction);
  double memory_fraction(c10::DeviceIndex device) const;

 private:
  DeviceAllocator() = default;
};

}  // namespace torch_tpu::device
