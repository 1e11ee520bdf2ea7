// PrivateUse1HooksInterface: how PyTorch core asks about the tpu backend (availability,
// generators, pinned memory, device of a pointer, storage resizing).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <mutex>
#include <unordered_set>

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
// pointers we recognise.
class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? std::aligned_alloc(64, (nbytes + 63) / 64 * 64) : nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, nbytes == 0 || p != nullptr, "torch_tpu: cannot allocate ", nbytes,
                     " bytes of pinned host memory");
    if (p) {
      std::lock_guard<std::mutex> g(mu_);
      live_.insert(p);
    }
    return c10::DataPtr(p, p, &PinnedAllocator::release, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &PinnedAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

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
      std::lock_guard<std::mutex> g(get().mu_);
      get().live_.erase(p);
    }
    std::free(p);
  }
  std::mutex mu_;
  std::unordered_set<const void*> live_;
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
  Registrar() { at::RegisterPrivateUse1HooksInterface(new TpuHooks()); }
} registrar;

}  // namespace
}  // namespace torch_tpu::device
