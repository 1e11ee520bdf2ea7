#include "exec/mode.h"

#include <algorithm>
#include <atomic>
#include <cctype>

#include "common/check.h"
#include "common/config.h"
#include "device/stream.h"

namespace torch_tpu::exec {
namespace {

Mode initial_mode() {
  if (config::get_bool("TORCH_TPU_LAUNCH_BLOCKING")) return Mode::Debug;
  if (config::get_bool("TORCH_TPU_DEFER_AND_FUSE")) return Mode::Fused;
  try {
    return parse_mode(config::get("TORCH_TPU_MODE"));
  } catch (const c10::Error&) {
    TORCH_WARN("torch_tpu: ignoring TORCH_TPU_MODE='", config::get("TORCH_TPU_MODE"), "' (expected debug|strict|fused)");
    return Mode::Strict;
  }
}

std::atomic<int>& current() {
  static std::atomic<int> m{static_cast<int>(initial_mode())};
  return m;
}

std::atomic<bool>& fallback() {
  static std::atomic<bool> f{config::get("TORCH_TPU_FALLBACK") == "cpu"};
  return f;
}

}  // namespace

Mode mode() { return static_cast<Mode>(current().load(std::memory_order_relaxed)); }

void set_mode(Mode m) {
  if (m != mode()) {
    // Pending fused work goes to the queues, ahead of what the new mode enqueues: the queues
    // keep the order. Only debug mode, which runs programs on the calling thread, must find
    // them drained. (A wait at every switch made `with torch_tpu.mode("fused")` around a
    // step a host wait per step.)
    device::FlushCauseScope cause(device::FlushCause::kModeSwitch);
    if (m == Mode::Debug) {
      device::synchronize_device(-1);
    } else {
      device::flush_pending(-1);
    }
  }
  current().store(static_cast<int>(m));
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Debug: return "debug";
    case Mode::Strict: return "strict";
    case Mode::Fused: return "fused";
  }
  return "?";
}

Mode parse_mode(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "debug") return Mode::Debug;
  if (n == "strict" || n.empty()) return Mode::Strict;
  if (n == "fused") return Mode::Fused;
  TPU_CHECK_VALUE(false, "unknown execution mode '", name, "' (expected 'debug', 'strict' or 'fused')");
}

bool cpu_fallback_enabled() { return fallback().load(std::memory_order_relaxed); }
void set_cpu_fallback(bool enabled) { fallback().store(enabled); }

}  // namespace torch_tpu::exec
