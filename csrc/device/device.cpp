#include "device/device.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/check.h"
#include "common/config.h"
#include "runtime/select.h"

namespace torch_tpu::device {

namespace {

constexpr int64_t kMaxDevices = 64;

// TORCH_TPU_NUM_DEVICES set to something (set but empty counts as unset).
bool explicitly_counted() {
  const std::optional<std::string> v = config::get_if_set("TORCH_TPU_NUM_DEVICES");
  return v.has_value() && !v->empty();
}

}  // namespace

void check_config() {
  if (explicitly_counted()) {
    config::get_int_in("TORCH_TPU_NUM_DEVICES", 1, kMaxDevices);
  }
  for (const char* size : {"TORCH_TPU_HOST_MEMORY", "TORCH_TPU_CACHE_MAX_BYTES", "TORCH_TPU_HOST_SCRATCH_CACHE"}) {
    if (!config::get(size).empty()) config::get_size(size, std::string(size) == "TORCH_TPU_HOST_MEMORY" ? 1 : 0);
  }
}

c10::DeviceIndex count() {
  static const c10::DeviceIndex n = [] {
    int64_t v = 1;
    try {
      // Out-of-range values are refused at import (check_config); this never throws.
      v = config::get_int_in("TORCH_TPU_NUM_DEVICES", 1, kMaxDevices);
      // Under torchrun, local rank r uses tpu:r (device_id=torch.device("tpu", local_rank),
      // DeviceMesh): unless set explicitly, emulate as many devices as the node runs ranks.
      const char* local_world = std::getenv("LOCAL_WORLD_SIZE");
      if (!explicitly_counted() && local_world != nullptr && *local_world) {
        v = std::max<int64_t>(1, std::strtoll(local_world, nullptr, 10));
      }
    } catch (...) {
      v = 1;
    }
    // A runtime with real devices (PJRT) has exactly as many; TORCH_TPU_NUM_DEVICES may only
    // hide some of them (e.g. one per process).
    const int real = runtime::selected_runtime().device_count();
    if (real > 0) {
      v = explicitly_counted() ? std::min<int64_t>(v, real) : real;
    }
    return static_cast<c10::DeviceIndex>(std::clamp<int64_t>(v, 1, kMaxDevices));
  }();
  return n;
}

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < count(), "Invalid device index tpu:", static_cast<int>(index),
              ": torch_tpu has ", static_cast<int>(count()), " device(s) ",
              runtime::selected_runtime().device_count() > 0 ? "(the devices of the PJRT plugin)"
                                                             : "(set TORCH_TPU_NUM_DEVICES for more emulated devices)");
}

static thread_local c10::DeviceIndex current_device = 0;
static std::atomic<bool> g_initialized{false};

bool initialized() { return g_initialized.load(std::memory_order_relaxed); }
void mark_initialized() {
  if (!g_initialized.load(std::memory_order_relaxed)) g_initialized.store(true, std::memory_order_relaxed);
}

c10::DeviceIndex current() { return current_device; }

void set_current(c10::DeviceIndex index) {
  check_index(index);
  current_device = index;
}

uint64_t capacity(c10::DeviceIndex /*index*/) {
  static const uint64_t bytes = [] {
    std::string text = config::get("TORCH_TPU_HOST_MEMORY");
    if (!text.empty()) return config::get_size("TORCH_TPU_HOST_MEMORY", 1);
    uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
    return std::min<uint64_t>(phys / 2, 16ull << 30);
  }();
  return bytes;
}

std::string name(c10::DeviceIndex index) {
  std::string real = runtime::selected_runtime().device_name(index);
  if (!real.empty()) return real;
  return "torch_tpu host-emulated TPU " + std::to_string(static_cast<int>(index));
}

}  // namespace torch_tpu::device
