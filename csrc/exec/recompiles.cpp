#include "exec/recompiles.h"

#include <c10/util/Exception.h>

#include <deque>
#include <iostream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "common/config.h"
#include "exec/fused.h"

namespace torch_tpu::exec {
namespace {

constexpr size_t kRecentEvents = 64;

// One input of a call: its dtype, sizes and strides (scalars: empty).
struct InputSig {
  int8_t dtype = -1;
  std::vector<int64_t> sizes, strides;
  bool operator==(const InputSig&) const = default;
};

struct State {
  std::mutex mu;
  std::unordered_map<const OpInfo*, std::vector<InputSig>> last;  // per op: its last compiled signature
  std::unordered_map<std::string, uint64_t> by_op;
  std::deque<RecompileEvent> recent;
  uint64_t count = 0;
  int log = -1;             // -1: not read yet
  int64_t warn = -2;        // -2: not read yet
  bool warned = false;
};

State& state() {
  static State* s = new State();  // leaked: misses may happen during interpreter shutdown
  return *s;
}

void read_settings(State& s) {
  if (s.log < 0) s.log = config::get("TORCH_TPU_LOG").find("recompiles") != std::string::npos ? 1 : 0;
  if (s.warn == -2) s.warn = config::get_int("TORCH_TPU_RECOMPILE_WARN");
}

std::vector<InputSig> signature(const CallState& st) {
  std::vector<InputSig> sig;
  sig.reserve(st.tensors.size());
  for (const at::Tensor& t : st.tensors) {
    InputSig s;
    if (t.defined()) {
      s.dtype = static_cast<int8_t>(t.scalar_type());
      s.sizes = t.sizes().vec();
      s.strides = t.strides().vec();
    }
    sig.push_back(std::move(s));
  }
  return sig;
}

std::string list(const std::vector<int64_t>& v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

// The first difference between two signatures, in words.
std::string explain(const std::vector<InputSig>& was, const std::vector<InputSig>& now) {
  if (was.size() != now.size()) return "number of inputs " + std::to_string(was.size()) + " -> " + std::to_string(now.size());
  for (size_t i = 0; i < now.size(); ++i) {
    const InputSig &a = was[i], &b = now[i];
    const std::string in = "input " + std::to_string(i) + " ";
    if (a.dtype != b.dtype)
      return in + "dtype " + (a.dtype < 0 ? "scalar" : c10::toString(static_cast<c10::ScalarType>(a.dtype))) + " -> " +
             (b.dtype < 0 ? "scalar" : c10::toString(static_cast<c10::ScalarType>(b.dtype)));
    if (a.sizes != b.sizes) return in + "size " + list(a.sizes) + " -> " + list(b.sizes);
    if (a.strides != b.strides) return in + "stride " + list(a.strides) + " -> " + list(b.strides);
  }
  return "scalar arguments or flags (or the program was evicted)";  // baked scalars, contiguity-keyed ops
}

}  // namespace

void note_eager_miss(const OpInfo& info, const CallState& st) {
  State& s = state();
  std::vector<InputSig> now = signature(st);
  RecompileEvent e{"eager_op", info.qualname + (info.overload.empty() ? "" : "." + info.overload), "", ""};
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.last.find(&info);
    if (it == s.last.end()) {  // the op's first compile
      s.last.emplace(&info, std::move(now));
      return;
    }
    e.reason = explain(it->second, now);
    it->second = std::move(now);
  }
  // Without the lock: the hook takes the GIL, and a Python thread reading the stats holds the
  // GIL while it waits for the lock.
  if (const std::string* line = current_source_line()) e.source = *line;
  bool warn_now = false;
  uint64_t count = 0;
  int64_t limit = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    read_settings(s);
    count = ++s.count;
    limit = s.warn;
    s.by_op[e.what]++;
    if (s.log) std::cerr << "[torch_tpu recompile] " << e.kind << " " << e.what << ": " << e.reason
                         << (e.source.empty() ? "" : " at " + e.source) << "\n" << std::flush;
    if (limit > 0 && !s.warned && count > static_cast<uint64_t>(limit)) warn_now = s.warned = true;
    s.recent.push_back(e);
    if (s.recent.size() > kRecentEvents) s.recent.pop_front();
  }
  if (warn_now) {
    TORCH_WARN("torch_tpu: ", count, " eager programs were recompiled for new input shapes, dtypes or strides "
               "(TORCH_TPU_RECOMPILE_WARN=", limit, "); the latest: ", e.what, ": ", e.reason,
               e.source.empty() ? "" : " at " + e.source,
               ". torch_tpu.metrics()['recompiles'] counts them by reason; TORCH_TPU_LOG=recompiles prints each.");
  }
}

RecompileStats recompile_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  RecompileStats out;
  out.count = s.count;
  out.by_op.assign(s.by_op.begin(), s.by_op.end());
  out.recent.assign(s.recent.begin(), s.recent.end());
  return out;
}

void reset_recompile_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.count = 0;
  s.by_op.clear();
  s.recent.clear();
  s.warned = false;
}

void set_recompile_log(bool on) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.log = on ? 1 : 0;
}

bool recompile_log() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  read_settings(s);
  return s.log == 1;
}

void set_recompile_warn(int64_t count) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.warn = count;
  s.warned = false;
}

int64_t recompile_warn() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  read_settings(s);
  return s.warn;
}

}  // namespace torch_tpu::exec
