// The DeferAndFuse engine: recording, keys and flushing (see fused.h); the pending graph it records
// is fused_pending.h, composed by fused_compose.cpp; reads through views are view_geometry.h.
#include "exec/fused.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>

#include "common/check.h"
#include "common/config.h"
#include "common/fork_guard.h"
#include "common/lru_cache.h"
#include "device/device.h"
#include "exec/fused_pending.h"
#include "exec/metrics.h"
#include "exec/mode.h"
#include "exec/poison.h"
#include "exec/profiler.h"
#include "exec/view_geometry.h"
#include "ir/printer.h"

namespace torch_tpu::exec {
namespace {

using namespace fusion;  // the pending graph (fused_pending.h) and view geometry (view_geometry.h)

// Composed graphs by their key (Pending::key), TORCH_TPU_PROGRAM_CACHE_SIZE of them.
using FusedCache = LruCache<std::shared_ptr<FusedProgram>>;

constexpr uint64_t kMissesBeforeWarning = 64;

std::mutex g_mu;  // guards everything below
std::map<c10::DeviceIndex, Pending> g_pending;
// Never destroyed, like the per-op program cache: its executables must not be released during
// static destruction, after a PJRT plugin's driver (CUDA) has already shut down at exit.
FusedCache& g_cache =
    *new FusedCache(static_cast<size_t>(std::max<int64_t>(1, config::get_int("TORCH_TPU_PROGRAM_CACHE_SIZE"))));
FusedStats g_stats;
std::map<std::string, uint64_t> g_host_read_lines;
std::atomic<int> g_pending_ops{0};  // fast "anything pending?" for the flush hook
// Whether some device's slow start has advanced past its first cut since the host last waited
// (a fast check: debug mode synchronizes at every op, with nothing pending).
std::atomic<bool> g_slow_start_advanced{false};
std::atomic<bool> g_debug{config::get_bool("TORCH_TPU_DEBUG_FUSION")};
SourceLineHook g_source_line_hook = nullptr;

int64_t max_ops() {
  static const int64_t v = std::max<int64_t>(1, config::get_int("TORCH_TPU_FUSED_MAX_OPS"));
  return v;
}

// Slow start. When the host waits for the device (a host read, a synchronize), the device is
// idle when the host starts recording the next step, and with full-size graphs it stays idle
// until max_ops() ops are recorded: a TinyGPT step's whole forward pass (~1 ms of Python).
// So the first graph after a wait is flushed at TORCH_TPU_FUSED_FIRST_OPS ops, the next at
// twice that, and so on up to max_ops(), but only graphs that hold a contraction: the device
// then starts on the step's first matrix products while Python records the rest, and the cut
// costs little, since a contraction's operands and results are stored anyway. A graph of
// elementwise ops alone (preprocessing) is left whole: cutting it would store intermediates
// its clusters keep in cache (8 ops: preprocessing 1.42x slower). The cut points depend only
// on the recorded ops, so a training loop's graphs repeat and hit the cache.
int64_t slow_start_ops(int graphs_since_wait) {
  static const int64_t first = std::max<int64_t>(0, config::get_int("TORCH_TPU_FUSED_FIRST_OPS"));
  // Past 16 doublings (even from 1 op: 65536) the cap rules; the bound keeps the shift in range.
  if (first == 0 || graphs_since_wait >= 16) return max_ops();
  return std::min(max_ops(), first << graphs_since_wait);
}

// Flush causes after which the host waits for the device.
bool host_waits_after(device::FlushCause cause) {
  return cause == device::FlushCause::kHostRead || cause == device::FlushCause::kSynchronize ||
         cause == device::FlushCause::kDataDependent;
}

bool provenance_enabled() {
  static const bool v = config::get_bool("TORCH_TPU_FUSED_PROVENANCE");
  return v;
}

// The memory class (runtime::MemoryClasses) of a storage the graph loads or stores, numbered in
// order of first appearance. Mixed into the key: the executor keeps clusters of different
// classes open across each other's writes, so graphs that share a key must share their classes.
int32_t memory_class_of(Pending& p, StorageState& ss) {
  if (ss.memory_class < 0) ss.memory_class = p.memory_classes++;
  p.mix(ss.memory_class);
  return ss.memory_class;
}

ir::DType ir_dtype(c10::ScalarType t) { return static_cast<ir::DType>(t); }

// How a tensor argument of an op being recorded reads the pending graph.
struct Resolution {
  bool needs_flush = false;
  Source source;
  std::vector<ir::Node> transform;
};

// A tensor's memory as programs see it (exec::tensor_binding): a complex tensor is its
// view_as_real, so pending values and reads of one storage agree in element type and units
// whether they go through the complex tensor or a float view of it.
struct Geometry {
  c10::ScalarType dtype;
  int64_t offset;
  c10::SmallVector<int64_t, 6> sizes, strides;
};

Geometry geometry(const at::Tensor& t) {
  Geometry g{t.scalar_type(),
             t.storage_offset(),
             {t.sizes().begin(), t.sizes().end()},
             {t.strides().begin(), t.strides().end()}};
  if (c10::isComplexType(g.dtype)) {
    g.dtype = c10::toRealValueType(g.dtype);
    g.offset *= 2;
    for (auto& s : g.strides) s *= 2;
    g.sizes.push_back(2);
    g.strides.push_back(1);
  }
  return g;
}

Resolution resolve(const Pending& p, const at::Tensor& t) {
  Resolution r;
  if (t.numel() == 0) return r;  // nothing to read: a load of no memory
  auto it = p.storages.find(t.storage().unsafeGetStorageImpl());
  if (it == p.storages.end() || it->second.last_store < 0) return r;  // a load from memory
  const StorageValue& w = it->second.value;
  r.source = w.source;
  const Geometry g = geometry(t);
  if (!w.valid || w.dtype != g.dtype) {
    r.needs_flush = true;
    return r;
  }
  if (w.offset == g.offset && c10::IntArrayRef(w.sizes).equals(g.sizes) &&
      c10::IntArrayRef(w.strides).equals(g.strides)) {
    return r;  // read exactly as written
  }
  const ir::DType dtype = ir_dtype(g.dtype);
  if (is_contiguous(w.sizes, w.strides)) {
    r.needs_flush = !express_view(w.offset, w.sizes, dtype, g.offset, g.sizes, g.strides, r.transform);
    return r;
  }
  // Stored in another dense order: read the memory's contiguous value, the value transposed
  // into stride order, through the view.
  std::vector<int64_t> perm;
  if (!dense_order(w.sizes, w.strides, perm)) {
    r.needs_flush = true;
    return r;
  }
  std::vector<int64_t> stored(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) stored[k] = w.sizes[static_cast<size_t>(perm[k])];
  r.transform.push_back(view_node(ir::OpKind::kTranspose, dtype, stored, perm));
  r.needs_flush = !express_view(w.offset, stored, dtype, g.offset, g.sizes, g.strides, r.transform);
  return r;
}

runtime::Binding long_scalar(uint64_t v) {
  runtime::Binding b;
  b.kind = runtime::Binding::Kind::Scalar;
  b.dtype = c10::kLong;
  b.i = static_cast<int64_t>(v);
  return b;
}

// -- running ---------------------------------------------------------------------------------

struct FusedWork final : device::Work {
  std::shared_ptr<FusedProgram> program;
  std::vector<runtime::Binding> inputs;
  std::vector<runtime::OutputTarget> outputs;
  // Per recorded op, for error messages only (names are built when something fails).
  std::vector<const OpInfo*> ops;
  std::vector<const std::string*> source_lines;
  // Per output: its memory, and whether the graph wrote it before reading it (exec/poison.h,
  // poison_outputs: such memory is lost when its store is not written).
  std::vector<StorageWeak> written;
  std::vector<uint8_t> fresh;
  const char* cause = "";
  c10::DeviceIndex device = 0;
  c10::StreamId stream_id = 0;

  bool launch_only() const override { return true; }  // runtime/completion.h
  void run() override {
    if (!profiler::enabled()) return run_graph();
    const uint64_t bytes = profiler::binding_bytes(inputs, outputs);  // before run_and_release drops inputs
    const int64_t start = profiler::now_ns();
    run_graph();
    const auto& st = program->stats;
    profiler::record_program(nullptr, &ops, cause, device, stream_id, start, bytes, static_cast<uint64_t>(st.steps),
                             static_cast<uint64_t>(st.clusters));
  }

  void run_graph() {
    // A graph queued before an earlier one failed may read its lost values: only what depends
    // on them is lost (the runtime computes the rest), or, on a runtime that cannot tell, the
    // graph is skipped and its new results are lost.
    std::optional<Loss> input_loss;
    if (any_poisoned()) {
      for (runtime::Binding& b : inputs) {
        if (!b.owner) continue;
        if (auto loss = lost_value(static_cast<const c10::StorageImpl*>(b.owner.get()))) {
          b.lost = true;
          if (!input_loss) input_loss = std::move(loss);
        }
      }
      if (input_loss && !program->executable->reports_fates()) {
        poison_outputs(written, fresh, std::vector<runtime::OutputFate>(written.size(), runtime::OutputFate::kUntouched),
                       *input_loss);
        return;
      }
    }
    try {
      program->executable->run_and_release(inputs, outputs, runtime::RngState{});
    } catch (c10::Error& e) {
      int32_t node = runtime::last_failed_node();
      std::string where;
      if (node >= 0 && static_cast<size_t>(node) < program->node_op.size()) {
        auto op = static_cast<size_t>(program->node_op[static_cast<size_t>(node)]);
        where = "in " + ops[op]->qualname + (ops[op]->overload.empty() ? "" : "." + ops[op]->overload) +
                (source_lines[op] ? " recorded at " + *source_lines[op] : "");
      } else {
        where = "in one of " + std::to_string(ops.size()) + " ops";
      }
      e.add_context("torch_tpu (fused mode): raised when a pending graph ran (flushed by " + std::string(cause) +
                    "), " + where);
      poison_outputs(written, fresh, failure_fates(), loss_of(e));
      throw;
    }
    if (input_loss) poison_outputs(written, fresh, fates(), *input_loss);
  }

  const std::vector<runtime::OutputFate>& fates() const {
    static const std::vector<runtime::OutputFate> unknown;  // every output lost
    return program->executable->reports_fates() ? runtime::last_run_fates() : unknown;
  }
  const std::vector<runtime::OutputFate>& failure_fates() const {
    static const std::vector<runtime::OutputFate> unknown;  // every output lost
    return program->executable->reports_failure_fates() ? runtime::last_run_fates() : unknown;
  }
};

// Takes the pending graph of one device (caller holds g_mu) and returns the work that runs it.
std::unique_ptr<FusedWork> take_locked(Pending& p, device::FlushCause cause) {
  const size_t nops = p.ops.size();
  g_stats.flushes_by_cause[static_cast<int>(cause)]++;
  g_stats.largest_graph_ops = std::max<uint64_t>(g_stats.largest_graph_ops, nops);
  if (nops >= 2) g_stats.ops_fused += nops;
  // Liveness of stores: dead tensors and overwritten memory are never written.
  std::vector<uint8_t> live(p.stores.size());
  std::vector<StorageStrong> stored(p.stores.size());  // per store: its memory, held while it is written
  for (size_t s = 0; s < p.stores.size(); ++s) {
    Store& st = p.stores[s];
    if (!st.overwritten) stored[s] = st.storage.lock();
    live[s] = stored[s] ? 1 : 0;
    p.mix(live[s] | (st.keep_aside ? 2 : 0));
    if (!live[s]) {
      g_stats.stores_skipped++;
      g_stats.bytes_not_materialized += static_cast<uint64_t>(st.bytes);
    }
  }
  std::shared_ptr<FusedProgram>* cached = g_cache.find(p.key, p.hash);
  std::shared_ptr<FusedProgram> fp = cached ? *cached : nullptr;
  static uint64_t consecutive_misses = 0;
  if (fp) {
    g_stats.graph_cache_hits++;
    consecutive_misses = 0;
  } else {
    if (++consecutive_misses == kMissesBeforeWarning) {
      TORCH_WARN_ONCE("torch_tpu (fused mode): the last ", kMissesBeforeWarning,
                      " flushes each compiled a new graph. Graphs repeat (and hit the cache) when a loop "
                      "records the same ops between host reads; shapes that change every iteration, or "
                      "flushes at varying points (size cap, view reads), prevent that. "
                      "TORCH_TPU_DEBUG_FUSION=1 prints each flush and its cause.");
    }
    auto start = std::chrono::steady_clock::now();
    fp = compose(p, live);
    g_stats.compile_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    g_stats.graphs_compiled++;
    if (g_debug) {
      std::cerr << "[torch_tpu fusion] compiled a graph of " << nops << " ops, " << fp->graph.size()
                << " IR nodes:\n";
      for (size_t k = 0; k < nops; ++k) {
        std::cerr << "  op " << k << ": " << p.ops[k].info->qualname << "." << p.ops[k].info->overload
                  << (p.ops[k].source_line ? "  (" + *p.ops[k].source_line + ")" : "") << "\n";
      }
      std::cerr << fp->executable->describe() << std::flush;
    }
    fp->op_programs.reserve(nops);
    for (size_t k = 0; k < nops; ++k) fp->op_programs.push_back(p.ops[k].program);
    g_cache.insert(p.key, p.hash, fp);
  }
  g_stats.kernels_launched += static_cast<uint64_t>(fp->stats.steps);
  metrics().programs_executed++;
  if (g_debug) {
    std::cerr << "[torch_tpu fusion] flush (" << device::flush_cause_name(cause) << "): " << nops << " ops, "
              << fp->stats.steps << " kernels, " << fp->stats.clusters << " fused clusters, "
              << std::count(live.begin(), live.end(), 0) << " of " << live.size() << " stores skipped\n"
              << std::flush;
  }
  auto work = std::make_unique<FusedWork>();
  work->program = fp;
  work->cause = device::flush_cause_name(cause);
  work->device = p.stream.device_index();
  work->stream_id = p.stream.id();
  work->inputs.reserve(p.slots.size());
  for (size_t j = 0; j < p.slots.size(); ++j) {
    work->inputs.push_back(std::move(p.slots[j].binding));
    work->inputs.back().snapshot = fp->snapshot[j] != 0;
    work->inputs.back().owner = std::move(p.slots[j].keep);
  }
  for (size_t s = 0; s < p.stores.size(); ++s) {
    if (!live[s]) continue;
    work->written.push_back(std::move(p.stores[s].storage));
    work->fresh.push_back(p.stores[s].fresh ? 1 : 0);
    runtime::OutputTarget o{fp->store_node[s], std::move(p.stores[s].dest)};
    o.allow_direct = !p.stores[s].keep_aside;
    o.dest.owner = std::move(stored[s]);
    work->outputs.push_back(std::move(o));
  }
  work->ops.reserve(nops);
  work->source_lines.reserve(nops);
  for (const auto& op : p.ops) {
    work->ops.push_back(op.info);
    work->source_lines.push_back(op.source_line);
  }
  c10::Stream stream = p.stream;
  const int graphs = host_waits_after(cause) ? 0 : p.graphs_since_wait + 1;
  p = Pending();
  p.stream = stream;
  p.graphs_since_wait = graphs;
  if (graphs > 0) g_slow_start_advanced.store(true, std::memory_order_relaxed);
  return work;
}

// Work queued per stream behind a new graph is bounded (mostly graphs, in fused mode): a graph
// holds its tensors (the dead ones too) until it has run, so a host racing dozens of 64-op graphs
// ahead of the device keeps a whole step's freed memory alive (GPT-2 width: fused peak 86 MiB vs
// strict's 69 MiB with no bound). Two queued graphs already keep the device busy while the host
// records the next one.
constexpr uint64_t kMaxQueuedGraphs = 2;

// Always on the stream's worker, even when the host is about to wait: the worker runs ATen with
// one OpenMP thread, while the calling thread's OpenMP team would spin-wait against it (and
// against the next step's recording) on a small machine.
// The graph is enqueued before g_mu is released, and only then stops counting as pending: with
// threads recording concurrently, graphs then reach the stream in the order they were taken
// (a later graph may read this one's values), and a host read on another thread that finds
// nothing pending finds this graph queued, so its wait covers it. The run-ahead bound waits
// outside the lock.
void flush_device_locked(std::unique_lock<std::mutex>& lock, c10::DeviceIndex device, device::FlushCause cause) {
  auto it = g_pending.find(device);
  if (it == g_pending.end() || it->second.ops.empty()) return;
  c10::Stream stream = it->second.stream;
  const int nops = static_cast<int>(it->second.ops.size());
  auto work = take_locked(it->second, cause);
  uint64_t ticket;
  {
    // No longer pending once queued, or dropped (enqueue rethrows an earlier graph's error).
    struct Uncount {
      int n;
      ~Uncount() { g_pending_ops -= n; }
    } uncount{nops};
    ticket = device::enqueue_unflushed(stream, std::move(work));
  }
  lock.unlock();
  if (ticket > kMaxQueuedGraphs) device::wait_for_ticket(stream, ticket - kMaxQueuedGraphs);
  lock.lock();
}

void flush_hook(c10::DeviceIndex device, device::FlushCause cause) {
  if (g_pending_ops.load(std::memory_order_acquire) == 0) {
    // Nothing to hand over, but the host is about to wait all the same (the last graph was
    // flushed at the size cap): the graphs after the wait start small again.
    if (host_waits_after(cause) && g_slow_start_advanced.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> g(g_mu);
      bool advanced = false;
      for (auto& [d, p] : g_pending) {
        if (device < 0 || d == device) p.graphs_since_wait = 0;
        advanced |= p.graphs_since_wait > 0;
      }
      g_slow_start_advanced.store(advanced, std::memory_order_relaxed);
    }
    return;
  }
  if (cause == device::FlushCause::kHostRead && g_source_line_hook != nullptr) {
    const std::string* line = g_source_line_hook();
    std::lock_guard<std::mutex> g(g_mu);
    if (line != nullptr) g_host_read_lines[*line]++;
  }
  fused_flush(device, cause);
}

const bool g_hook_installed = [] {
  device::set_pending_flush_hook(&flush_hook);
  return true;
}();

}  // namespace

void fused_flush(c10::DeviceIndex device, device::FlushCause cause) {
  check_not_in_bad_fork();  // the pending graph is the parent's (common/fork_guard.h)
  std::unique_lock<std::mutex> lock(g_mu);
  if (device >= 0) {
    flush_device_locked(lock, device, cause);
    return;
  }
  std::vector<c10::DeviceIndex> devices;
  for (auto& [d, p] : g_pending) {
    if (!p.ops.empty()) devices.push_back(d);
  }
  for (auto d : devices) flush_device_locked(lock, d, cause);
}

void fused_record(const std::shared_ptr<compiler::Program>& program, const OpInfo& info, const CallState& call,
                  const std::vector<at::Tensor>& news, runtime::RngState rng) {
  (void)g_hook_installed;
  check_not_in_bad_fork();
  const std::string* line = provenance_enabled() && g_source_line_hook != nullptr ? g_source_line_hook() : nullptr;
  const c10::DeviceIndex device = call.device.index();
  const c10::Stream stream = device::current_stream(device);
  std::unique_lock<std::mutex> lock(g_mu);
  static bool fork_noted = false;  // guarded by g_mu
  if (!fork_noted) {
    fork_noted = true;
    note_runtime_thread_started();  // a forked child must not run this process's pending graph
  }
  Pending& p = g_pending[device];
  // A graph belongs to one stream; an op on another stream starts a new graph.
  if (!p.ops.empty() && p.stream != stream) flush_device_locked(lock, device, device::FlushCause::kStreamEvent);
  p.stream = stream;
  // Reads the graph cannot express from its own values flush it first: the op then loads memory.
  static thread_local std::vector<Resolution> res;  // reused: no allocation per recorded op
  res.resize(call.bindings.size());
  for (int pass = 0; pass < 2; ++pass) {
    bool flush = false;
    for (size_t b = 0; b < call.bindings.size(); ++b) {
      res[b] = Resolution();
      if (call.bindings[b].kind != runtime::Binding::Kind::Tensor || !call.tensors[b].defined() ||
          b >= program->reads_binding.size() || !program->reads_binding[b]) {
        continue;
      }
      res[b] = resolve(p, call.tensors[b]);
      flush |= res[b].needs_flush;
    }
    if (!flush) break;
    TPU_CHECK(pass == 0, "fused mode: an op's reads still need a flush after flushing");
    if (g_debug) {
      for (size_t b = 0; b < call.bindings.size(); ++b) {
        if (!res[b].needs_flush) continue;
        const at::Tensor& t = call.tensors[b];
        std::cerr << "[torch_tpu fusion] " << info.qualname << " reads a pending value through a view the graph "
                  << "cannot express (sizes " << t.sizes() << ", strides " << t.strides() << ", offset "
                  << t.storage_offset() << "): flushing\n";
      }
    }
    flush_device_locked(lock, device, device::FlushCause::kViewRead);
  }
  const auto k = static_cast<int32_t>(p.ops.size());
  PendingOp op;
  op.program = program;
  op.info = &info;
  op.source_begin = static_cast<int32_t>(p.sources.size());
  op.store_begin = static_cast<int32_t>(p.stores.size());
  op.source_line = line;
  p.mix(reinterpret_cast<intptr_t>(program.get()));
  for (size_t b = 0; b < call.bindings.size(); ++b) {
    const runtime::Binding& binding = call.bindings[b];
    Source s;  // kUnused unless read
    if (b >= program->reads_binding.size() || !program->reads_binding[b]) {
      p.mix(-4);  // not read (an out= target): no load, no reference to its tensor
    } else if (binding.kind == runtime::Binding::Kind::Tensor &&
               (res[b].source.kind == Source::kValue || res[b].source.kind == Source::kMerged)) {
      s = res[b].source;
      if (s.kind == Source::kValue) {
        p.mix(k - s.index);
        p.mix(s.node);
      } else {
        p.mix(-5);
        p.mix(s.index);
      }
      if (!res[b].transform.empty()) {
        s.transform = static_cast<int32_t>(p.transforms.size());
        for (const auto& n : res[b].transform) p.mix(static_cast<int64_t>(ir::hash_node(n)));
        p.transforms.push_back(std::move(res[b].transform));
      }
    } else {
      Slot slot;
      slot.binding = binding;
      slot.op = k;
      if (binding.kind == runtime::Binding::Kind::Tensor) {
        const at::Tensor& t = call.tensors[b];
        slot.storage = t.storage().unsafeGetStorageImpl();
        slot.keep = StorageStrong::reclaim_copy(slot.storage);
        StorageState& ss = p.storages[slot.storage];
        p.mix(-1 - ss.last_load_slot);  // which earlier loads share this memory (snapshot analysis)
        ss.last_load_slot = static_cast<int32_t>(p.slots.size());
        slot.memory_class = memory_class_of(p, ss);
      } else {
        p.mix(-2);
        slot.memory_class = p.memory_classes++;  // a scalar: no memory to share
      }
      s.kind = Source::kSlot;
      s.index = static_cast<int32_t>(p.slots.size());
      p.slots.push_back(std::move(slot));
    }
    p.sources.push_back(s);
  }
  if (program->rng_counters > 0) {
    op.rng_slot = static_cast<int32_t>(p.slots.size());
    for (uint64_t v : {rng.seed, rng.offset}) {
      Slot slot;
      slot.binding = long_scalar(v);
      slot.op = k;
      slot.memory_class = p.memory_classes++;
      p.slots.push_back(std::move(slot));
    }
    p.mix(-3);
  }
  for (const auto& o : program->outputs) {
    const at::Tensor& t = o.target >= 0 ? call.tensors[static_cast<size_t>(o.target)]
                                        : news[static_cast<size_t>(o.new_index)];
    Store st;
    st.storage = StorageWeak(t.storage().getWeakStorageImpl());
    st.dest = tensor_binding(t);
    st.offset = t.is_complex() ? 2 * t.storage_offset() : t.storage_offset();  // in st.dest.dtype's units
    st.op = k;
    st.node = o.node;
    st.bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.itemsize());
    StorageState& ss = p.storages[t.storage().unsafeGetStorageImpl()];
    if (ss.last_store < 0 && ss.last_load_slot < 0) ss.fresh = true;  // first touched by this write
    p.mix(ss.last_load_slot);
    st.memory_class = memory_class_of(p, ss);
    st.fresh = ss.fresh;
    if (ss.last_store >= 0) {
      Store& prev = p.stores[static_cast<size_t>(ss.last_store)];
      const bool same = prev.offset == st.offset && prev.dest.sizes == st.dest.sizes &&
                        prev.dest.strides == st.dest.strides && prev.dest.dtype == st.dest.dtype;
      if (same) {
        prev.overwritten = true;
      } else {
        prev.keep_aside = true;  // its value may be read while this store rewrites part of it
      }
      p.mix(same ? 1 : 2);
    } else {
      p.mix(0);
    }
    // The storage's readable value: a write through a view into a contiguous value the graph
    // holds is merged into it; any other write becomes the value of the region it covers.
    StorageValue& v = ss.value;
    const bool same_region = v.valid && v.offset == st.offset && v.sizes == st.dest.sizes &&
                             v.strides == st.dest.strides && v.dtype == st.dest.dtype;
    if (!same_region && v.valid && v.dtype == st.dest.dtype && is_contiguous(v.sizes, v.strides) &&
        can_update(v.offset, v.sizes, st.offset, st.dest.sizes, st.dest.strides)) {
      Merge mg;
      mg.base = v.source;
      mg.op = k;
      mg.node = o.node;
      mg.w_offset = v.offset;
      mg.w_sizes.assign(v.sizes.begin(), v.sizes.end());
      mg.v_offset = st.offset;
      mg.v_sizes.assign(st.dest.sizes.begin(), st.dest.sizes.end());
      mg.v_strides.assign(st.dest.strides.begin(), st.dest.strides.end());
      for (int64_t w : {int64_t{3}, mg.v_offset - mg.w_offset}) p.mix(w);
      for (int64_t w : mg.v_sizes) p.mix(w);
      for (int64_t w : mg.v_strides) p.mix(w);
      v.source = Source{Source::kMerged, static_cast<int32_t>(p.merges.size()), 0, -1};
      p.merges.push_back(std::move(mg));
    } else {
      v.valid = true;
      v.source = Source{Source::kValue, k, o.node, -1};
      v.offset = st.offset;
      v.sizes = st.dest.sizes;
      v.strides = st.dest.strides;
      v.dtype = st.dest.dtype;
      p.mix(4);
      for (int64_t w : v.strides) p.mix(w);  // whether later reads can be expressed depends on them
    }
    ss.last_store = static_cast<int32_t>(p.stores.size());
    p.stores.push_back(std::move(st));
  }
  p.ops.push_back(std::move(op));
  g_pending_ops++;
  g_stats.ops_recorded++;
  p.contracts = p.contracts || program->contracts;
  const auto nops = static_cast<int64_t>(p.ops.size());
  if (nops >= max_ops()) {
    flush_device_locked(lock, device, device::FlushCause::kSizeCap);
  } else if (p.contracts && nops >= slow_start_ops(p.graphs_since_wait)) {
    flush_device_locked(lock, device, device::FlushCause::kSlowStart);
  }
}

void set_debug_fusion(bool enabled) { g_debug = enabled; }
bool debug_fusion() { return g_debug; }

FusedStats fused_stats() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_stats;
}

void reset_fused_stats() {
  std::lock_guard<std::mutex> g(g_mu);
  g_stats = FusedStats();
  g_host_read_lines.clear();
}

std::vector<std::pair<std::string, uint64_t>> top_host_read_lines(size_t n) {
  std::vector<std::pair<std::string, uint64_t>> out;
  {
    std::lock_guard<std::mutex> g(g_mu);
    out.assign(g_host_read_lines.begin(), g_host_read_lines.end());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (out.size() > n) out.resize(n);
  return out;
}

void set_source_line_hook(SourceLineHook hook) { g_source_line_hook = hook; }

const std::string* current_source_line() { return g_source_line_hook != nullptr ? g_source_line_hook() : nullptr; }

}  // namespace torch_tpu::exec
