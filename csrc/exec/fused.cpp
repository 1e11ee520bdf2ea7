// The DeferAndFuse engine: recording, keys, composition and flushing (see fused.h).
#include "exec/fused.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <unordered_map>

#include "common/check.h"
#include "common/config.h"
#include "common/fork_guard.h"
#include "device/device.h"
#include "exec/metrics.h"
#include "exec/profiler.h"
#include "exec/mode.h"
#include "exec/poison.h"
#include "ir/printer.h"

namespace torch_tpu::exec {
namespace {

using StorageWeak = c10::weak_intrusive_ptr<c10::StorageImpl>;
using StorageStrong = c10::intrusive_ptr<c10::StorageImpl>;

// Where one binding of a recorded op's program comes from.
struct Source {
  enum Kind : uint8_t { kSlot, kValue, kMerged, kUnused } kind = kUnused;
  int32_t index = 0;       // kSlot: composed input slot; kValue: the producing pending op; kMerged: merge
  int32_t node = 0;        // kValue: node id in the producing op's program
  int32_t transform = -1;  // kValue: index into Pending::transforms, or -1 (read as stored)
};

// One input binding of the composed program: a memory load or a runtime scalar.
struct Slot {
  runtime::Binding binding;
  // Loads: keeps the memory alive until the run's last read of it (handed to the run as the
  // binding's owner). The storage, not the tensor: dropping a tensor that has a Python object
  // takes the GIL on the stream worker.
  StorageStrong keep;
  c10::StorageImpl* storage = nullptr;  // loads only
  int32_t op = -1;
  int32_t memory_class = 0;  // equal for slots and stores of one storage (runtime::MemoryClasses)
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
  bool fresh = false;        // the graph wrote this memory before reading it: it holds no value the graph keeps
  int32_t memory_class = 0;  // see Slot
};

struct PendingOp {
  std::shared_ptr<compiler::Program> program;
  const OpInfo* info = nullptr;
  int32_t source_begin = 0;  // one Source per program binding
  int32_t rng_slot = -1;     // two scalar slots (seed, offset) when the program draws random bits
  int32_t store_begin = 0;   // one Store per program output
  const std::string* source_line = nullptr;  // interned by the hook; null when not recorded
};

// The newest value of a region of a storage, readable as SSA: a stored node (kValue) or an
// earlier value with a partial write merged in (kMerged).
struct StorageValue {
  bool valid = false;
  Source source;
  int64_t offset = 0;
  c10::SmallVector<int64_t, 6> sizes, strides;
  c10::ScalarType dtype = c10::kFloat;
};

// A write through a view into a storage whose contiguous value the graph holds: the new value of
// the whole region is `base` with the stored node written at the view (a dynamic_update_slice).
struct Merge {
  Source base;
  int32_t op = 0, node = 0;  // the stored value
  int64_t w_offset = 0;
  std::vector<int64_t> w_sizes;
  int64_t v_offset = 0;
  std::vector<int64_t> v_sizes, v_strides;
};

// What the graph knows about one storage it touches.
struct StorageState {
  int32_t last_store = -1;
  int32_t last_load_slot = -1;
  int32_t memory_class = -1;  // numbered in order of first appearance in the graph
  bool fresh = false;         // first touched by a write (a new result, an out= or copy_ target)
  StorageValue value;
};

struct Pending {
  c10::Stream stream{c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  std::vector<PendingOp> ops;
  std::vector<Source> sources;
  std::vector<std::vector<ir::Node>> transforms;
  std::vector<Merge> merges;
  std::vector<Slot> slots;
  std::vector<Store> stores;
  std::unordered_map<const c10::StorageImpl*, StorageState> storages;
  std::vector<int64_t> key;
  uint64_t hash = 0xcbf29ce484222325ull;
  bool contracts = false;  // some recorded op holds a contraction (slow start, below)
  int32_t memory_classes = 0;  // memory classes numbered so far (slots, stores)
  // Graphs flushed since the host last waited for this device (carried across graphs).
  int graphs_since_wait = 0;

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
  // The per-op programs the cache key names by address: held so that no address in a live
  // key is reused by another program (an evicted or cleared per-op program, or one replaced
  // by a re-registered lowering, would otherwise make a stale graph match).
  std::vector<std::shared_ptr<compiler::Program>> op_programs;
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

constexpr uint64_t kMissesBeforeWarning = 64;

std::mutex g_mu;  // guards everything below
std::map<c10::DeviceIndex, Pending> g_pending;
// Never destroyed, like the per-op program cache: its executables must not be released during
// static destruction, after a PJRT plugin's driver (CUDA) has already shut down at exit.
FusedCache& g_cache = *new FusedCache;
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

bool is_contiguous(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// For a value stored densely in some dimension order (a result that kept a transposed
// operand's layout): the permutation that orders its dims by decreasing stride, so the memory
// holds transpose(value, perm) contiguously. False when the layout has gaps or overlaps.
bool dense_order(c10::IntArrayRef sizes, c10::IntArrayRef strides, std::vector<int64_t>& perm) {
  perm.resize(sizes.size());
  for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
  // Size-1 dims may carry any stride: they sort last (is_contiguous ignores them).
  auto key = [&](int64_t d) { return sizes[static_cast<size_t>(d)] == 1 ? 0 : strides[static_cast<size_t>(d)]; };
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return key(a) > key(b); });
  c10::SmallVector<int64_t, 6> s, st;  // recorded per op: no heap allocation at usual ranks
  for (int64_t d : perm) {
    s.push_back(sizes[static_cast<size_t>(d)]);
    st.push_back(strides[static_cast<size_t>(d)]);
  }
  return is_contiguous(s, st);
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

// How a strided view of a value stored contiguously (n elements) sits in that value: with the
// view's dimensions sorted by decreasing stride, the first `len` elements reshaped to `base`
// (rows of the outermost stride, then each stride's quotient by the next, then the innermost
// stride) contain the view as the box [start, limit) — the last base dimension sliced to one
// element. Size-1 dimensions are ignored; stride-0 dimensions are broadcasts.
struct BoxLayout {
  struct Dim {
    int64_t size, stride;
    size_t pos;  // dimension index in the view
  };
  std::vector<Dim> real;  // dims with size > 1 and stride > 0, by decreasing stride
  bool broadcast = false;
  int64_t len = 0;
  std::vector<int64_t> base, start, limit;
};

bool box_layout(int64_t n, int64_t rel, c10::IntArrayRef sizes, c10::IntArrayRef strides, BoxLayout& box) {
  if (rel < 0 || n == 0) return false;
  int64_t last = rel;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return false;
    if (sizes[d] == 1) continue;
    if (strides[d] == 0) {
      box.broadcast = true;
      continue;
    }
    if (strides[d] < 0) return false;
    box.real.push_back({sizes[d], strides[d], d});
    last += (sizes[d] - 1) * strides[d];
  }
  if (last >= n) return false;
  auto& real = box.real;
  std::stable_sort(real.begin(), real.end(), [](const auto& a, const auto& b) { return a.stride > b.stride; });
  for (size_t k = 0; k + 1 < real.size(); ++k) {
    if (real[k].stride == real[k + 1].stride || real[k].stride % real[k + 1].stride != 0) return false;
  }
  const size_t m = real.size();
  if (m == 0) {  // one element
    box.len = n;
    box.base = {n};
    box.start = {rel};
    box.limit = {rel + 1};
    return true;
  }
  const int64_t s0 = real[0].stride;
  box.len = (last / s0 + 1) * s0;  // whole rows of the outermost dimension
  if (box.len > n) return false;
  box.base = {box.len / s0};
  for (size_t k = 1; k < m; ++k) box.base.push_back(real[k - 1].stride / real[k].stride);
  box.base.push_back(real[m - 1].stride);
  box.start.assign(m + 1, 0);
  box.limit.assign(m + 1, 0);
  int64_t rem = rel;
  for (size_t k = 0; k < m; ++k) {
    box.start[k] = rem / real[k].stride;
    rem %= real[k].stride;
    box.limit[k] = box.start[k] + real[k].size;
    if (box.limit[k] > box.base[k]) return false;
  }
  box.start[m] = rem;
  box.limit[m] = rem + 1;
  return true;
}

// The view's real dims, in view order, as positions into the stride-sorted list.
std::vector<int64_t> view_order(const BoxLayout& box) {
  std::vector<int64_t> perm(box.real.size());
  for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(k);
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return box.real[static_cast<size_t>(a)].pos < box.real[static_cast<size_t>(b)].pos;
  });
  return perm;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Appends nodes to a chain (operand -1 = the previous value), skipping no-op steps.
struct Chain {
  ir::DType dtype;
  std::vector<int64_t> cur;
  std::vector<ir::Node>& out;

  void reshape(const std::vector<int64_t>& shape) {
    if (shape == cur) return;
    out.push_back(view_node(ir::OpKind::kReshape, dtype, shape, {}));
    cur = shape;
  }
  void slice(const std::vector<int64_t>& start, const std::vector<int64_t>& limit) {
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
  }
  void transpose(const std::vector<int64_t>& perm) {
    if (is_identity(perm)) return;
    std::vector<int64_t> shape(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) shape[i] = cur[static_cast<size_t>(perm[i])];
    out.push_back(view_node(ir::OpKind::kTranspose, dtype, shape, perm));
    cur = shape;
  }
};

std::vector<int64_t> sorted_sizes(const BoxLayout& box) {
  std::vector<int64_t> s;
  for (const auto& d : box.real) s.push_back(d.size);
  return s;
}

// Appends to `out` the nodes (operand -1: the previous value) that turn a value stored
// contiguously at element offset `w_offset` with shape `w_sizes` into the view (r_offset,
// r_sizes, r_strides) of the same storage: reshape to the box layout, slice the box, transpose
// into the view's dimension order, broadcast stride-0 dimensions. False when no such chain
// exists (overlapping strides, a box that wraps rows).
bool express_view(int64_t w_offset, c10::IntArrayRef w_sizes, ir::DType dtype, int64_t r_offset,
                  c10::IntArrayRef r_sizes, c10::IntArrayRef r_strides, std::vector<ir::Node>& out) {
  const int64_t n = c10::multiply_integers(w_sizes);
  BoxLayout box;
  if (!box_layout(n, r_offset - w_offset, r_sizes, r_strides, box)) return false;
  Chain c{dtype, std::vector<int64_t>(w_sizes.begin(), w_sizes.end()), out};
  c.reshape({n});
  c.slice({0}, {box.len});
  c.reshape(box.base);
  c.slice(box.start, box.limit);
  c.reshape(sorted_sizes(box));
  c.transpose(view_order(box));
  std::vector<int64_t> with_ones(r_sizes.begin(), r_sizes.end());
  for (size_t d = 0; d < r_sizes.size(); ++d) {
    if (r_sizes[d] > 1 && r_strides[d] == 0) with_ones[d] = 1;
  }
  c.reshape(with_ones);
  if (box.broadcast) {
    std::vector<int64_t> dims(r_sizes.size());
    for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
    out.push_back(view_node(ir::OpKind::kBroadcastInDim, dtype, std::vector<int64_t>(r_sizes.begin(), r_sizes.end()),
                            std::move(dims)));
  }
  return true;
}

// Whether a write through the view (v_offset, v_sizes, v_strides) into a value stored
// contiguously at w_offset with w_sizes can be expressed as an update of that value.
bool can_update(int64_t w_offset, c10::IntArrayRef w_sizes, int64_t v_offset, c10::IntArrayRef v_sizes,
                c10::IntArrayRef v_strides) {
  BoxLayout box;
  return box_layout(c10::multiply_integers(w_sizes), v_offset - w_offset, v_sizes, v_strides, box) && !box.broadcast;
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
  auto node_of = [&](ir::OpKind kind, ir::DType dtype, std::vector<int64_t> shape, std::vector<int64_t> iattrs,
                     std::vector<int32_t> operands) {
    ir::Node n = view_node(kind, dtype, std::move(shape), std::move(iattrs));
    n.operands = std::move(operands);
    return add(std::move(n));
  };
  auto chain = [&](int32_t cur, const std::vector<ir::Node>& nodes) {
    for (ir::Node t : nodes) {
      t.operands = {cur};
      cur = add(std::move(t));
    }
    return cur;
  };
  // A merged value: the base value with the stored node written into the view's box
  // (reshape to the box layout, dynamic_update_slice, reshape back). Pure SSA, so building it
  // at its first reader is as good as at the write.
  std::vector<int32_t> merged(p.merges.size(), -1);
  std::function<int32_t(const Source&)> materialize = [&](const Source& s) -> int32_t {
    if (s.kind == Source::kValue) return remap[static_cast<size_t>(s.index)][static_cast<size_t>(s.node)];
    TPU_CHECK(s.kind == Source::kMerged, "fused mode: unexpected value source");
    int32_t& memo = merged[static_cast<size_t>(s.index)];
    if (memo >= 0) return memo;
    const Merge& mg = p.merges[static_cast<size_t>(s.index)];
    const int32_t w = materialize(mg.base);
    const ir::DType dtype = g.node(w).dtype;
    const int64_t n = c10::multiply_integers(mg.w_sizes);
    BoxLayout box;
    TPU_CHECK(box_layout(n, mg.v_offset - mg.w_offset, mg.v_sizes, mg.v_strides, box), "fused mode: bad merge");
    // The update, from view order into the box's (stride-sorted, trailing 1) shape.
    int32_t u = remap[static_cast<size_t>(mg.op)][static_cast<size_t>(mg.node)];
    if (g.node(u).dtype != dtype) u = node_of(ir::OpKind::kConvert, dtype, g.node(u).shape, {}, {u});
    std::vector<ir::Node> steps;
    Chain cu{dtype, g.node(u).shape, steps};
    const std::vector<int64_t> perm = view_order(box);
    std::vector<int64_t> in_view_order, inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      in_view_order.push_back(box.real[static_cast<size_t>(perm[i])].size);
      inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    }
    cu.reshape(in_view_order);
    cu.transpose(inverse);
    std::vector<int64_t> box_shape(box.start.size());
    for (size_t d = 0; d < box_shape.size(); ++d) box_shape[d] = box.limit[d] - box.start[d];
    cu.reshape(box_shape);
    u = chain(u, steps);
    steps.clear();
    Chain cw{dtype, mg.w_sizes, steps};
    cw.reshape({n});
    const int32_t flat = chain(w, steps);
    int32_t head = flat;
    if (box.len < n) head = node_of(ir::OpKind::kSlice, dtype, {box.len}, {0, box.len, 1}, {flat});
    int32_t based = head;
    if (box.base != std::vector<int64_t>{box.len}) based = node_of(ir::OpKind::kReshape, dtype, box.base, {}, {head});
    std::vector<int32_t> operands{based, u};
    for (int64_t st : box.start) operands.push_back(node_of(ir::OpKind::kConstant, ir::DType::kI64, {}, {st}, {}));
    int32_t upd = node_of(ir::OpKind::kDynamicUpdateSlice, dtype, box.base, {}, std::move(operands));
    if (box.base != std::vector<int64_t>{box.len}) upd = node_of(ir::OpKind::kReshape, dtype, {box.len}, {}, {upd});
    if (box.len < n) {
      int32_t tail = node_of(ir::OpKind::kSlice, dtype, {n - box.len}, {box.len, n, 1}, {flat});
      upd = node_of(ir::OpKind::kConcatenate, dtype, {n}, {0}, {upd, tail});
    }
    if (mg.w_sizes != std::vector<int64_t>{n}) upd = node_of(ir::OpKind::kReshape, dtype, mg.w_sizes, {}, {upd});
    memo = upd;
    return upd;
  };
  fp->store_node.assign(p.stores.size(), -1);
  std::vector<int32_t> store_pos(p.stores.size());  // the op position where each store happens
  for (size_t s = 0; s < p.stores.size(); ++s) store_pos[s] = p.stores[s].op;
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
      int32_t cur = materialize(s);
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
    // A store of a value computed by an earlier op (or of a parameter, written when the run
    // starts) happens when that value is computed. That is only correct when no op in between
    // touches the destination's memory; otherwise an identity convert placed here writes it at
    // this op's position.
    for (size_t j = 0; j < op.program->outputs.size(); ++j) {
      const size_t s = static_cast<size_t>(op.store_begin) + j;
      if (!live[s]) continue;
      int32_t node = rm[static_cast<size_t>(op.program->outputs[j].node)];
      const bool param = g.node(node).kind == ir::OpKind::kParameter;
      const int32_t at = param ? 0 : fp->node_op[static_cast<size_t>(node)];
      if (at != current_op || param) {
        const c10::StorageImpl* target = p.stores[s].storage._unsafe_get_target();
        auto touched = [&](int32_t lo, int32_t hi) {  // loads in ops [lo, hi], other stores in [lo, hi)
          for (const Slot& slot : p.slots) {
            if (slot.storage == target && slot.op >= lo && slot.op <= hi) return true;
          }
          for (size_t t = 0; t < p.stores.size(); ++t) {
            if (t != s && live[t] && p.stores[t].storage._unsafe_get_target() == target && p.stores[t].op >= lo &&
                p.stores[t].op < hi) {
              return true;
            }
          }
          return false;
        };
        if (touched(at, current_op)) {
          ir::Node c = view_node(ir::OpKind::kConvert, g.node(node).dtype, g.node(node).shape, {});
          c.operands = {node};
          node = add(std::move(c));
        } else {
          store_pos[s] = param ? -1 : at;
        }
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
      if (store_pos[s] <= last_use_op[j]) fp->snapshot[j] = 1;
      break;
    }
  }
  std::vector<int32_t> outputs;
  for (int32_t node : fp->store_node) {
    if (node >= 0) outputs.push_back(node);
  }
  std::sort(outputs.begin(), outputs.end());
  outputs.erase(std::unique(outputs.begin(), outputs.end()), outputs.end());
  runtime::MemoryClasses memory;
  for (const Slot& slot : p.slots) memory.bindings.push_back(slot.memory_class);
  for (size_t s = 0; s < p.stores.size(); ++s) {
    if (live[s]) memory.outputs.emplace_back(fp->store_node[s], p.stores[s].memory_class);
  }
  fp->executable = selected_runtime().compile_with_memory(g, outputs, memory);
  fp->stats = fp->executable->stats();
  return fp;
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
      poison_outputs(written, fresh, fates(), loss_of(e));
      throw;
    }
    if (input_loss) poison_outputs(written, fresh, fates(), *input_loss);
  }

  const std::vector<runtime::OutputFate>& fates() const {
    static const std::vector<runtime::OutputFate> unknown;  // every output lost
    return program->executable->reports_fates() ? runtime::last_run_fates() : unknown;
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
  std::shared_ptr<FusedProgram> fp = g_cache.find(p.key, p.hash);
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
