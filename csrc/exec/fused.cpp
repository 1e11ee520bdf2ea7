// The DeferAndFuse engine: recording, keys, composition and flushing (see fused.h).
#include "exec/fused.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <unordered_map>

#include "common/check.h"
#include "common/config.h"
#include "device/device.h"
#include "exec/metrics.h"
#include "exec/mode.h"
#include "ir/printer.h"

namespace torch_tpu::exec {
namespace {

using StorageWeak = c10::weak_intrusive_ptr<c10::StorageImpl>;
using StorageStrong = c10::intrusive_ptr<c10::StorageImpl>;

// Where one binding of a recorded op's program comes from.
struct Source {
  enum Kind : uint8_t { kSlot, kValue, kUnused } kind = kUnused;
  int32_t index = 0;       // kSlot: composed input slot; kValue: the producing pending op
  int32_t node = 0;        // kValue: node id in the producing op's program
  int32_t transform = -1;  // kValue: index into Pending::transforms, or -1 (read as stored)
};

// One input binding of the composed program: a memory load or a runtime scalar.
struct Slot {
  runtime::Binding binding;
  at::Tensor tensor;                      // loads: keeps the memory alive until the flush ran
  c10::StorageImpl* storage = nullptr;    // loads only
  int32_t op = -1;
};

// One output of a recorded op: the value of `node` written into `dest` (memory of `storage`).
struct Store {
  StorageWeak storage{StorageStrong()};
  runtime::Binding dest;
  int64_t offset = 0;  // in elements, from the storage start
  int32_t op = 0;
  int32_t node = 0;
  int64_t bytes = 0;
  bool overwritten = false;  // a later store of this graph writes exactly the same memory
  bool keep_aside = false;   // a later store writes part of this memory while the value is still read
};

struct PendingOp {
  std::shared_ptr<compiler::Program> program;
  const OpInfo* info = nullptr;
  int32_t source_begin = 0;  // one Source per program binding
  int32_t rng_slot = -1;     // two scalar slots (seed, offset) when the program draws random bits
  int32_t store_begin = 0;   // one Store per program output
  std::string source_line;
};

// What the graph knows about one storage it touches.
struct StorageState {
  int32_t last_store = -1;
  int32_t last_load_slot = -1;
};

struct Pending {
  c10::Stream stream{c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  std::vector<PendingOp> ops;
  std::vector<Source> sources;
  std::vector<std::vector<ir::Node>> transforms;
  std::vector<Slot> slots;
  std::vector<Store> stores;
  std::unordered_map<const c10::StorageImpl*, StorageState> storages;
  std::vector<int64_t> key;
  uint64_t hash = 0xcbf29ce484222325ull;

  void mix(int64_t w) {
    key.push_back(w);
    hash = (hash ^ static_cast<uint64_t>(w)) * 0x100000001b3ull;
  }
};

// A compiled composition of recorded ops (what the fused cache stores).
struct FusedProgram {
  ir::Graph graph;
  std::unique_ptr<runtime::Executable> executable;
  std::vector<int32_t> store_node;  // per pending store: composed node, or -1 (not written)
  std::vector<uint8_t> snapshot;    // per slot
  std::vector<int32_t> node_op;     // composed node -> recorded op index
  runtime::ExecutableStats stats;
};

struct FusedCache {
  struct Entry {
    std::vector<int64_t> key;
    std::shared_ptr<FusedProgram> program;
    uint64_t last_use = 0;
  };
  std::unordered_multimap<uint64_t, Entry> map;
  uint64_t clock = 0;
  size_t capacity = static_cast<size_t>(std::max<int64_t>(1, config::get_int("TORCH_TPU_PROGRAM_CACHE_SIZE")));

  std::shared_ptr<FusedProgram> find(const std::vector<int64_t>& key, uint64_t hash) {
    auto [lo, hi] = map.equal_range(hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second.key == key) {
        it->second.last_use = ++clock;
        return it->second.program;
      }
    }
    return nullptr;
  }
  void insert(std::vector<int64_t> key, uint64_t hash, std::shared_ptr<FusedProgram> p) {
    if (map.size() >= capacity) {  // evict the least recently used (rare: a scan is fine)
      auto victim = std::min_element(map.begin(), map.end(), [](const auto& a, const auto& b) {
        return a.second.last_use < b.second.last_use;
      });
      map.erase(victim);
    }
    map.emplace(hash, Entry{std::move(key), std::move(p), ++clock});
  }
};

std::mutex g_mu;  // guards everything below
std::map<c10::DeviceIndex, Pending> g_pending;
FusedCache g_cache;
FusedStats g_stats;
std::map<std::string, uint64_t> g_host_read_lines;
std::atomic<int> g_pending_ops{0};  // fast "anything pending?" for the flush hook
std::atomic<bool> g_debug{config::get_bool("TORCH_TPU_DEBUG_FUSION")};
SourceLineHook g_source_line_hook = nullptr;

int64_t max_ops() {
  static const int64_t v = std::max<int64_t>(1, config::get_int("TORCH_TPU_FUSED_MAX_OPS"));
  return v;
}

bool provenance_enabled() {
  static const bool v = config::get_bool("TORCH_TPU_FUSED_PROVENANCE");
  return v;
}

bool is_contiguous(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

ir::Node view_node(ir::OpKind kind, ir::DType dtype, std::vector<int64_t> shape, std::vector<int64_t> iattrs) {
  ir::Node n;
  n.kind = kind;
  n.dtype = dtype;
  n.shape = std::move(shape);
  n.operands = {-1};
  n.iattrs = std::move(iattrs);
  return n;
}

// Appends to `out` the nodes (operand -1: the previous value) that turn a value stored
// contiguously at element offset `w_offset` with shape `w_sizes` into the view (r_offset,
// r_sizes, r_strides) of the same storage: reshape to rows of the view's outermost stride, slice
// the view's box out of them, transpose into the view's dimension order, broadcast stride-0
// dimensions. False when no such chain exists (overlapping strides, a box that wraps rows).
bool express_view(int64_t w_offset, c10::IntArrayRef w_sizes, ir::DType dtype, int64_t r_offset,
                  c10::IntArrayRef r_sizes, c10::IntArrayRef r_strides, std::vector<ir::Node>& out) {
  const int64_t n = c10::multiply_integers(w_sizes);
  const int64_t rel = r_offset - w_offset;
  if (rel < 0 || n == 0) return false;
  struct Dim {
    int64_t size, stride;
    size_t pos;
  };
  std::vector<Dim> real;
  bool broadcast = false;
  int64_t last = rel;
  for (size_t d = 0; d < r_sizes.size(); ++d) {
    if (r_sizes[d] == 0) return false;
    if (r_sizes[d] == 1) continue;
    if (r_strides[d] == 0) {
      broadcast = true;
      continue;
    }
    if (r_strides[d] < 0) return false;
    real.push_back({r_sizes[d], r_strides[d], d});
    last += (r_sizes[d] - 1) * r_strides[d];
  }
  if (last >= n) return false;
  std::stable_sort(real.begin(), real.end(), [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  for (size_t k = 0; k + 1 < real.size(); ++k) {
    if (real[k].stride == real[k + 1].stride || real[k].stride % real[k + 1].stride != 0) return false;
  }
  std::vector<int64_t> cur(w_sizes.begin(), w_sizes.end());
  auto reshape_to = [&](const std::vector<int64_t>& shape) {
    if (shape != cur) {
      out.push_back(view_node(ir::OpKind::kReshape, dtype, shape, {}));
      cur = shape;
    }
  };
  auto slice = [&](const std::vector<int64_t>& start, const std::vector<int64_t>& limit) {
    std::vector<int64_t> shape(start.size());
    bool full = true;
    for (size_t d = 0; d < start.size(); ++d) {
      shape[d] = limit[d] - start[d];
      full &= start[d] == 0 && limit[d] == cur[d];
    }
    if (full) return;
    std::vector<int64_t> attrs = start;
    attrs.insert(attrs.end(), limit.begin(), limit.end());
    attrs.insert(attrs.end(), start.size(), 1);
    out.push_back(view_node(ir::OpKind::kSlice, dtype, shape, std::move(attrs)));
    cur = shape;
  };
  const size_t m = real.size();
  if (m == 0) {  // one element, possibly broadcast
    reshape_to({n});
    slice({rel}, {rel + 1});
  } else {
    const int64_t s0 = real[0].stride;
    const int64_t len = (last / s0 + 1) * s0;  // whole rows of the outermost dimension
    if (len > n) return false;
    reshape_to({n});
    slice({0}, {len});
    std::vector<int64_t> base{len / s0};
    for (size_t k = 1; k < m; ++k) base.push_back(real[k - 1].stride / real[k].stride);
    base.push_back(real[m - 1].stride);
    reshape_to(base);
    std::vector<int64_t> start(m + 1), limit(m + 1);
    int64_t rem = rel;
    for (size_t k = 0; k < m; ++k) {
      start[k] = rem / real[k].stride;
      rem %= real[k].stride;
      limit[k] = start[k] + real[k].size;
      if (limit[k] > base[k]) return false;
    }
    start[m] = rem;
    limit[m] = rem + 1;
    slice(start, limit);
  }
  std::vector<int64_t> sorted_sizes;
  for (const Dim& d : real) sorted_sizes.push_back(d.size);
  reshape_to(sorted_sizes);
  // Dimension order of the view: real dims sorted by their position in the view.
  std::vector<size_t> by_pos(m);
  for (size_t k = 0; k < m; ++k) by_pos[k] = k;
  std::sort(by_pos.begin(), by_pos.end(), [&](size_t a, size_t b) { return real[a].pos < real[b].pos; });
  bool identity = true;
  std::vector<int64_t> perm(m), permuted(m);
  for (size_t i = 0; i < m; ++i) {
    perm[i] = static_cast<int64_t>(by_pos[i]);
    permuted[i] = real[by_pos[i]].size;
    identity &= by_pos[i] == i;
  }
  if (!identity) {
    out.push_back(view_node(ir::OpKind::kTranspose, dtype, permuted, perm));
    cur = permuted;
  }
  std::vector<int64_t> with_ones(r_sizes.begin(), r_sizes.end());
  for (size_t d = 0; d < r_sizes.size(); ++d) {
    if (r_sizes[d] > 1 && r_strides[d] == 0) with_ones[d] = 1;
  }
  reshape_to(with_ones);
  if (broadcast) {
    std::vector<int64_t> dims(r_sizes.size());
    for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
    out.push_back(view_node(ir::OpKind::kBroadcastInDim, dtype, std::vector<int64_t>(r_sizes.begin(), r_sizes.end()),
                            std::move(dims)));
  }
  return true;
}

ir::DType ir_dtype(c10::ScalarType t) { return static_cast<ir::DType>(t); }

// How a tensor argument of an op being recorded reads the pending graph.
struct Resolution {
  bool needs_flush = false;
  Source source;
  std::vector<ir::Node> transform;
};

Resolution resolve(const Pending& p, const at::Tensor& t) {
  Resolution r;
  if (t.numel() == 0) return r;  // nothing to read: a load of no memory
  auto it = p.storages.find(t.storage().unsafeGetStorageImpl());
  if (it == p.storages.end() || it->second.last_store < 0) return r;  // a load from memory
  const Store& w = p.stores[static_cast<size_t>(it->second.last_store)];
  r.source.kind = Source::kValue;
  r.source.index = w.op;
  r.source.node = w.node;
  if (w.dest.dtype != t.scalar_type()) {
    r.needs_flush = true;
    return r;
  }
  if (w.offset == t.storage_offset() && c10::IntArrayRef(w.dest.sizes).equals(t.sizes()) &&
      c10::IntArrayRef(w.dest.strides).equals(t.strides())) {
    return r;  // read exactly as written
  }
  if (!is_contiguous(w.dest.sizes, w.dest.strides) ||
      !express_view(w.offset, w.dest.sizes, ir_dtype(t.scalar_type()), t.storage_offset(), t.sizes(), t.strides(),
                    r.transform)) {
    r.needs_flush = true;
  }
  return r;
}

runtime::Binding long_scalar(uint64_t v) {
  runtime::Binding b;
  b.kind = runtime::Binding::Kind::Scalar;
  b.dtype = c10::kLong;
  b.i = static_cast<int64_t>(v);
  return b;
}

// -- composition -----------------------------------------------------------------------------

bool is_view_like(ir::OpKind k) {
  return k == ir::OpKind::kParameter || k == ir::OpKind::kReshape || k == ir::OpKind::kTranspose ||
         k == ir::OpKind::kSlice || k == ir::OpKind::kBroadcastInDim || k == ir::OpKind::kConvert;
}

std::shared_ptr<FusedProgram> compose(const Pending& p, const std::vector<uint8_t>& live) {
  auto fp = std::make_shared<FusedProgram>();
  ir::Graph& g = fp->graph;
  std::vector<std::vector<int32_t>> remap(p.ops.size());
  int32_t current_op = 0;
  auto add = [&](ir::Node n) {
    fp->node_op.push_back(current_op);
    return g.add(std::move(n));
  };
  auto param = [&](const ir::Node& like, int32_t slot) {
    ir::Node n = like;
    n.iattrs = {slot};
    return add(std::move(n));
  };
  fp->store_node.assign(p.stores.size(), -1);
  for (size_t k = 0; k < p.ops.size(); ++k) {
    current_op = static_cast<int32_t>(k);
    const PendingOp& op = p.ops[k];
    const ir::Graph& src = op.program->graph;
    auto& rm = remap[k];
    rm.resize(static_cast<size_t>(src.size()));
    for (int32_t i = 0; i < src.size(); ++i) {
      const ir::Node& node = src.node(i);
      if (node.kind != ir::OpKind::kParameter) {
        ir::Node copy = node;
        for (auto& o : copy.operands) o = rm[static_cast<size_t>(o)];
        rm[static_cast<size_t>(i)] = add(std::move(copy));
        continue;
      }
      const int64_t b = node.iattrs.at(0);
      if (b < 0) {
        rm[static_cast<size_t>(i)] = param(node, op.rng_slot + (b == ir::kRngSeedBinding ? 0 : 1));
        continue;
      }
      const Source& s = p.sources[static_cast<size_t>(op.source_begin + b)];
      if (s.kind == Source::kUnused) {
        rm[static_cast<size_t>(i)] = -1;  // nothing reads it
        continue;
      }
      if (s.kind == Source::kSlot) {
        rm[static_cast<size_t>(i)] = param(node, s.index);
        continue;
      }
      int32_t cur = remap[static_cast<size_t>(s.index)][static_cast<size_t>(s.node)];
      if (s.transform >= 0) {
        for (ir::Node t : p.transforms[static_cast<size_t>(s.transform)]) {
          t.operands = {cur};
          cur = add(std::move(t));
        }
      }
      if (g.node(cur).shape != node.shape) {
        ir::Node r = view_node(ir::OpKind::kReshape, g.node(cur).dtype, node.shape, {});
        r.operands = {cur};
        cur = add(std::move(r));
      }
      if (g.node(cur).dtype != node.dtype) {
        ir::Node c = view_node(ir::OpKind::kConvert, node.dtype, node.shape, {});
        c.operands = {cur};
        cur = add(std::move(c));
      }
      rm[static_cast<size_t>(i)] = cur;
    }
    // Stores of this op happen at its position: a stored value computed by an earlier op (or a
    // parameter, bound at program start) is materialized here by an identity convert.
    for (size_t j = 0; j < op.program->outputs.size(); ++j) {
      const size_t s = static_cast<size_t>(op.store_begin) + j;
      if (!live[s]) continue;
      int32_t node = rm[static_cast<size_t>(op.program->outputs[j].node)];
      if (fp->node_op[static_cast<size_t>(node)] != current_op || g.node(node).kind == ir::OpKind::kParameter) {
        ir::Node c = view_node(ir::OpKind::kConvert, g.node(node).dtype, g.node(node).shape, {});
        c.operands = {node};
        node = add(std::move(c));
      }
      fp->store_node[s] = node;
    }
  }
  // Snapshots: a load whose memory a later op's store overwrites, while nodes at or after that
  // op still read the loaded value (or a view-like alias of it).
  std::vector<int32_t> root(static_cast<size_t>(g.size()), -1);
  std::vector<int32_t> last_use_op(p.slots.size(), -1);
  for (int32_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(i);
    if (n.kind == ir::OpKind::kParameter) {
      root[static_cast<size_t>(i)] = static_cast<int32_t>(n.iattrs[0]);
      continue;
    }
    for (int32_t o : n.operands) {
      int32_t r = root[static_cast<size_t>(o)];
      if (r >= 0) {
        last_use_op[static_cast<size_t>(r)] = std::max(last_use_op[static_cast<size_t>(r)], fp->node_op[static_cast<size_t>(i)]);
      }
    }
    if (is_view_like(n.kind) && !n.operands.empty()) root[static_cast<size_t>(i)] = root[static_cast<size_t>(n.operands[0])];
  }
  fp->snapshot.assign(p.slots.size(), 0);
  for (size_t j = 0; j < p.slots.size(); ++j) {
    const Slot& slot = p.slots[j];
    if (slot.storage == nullptr || last_use_op[j] < 0) continue;
    for (size_t s = 0; s < p.stores.size(); ++s) {
      if (!live[s] || p.stores[s].op <= slot.op || p.stores[s].storage._unsafe_get_target() != slot.storage) continue;
      if (p.stores[s].op <= last_use_op[j]) fp->snapshot[j] = 1;
      break;
    }
  }
  std::vector<int32_t> outputs;
  for (int32_t node : fp->store_node) {
    if (node >= 0) outputs.push_back(node);
  }
  std::sort(outputs.begin(), outputs.end());
  outputs.erase(std::unique(outputs.begin(), outputs.end()), outputs.end());
  fp->executable = selected_runtime().compile(g, outputs);
  fp->stats = fp->executable->stats();
  return fp;
}

// -- running ---------------------------------------------------------------------------------

struct FusedWork final : device::Work {
  std::shared_ptr<FusedProgram> program;
  std::vector<runtime::Binding> inputs;
  std::vector<runtime::OutputTarget> outputs;
  std::vector<at::Tensor> loads;
  std::vector<StorageStrong> stored;
  std::vector<std::string> op_names;     // per recorded op
  std::vector<std::string> source_lines;  // per recorded op ("" when not recorded)
  const char* cause = "";

  void run() override {
    try {
      program->executable->run(inputs, outputs, runtime::RngState{});
    } catch (c10::Error& e) {
      int32_t node = runtime::last_failed_node();
      std::string where;
      if (node >= 0 && static_cast<size_t>(node) < program->node_op.size()) {
        auto op = static_cast<size_t>(program->node_op[static_cast<size_t>(node)]);
        where = "in " + op_names[op] + (source_lines[op].empty() ? "" : " recorded at " + source_lines[op]);
      } else {
        where = "in one of " + std::to_string(op_names.size()) + " ops";
      }
      e.add_context("torch_tpu (fused mode): raised when a pending graph ran (flushed by " + std::string(cause) +
                    "), " + where);
      throw;
    }
  }
};

// Takes the pending graph of one device (caller holds g_mu) and returns the work that runs it.
std::unique_ptr<FusedWork> take_locked(Pending& p, device::FlushCause cause) {
  const size_t nops = p.ops.size();
  g_pending_ops -= static_cast<int>(nops);
  g_stats.flushes_by_cause[static_cast<int>(cause)]++;
  g_stats.largest_graph_ops = std::max<uint64_t>(g_stats.largest_graph_ops, nops);
  if (nops >= 2) g_stats.ops_fused += nops;
  // Liveness of stores: dead tensors and overwritten memory are never written.
  std::vector<uint8_t> live(p.stores.size());
  std::vector<StorageStrong> stored;
  for (size_t s = 0; s < p.stores.size(); ++s) {
    Store& st = p.stores[s];
    StorageStrong strong = st.overwritten ? StorageStrong() : st.storage.lock();
    live[s] = strong ? 1 : 0;
    p.mix(live[s] | (st.keep_aside ? 2 : 0));
    if (strong) {
      stored.push_back(std::move(strong));
    } else {
      g_stats.stores_skipped++;
      g_stats.bytes_not_materialized += static_cast<uint64_t>(st.bytes);
    }
  }
  std::shared_ptr<FusedProgram> fp = g_cache.find(p.key, p.hash);
  if (fp) {
    g_stats.graph_cache_hits++;
  } else {
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
                  << (p.ops[k].source_line.empty() ? "" : "  (" + p.ops[k].source_line + ")") << "\n";
      }
      std::cerr << fp->executable->describe() << std::flush;
    }
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
  work->inputs.reserve(p.slots.size());
  for (size_t j = 0; j < p.slots.size(); ++j) {
    work->inputs.push_back(std::move(p.slots[j].binding));
    work->inputs.back().snapshot = fp->snapshot[j] != 0;
    if (p.slots[j].tensor.defined()) work->loads.push_back(std::move(p.slots[j].tensor));
  }
  for (size_t s = 0; s < p.stores.size(); ++s) {
    if (!live[s]) continue;
    runtime::OutputTarget o{fp->store_node[s], std::move(p.stores[s].dest)};
    o.allow_direct = !p.stores[s].keep_aside;
    work->outputs.push_back(std::move(o));
  }
  work->stored = std::move(stored);
  work->op_names.reserve(nops);
  work->source_lines.reserve(nops);
  for (auto& op : p.ops) {
    work->op_names.push_back(op.info->qualname + (op.info->overload.empty() ? "" : "." + op.info->overload));
    work->source_lines.push_back(std::move(op.source_line));
  }
  c10::Stream stream = p.stream;
  p = Pending();
  p.stream = stream;
  return work;
}

// Always on the stream's worker, even when the host is about to wait: the worker runs ATen with
// one OpenMP thread, while the calling thread's OpenMP team would spin-wait against it (and
// against the next step's recording) on a small machine.
void run_work(std::unique_ptr<FusedWork> work, const c10::Stream& stream) {
  device::enqueue_unflushed(stream, std::move(work));
}

void flush_device_locked(std::unique_lock<std::mutex>& lock, c10::DeviceIndex device, device::FlushCause cause) {
  auto it = g_pending.find(device);
  if (it == g_pending.end() || it->second.ops.empty()) return;
  c10::Stream stream = it->second.stream;
  auto work = take_locked(it->second, cause);
  lock.unlock();
  run_work(std::move(work), stream);
  lock.lock();
}

void flush_hook(c10::DeviceIndex device, device::FlushCause cause) {
  if (g_pending_ops.load(std::memory_order_acquire) == 0) return;
  if (cause == device::FlushCause::kHostRead && g_source_line_hook != nullptr) {
    std::string line = g_source_line_hook();
    std::lock_guard<std::mutex> g(g_mu);
    if (!line.empty()) g_host_read_lines[line]++;
  }
  fused_flush(device, cause);
}

const bool g_hook_installed = [] {
  device::set_pending_flush_hook(&flush_hook);
  return true;
}();

}  // namespace

void fused_flush(c10::DeviceIndex device, device::FlushCause cause) {
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
  std::string line = provenance_enabled() && g_source_line_hook != nullptr ? g_source_line_hook() : std::string();
  const c10::DeviceIndex device = call.device.index();
  const c10::Stream stream = device::current_stream(device);
  std::unique_lock<std::mutex> lock(g_mu);
  Pending& p = g_pending[device];
  // A graph belongs to one stream; an op on another stream starts a new graph.
  if (!p.ops.empty() && p.stream != stream) flush_device_locked(lock, device, device::FlushCause::kStreamEvent);
  p.stream = stream;
  // Reads the graph cannot express from its own values flush it first: the op then loads memory.
  std::vector<Resolution> res(call.bindings.size());
  for (int pass = 0; pass < 2; ++pass) {
    bool flush = false;
    for (size_t b = 0; b < call.bindings.size(); ++b) {
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
  op.source_line = std::move(line);
  p.mix(reinterpret_cast<intptr_t>(program.get()));
  for (size_t b = 0; b < call.bindings.size(); ++b) {
    const runtime::Binding& binding = call.bindings[b];
    Source s;  // kUnused unless read
    if (b >= program->reads_binding.size() || !program->reads_binding[b]) {
      p.mix(-4);  // not read (an out= target): no load, no reference to its tensor
    } else if (binding.kind == runtime::Binding::Kind::Tensor && res[b].source.kind == Source::kValue) {
      s = res[b].source;
      p.mix(k - s.index);
      p.mix(s.node);
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
        slot.tensor = t;
        slot.storage = t.storage().unsafeGetStorageImpl();
        StorageState& ss = p.storages[slot.storage];
        p.mix(-1 - ss.last_load_slot);  // which earlier loads share this memory (snapshot analysis)
        ss.last_load_slot = static_cast<int32_t>(p.slots.size());
      } else {
        p.mix(-2);
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
    st.offset = t.storage_offset();
    st.op = k;
    st.node = o.node;
    st.bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.itemsize());
    StorageState& ss = p.storages[t.storage().unsafeGetStorageImpl()];
    p.mix(ss.last_load_slot);
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
    ss.last_store = static_cast<int32_t>(p.stores.size());
    p.stores.push_back(std::move(st));
  }
  p.ops.push_back(std::move(op));
  g_pending_ops++;
  g_stats.ops_recorded++;
  if (static_cast<int64_t>(p.ops.size()) >= max_ops()) flush_device_locked(lock, device, device::FlushCause::kSizeCap);
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

}  // namespace torch_tpu::exec
