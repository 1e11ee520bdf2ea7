// Counters behind torch_tpu.metrics(): what ran, what was compiled, what fell back.
// All counters are atomics (cheap on the per-op path); fallback counts are keyed by op name.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace torch_tpu::exec {

struct Metrics {
  std::atomic<uint64_t> ops_dispatched{0};     // ATen calls handled by the lowering path
  std::atomic<uint64_t> programs_executed{0};  // programs run on a device
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> cache_misses{0};
  std::atomic<uint64_t> programs_compiled{0};
  std::atomic<uint64_t> compile_ns{0};  // lowering + compile time on misses
  std::atomic<uint64_t> bytes_to_device{0};
  std::atomic<uint64_t> bytes_from_device{0};
  std::atomic<uint64_t> bytes_device_to_device{0};
  std::atomic<uint64_t> host_syncs{0};  // host reads that waited for a device queue
};

Metrics& metrics();
// Records one CPU-fallback call of op; returns true the first time op is seen (warn then).
bool record_fallback(const std::string& op);
std::map<std::string, uint64_t> fallback_counts();
void reset_metrics();

}  // namespace torch_tpu::exec
