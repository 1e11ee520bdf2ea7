// DeviceGuardImplInterface for PrivateUse1: PyTorch's device/stream/event plumbing
// (DeviceGuard, torch.Stream, torch.Event, the autograd engine's device threads) calls this.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "device/device.h"
#include "device/stream.h"

namespace torch_tpu::device {
namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    auto prev = current();
    if (d.index() != prev) set_current(d.index());
    return c10::Device(kTpu, prev);
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, current()); }
  void setDevice(c10::Device d) const override { set_current(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < count()) {
      try {
        set_current(d.index());
      } catch (...) {
      }
    }
  }

  // torch.Stream(device="tpu") and friends pass an index of -1: the current device.
  static c10::DeviceIndex resolve(c10::Device d) { return d.has_index() ? d.index() : current(); }
  c10::Stream getStream(c10::Device d) const override { return current_stream(resolve(d)); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(resolve(d)); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return pool_stream(resolve(d));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override { return pool_stream(resolve(d)); }
  c10::Stream exchangeStream(c10::Stream s) const override { return exchange_stream(s); }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    event_destroy(event);
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", static_cast<int>(device_index), " does not match recording stream's device ",
                static_cast<int>(stream.device_index()));
    event_record(event, stream, flag == c10::EventFlag::BACKEND_DEFAULT);
  }
  void block(void* event, const c10::Stream& stream) const override { event_block(event, stream); }
  bool queryEvent(void* event) const override { return event_query(event); }
  void synchronizeEvent(void* event) const override { event_synchronize(event); }
  double elapsedTime(void* e1, void* e2, const c10::DeviceIndex /*device_index*/) const override {
    return event_elapsed_ms(e1, e2);
  }

  c10::DeviceIndex deviceCount() const noexcept override { return count(); }
  bool queryStream(const c10::Stream& stream) const override {
    flush_pending(stream.device_index(), FlushCause::kStreamEvent);  // pending fused ops count as work
    return query_stream(stream);
  }
  void synchronizeStream(const c10::Stream& stream) const override { synchronize_stream(stream); }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override { synchronize_device(device_index); }
  // Queued work holds references to its tensors, so no per-stream bookkeeping is needed.
  void recordDataPtrOnStream(const c10::DataPtr& /*unused*/, const c10::Stream& /*unused*/) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torch_tpu::device
