// Profiling records (exec/profiler.h).
#include "exec/profiler.h"

#include <chrono>
#include <map>
#include <mutex>
#include <utility>

#include "exec/call.h"
#include "exec/fused.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec::profiler {

std::atomic<bool> g_enabled{false};

namespace {

struct SiteTotals {
  uint64_t count = 0;
  int64_t wait_ns = 0;
};

struct Records {
  std::mutex mu;
  std::vector<DeviceEvent> events;
  // Keyed by (interned line pointer's text, op): few distinct sites, so a map is fine.
  std::map<std::pair<std::string, std::string>, SiteTotals> syncs;
  std::map<std::pair<std::string, std::string>, SiteTotals> fallbacks;
};

Records& records() {
  static auto* r = new Records();  // leaked: workers may record during exit
  return *r;
}

std::string line_or_unknown() {
  const std::string* line = current_source_line();
  return line != nullptr ? *line : std::string("?");
}

std::vector<SiteCount> to_list(const std::map<std::pair<std::string, std::string>, SiteTotals>& m) {
  std::vector<SiteCount> out;
  out.reserve(m.size());
  for (const auto& [key, v] : m) out.push_back(SiteCount{key.first, key.second, v.count, v.wait_ns});
  return out;
}

}  // namespace

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void reset() {
  Records& r = records();
  std::lock_guard<std::mutex> g(r.mu);
  r.events.clear();
  r.syncs.clear();
  r.fallbacks.clear();
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void record_device_event(DeviceEvent&& event) {
  Records& r = records();
  std::lock_guard<std::mutex> g(r.mu);
  r.events.push_back(std::move(event));
}

uint64_t binding_bytes(const std::vector<runtime::Binding>& inputs, const std::vector<runtime::OutputTarget>& outputs,
                       const std::vector<uint8_t>* reads) {
  auto bytes = [](const runtime::Binding& b) -> uint64_t {
    if (b.kind != runtime::Binding::Kind::Tensor) return 0;
    uint64_t n = c10::elementSize(b.dtype);
    for (int64_t s : b.sizes) n *= static_cast<uint64_t>(s);
    return n;
  };
  uint64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (reads == nullptr || (i < reads->size() && (*reads)[i] != 0)) total += bytes(inputs[i]);
  }
  for (const auto& o : outputs) total += bytes(o.dest);
  return total;
}

namespace {
std::string op_name(const OpInfo& op) { return op.qualname + (op.overload.empty() ? "" : "." + op.overload); }
}  // namespace

void record_program(const OpInfo* op, const std::vector<const OpInfo*>* graph_ops, const char* cause, int device,
                    int64_t stream, int64_t start_ns, uint64_t bytes, uint64_t kernels, uint64_t clusters) {
  DeviceEvent ev;
  ev.end_ns = now_ns();
  ev.start_ns = start_ns;
  if (graph_ops != nullptr) {
    ev.name = "fused graph (" + std::to_string(graph_ops->size()) + " ops)";
    for (size_t k = 0; k < graph_ops->size(); ++k) ev.ops += (k ? ", " : "") + op_name(*(*graph_ops)[k]);
  } else {
    ev.name = op != nullptr ? op_name(*op) : "compiled graph";
    ev.ops = ev.name;
  }
  ev.cause = cause;
  ev.bytes = bytes;
  ev.device = device;
  ev.stream = static_cast<int>(stream);
  ev.kernels = kernels;
  ev.clusters = clusters;
  record_device_event(std::move(ev));
}

std::vector<DeviceEvent> take_device_events() {
  Records& r = records();
  std::lock_guard<std::mutex> g(r.mu);
  std::vector<DeviceEvent> out;
  out.swap(r.events);
  return out;
}

void record_host_sync(const char* op, int64_t wait_ns) {
  std::string line = line_or_unknown();  // takes the GIL: never under our mutex
  Records& r = records();
  std::lock_guard<std::mutex> g(r.mu);
  SiteTotals& t = r.syncs[{std::move(line), op}];
  t.count++;
  t.wait_ns += wait_ns;
}

void record_fallback(const std::string& op) {
  std::string line = line_or_unknown();
  Records& r = records();
  std::lock_guard<std::mutex> g(r.mu);
  r.fallbacks[{std::move(line), op}].count++;
}

std::vector<SiteCount> host_syncs() {
  Records& r = records();
  std::lock_guard<std::mutex> g(r.mu);
  return to_list(r.syncs);
}

std::vector<SiteCount> fallbacks() {
  Records& r = records();
  std::lock_guard<std::mutex> g(r.mu);
  return to_list(r.fallbacks);
}

}  // namespace torch_tpu::exec::profiler
