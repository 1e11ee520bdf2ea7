// The pending graph of fused mode: what recording an op leaves behind, and what composing runs.
//
// Design: fused mode (fused.h) records ops into a per-device Pending graph: per op its cached
// per-op program and where each of its bindings comes from (a memory load, an earlier op's
// value read through a view, a merged partial write), and per output a store into memory held
// by a weak reference. Recording and flushing (fused.cpp) fill and take it; composition
// (fused_compose.cpp) turns it into one ir::Graph and its compiled program. The data model is
// shared by both, so it is a header of its own; nothing outside exec/fused*.cpp includes it.
#pragma once

#include <c10/core/StorageImpl.h>
#include <c10/core/Stream.h>
#include <c10/util/SmallVector.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/hash.h"
#include "compiler/program.h"
#include "exec/call.h"
#include "ir/graph.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec::fusion {

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
  uint64_t hash = kFnvOffsetBasis;  // of `key` (common/hash.h)
  bool contracts = false;  // some recorded op holds a contraction (slow start, below)
  int32_t memory_classes = 0;  // memory classes numbered so far (slots, stores)
  // Graphs flushed since the host last waited for this device (carried across graphs).
  int graphs_since_wait = 0;

  void mix(int64_t w) {
    key.push_back(w);
    hash = mix_word(hash, w);
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

// Composes the pending graph into one program and compiles it (fused_compose.cpp). live[s]:
// store s is written (its tensor is alive and no later store overwrites it).
std::shared_ptr<FusedProgram> compose(const Pending& p, const std::vector<uint8_t>& live);

}  // namespace torch_tpu::exec::fusion
