// PrivateUse1HooksInterface: how PyTorch core asks about the tpu backend (availability,
// generators, pinned memory, device of a pointer, storage resizing).
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "common/check.h"
#include "device/allocator.h"
#include "device/device.h"
#include "device/generator.h"
#include "device/stream.h"
#include "runtime/residency.h"

namespace torch_tpu::device {
namespace {

// Pinned host memory: page-locking buys nothing on the host runtime, but PyTorch's contract
// (is_pinned, DataLoader pin_memory, non_blocking copies) needs a distinct allocator whose
// pointers we recognise. It is also the device's host allocator (torch.accelerator's
// empty_host_cache and host memory stats ask for one; without it they dereference null).
// Nothing is cached: every block goes back to the system when its tensor dies.
class PinnedAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? std::aligned_alloc(64, (nbytes + 63) / 64 * 64) : nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, nbytes == 0 || p != nullptr, "torch_tpu: cannot allocate ", nbytes,
                     " bytes of pinned host memory");
    if (p) {
      std::lock_guard<std::mutex> g(mu_);
      live_.emplace(p, nbytes);
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(nbytes);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(nbytes);
      ++stats_.num_host_alloc;
    }
    return c10::DataPtr(p, p, &PinnedAllocator::release, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &PinnedAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  // Copies from pinned memory finish before the copy returns (host runtime) or hold the
  // storage (queued work owns its tensors), so a block never needs an event to outlive them.
  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override { return true; }
  void empty_cache() override {}  // nothing cached
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> g(mu_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> g(mu_);
    for (auto* st : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations, &stats_.allocated_bytes}) {
      st->reset_accumulated();
    }
    stats_.num_host_alloc = stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> g(mu_);
    for (auto* st : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations, &stats_.allocated_bytes}) {
      st->reset_peak();
    }
  }

  bool is_pinned(const void* p) {
    std::lock_guard<std::mutex> g(mu_);
    return live_.count(p) > 0;
  }
  static PinnedAllocator& get() {
    static auto* a = new PinnedAllocator();
    return *a;
  }

 private:
  static void release(void* p) {
    if (!p) return;
    {
      PinnedAllocator& a = get();
      std::lock_guard<std::mutex> g(a.mu_);
      if (auto it = a.live_.find(p); it != a.live_.end()) {
        a.stats_.active_requests.decrease(1);
        a.stats_.active_bytes.decrease(it->second);
        a.stats_.allocations.decrease(1);
        a.stats_.allocated_bytes.decrease(it->second);
        ++a.stats_.num_host_free;
        a.live_.erase(it);
      }
    }
    std::free(p);
  }
  std::mutex mu_;
  std::unordered_map<const void*, size_t> live_;  // guarded by mu_
  at::HostStats stats_;                            // guarded by mu_
};

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return device_index >= 0 && device_index < count(); }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto prev = current();
    set_current(device);
    return prev;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override { return new_generator(device_index); }

  bool isPinnedPtr(const void* data) const override { return PinnedAllocator::get().is_pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &PinnedAllocator::get(); }

  at::Device getDeviceFromPtr(void* data) const override {
    auto d = DeviceAllocator::get().device_of(data);
    return c10::Device(c10::DeviceType::PrivateUse1, d < 0 ? current() : d);
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TPU_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    auto device = storage.device().index();
    FlushCauseScope cause(FlushCause::kResize);
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep > 0) {
      synchronize_device(device);  // the kept bytes must be final before they are copied
    } else {
      flush_pending(device);
    }
    c10::DataPtr fresh = DeviceAllocator::get().allocate_on(device, newsize);
    if (keep > 0) {
      runtime::before_host_read(impl->data(), keep);
      std::memcpy(fresh.get(), impl->data(), keep);
    }
    c10::DataPtr old = impl->set_data_ptr(std::move(fresh));
    impl->set_nbytes(newsize);
    if (keep == 0 && old) {
      // Nothing to copy (FSDP2 frees and re-allocates parameters with storage.resize_(0/n)):
      // queued work may still use the old memory, so it returns to the allocator once every
      // busy stream of the device passed this point, without a host wait (this runs with the
      // GIL held: a wait would have to release it, common/blocking_wait.h).
      auto retired = std::make_shared<c10::DataPtr>(std::move(old));
      for (int id = 0; id <= kStreamPoolSize; ++id) {
        c10::Stream s(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
        if (!query_stream(s)) enqueue_fn(s, [retired] {});
      }
    }
  }
};

struct Registrar {
  Registrar() {
    at::RegisterPrivateUse1HooksInterface(new TpuHooks());
    at::setHostAllocator(c10::DeviceType::PrivateUse1, &PinnedAllocator::get());
  }
} registrar;

}  // namespace
}  // namespace torch_tpu::device
