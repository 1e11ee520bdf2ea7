#include "exec/metrics.h"

#include <mutex>

namespace torch_tpu::exec {
namespace {
std::mutex fallback_mu;
std::map<std::string, uint64_t>& fallbacks() {
  static auto* m = new std::map<std::string, uint64_t>();
  return *m;
}
}  // namespace

Metrics& metrics() {
  static auto* m = new Metrics();
  return *m;
}

bool record_fallback(const std::string& op) {
  std::lock_guard<std::mutex> g(fallback_mu);
  return fallbacks()[op]++ == 0;
}

std::map<std::string, uint64_t> fallback_counts() {
  std::lock_guard<std::mutex> g(fallback_mu);
  return fallbacks();
}

void reset_metrics() {
  auto& m = metrics();
  for (auto* c : {&m.ops_dispatched, &m.programs_executed, &m.cache_hits, &m.cache_misses, &m.programs_compiled,
                  &m.compile_ns, &m.bytes_to_device, &m.bytes_from_device, &m.bytes_device_to_device, &m.host_syncs}) {
    c->store(0);
  }
  std::lock_guard<std::mutex> g(fallback_mu);
  fallbacks().clear();
}

}  // namespace torch_tpu::exec
