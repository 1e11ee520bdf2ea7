// Runtime interface: what executes compiled IR programs on device memory.
//
// Design: a runtime implements IR operations, never ATen ops. `compile` turns a verified
// ir::Graph plus the ids of the nodes the caller wants back into an Executable; `run` binds
// inputs (tensor memory or host scalars, indexed by the graph's parameter bindings) and writes
// each requested node into its destination memory. Executables are immutable after compile and
// may be run concurrently from several worker threads. The host runtime (runtime/host) is the
// embedded default; the PJRT runtime plugs in behind the same interface.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace torch_tpu::runtime {

// What a parameter node (binding >= 0) or an output refers to at run time.
struct Binding {
  enum class Kind : uint8_t { Tensor, Scalar };
  Kind kind = Kind::Tensor;
  c10::ScalarType dtype = c10::ScalarType::Float;
  // Tensor: address of element [0,...,0] (storage base + offset * itemsize), sizes and
  // strides in elements. The memory is owned by the caller and outlives run().
  void* data = nullptr;
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;
  // Scalar: the value; `dtype` says which member holds it (floating types: d, else i).
  double d = 0.0;
  int64_t i = 0;
  // Tensor only: copy the memory when the program starts instead of reading it lazily when a
  // node needs it, because a later write of the same program (an output destination
  // overlapping it) overwrites that memory. Without it, reads may happen at any point of the
  // run (fused clusters read when they execute), so unflagged inputs must not be overwritten.
  bool snapshot = false;
  // Tensor only, optional: a reference that keeps the memory alive while the run needs it (fused
  // mode lends the storages of tensors Python may free while the graph is queued). Only
  // Executable::run_and_release looks at it.
  c10::intrusive_ptr<c10::intrusive_ptr_target> owner;
  // Tensor only: the memory holds a value lost by an earlier failed program (exec/poison.h).
  // A runtime that reports output fates (Executable::reports_fates) computes only what does
  // not depend on it; the others are never given such a binding.
  bool lost = false;
};

// The generator state bound to the reserved parameters (binding -1: seed, -2: offset).
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// One requested result: the value of graph node `node` is written into `dest` (a Tensor
// binding whose sizes equal the node's shape; strides may be arbitrary, e.g. a view of a
// larger storage). The value is converted to dest.dtype if it differs.
struct OutputTarget {
  int32_t node = 0;
  Binding dest;
  // false: never compute the node directly in dest's memory (a later write of the same program
  // changes that memory while the node's value is still read).
  bool allow_direct = true;
};

// What one run of an executable launches (for diagnostics).
struct ExecutableStats {
  int32_t steps = 0;        // kernels per run (a fused cluster counts once)
  int32_t clusters = 0;     // fused elementwise clusters
  int32_t fused_nodes = 0;  // IR nodes inside those clusters
};

// The graph node whose kernel threw during the calling thread's last failed run(), or -1.
int32_t last_failed_node();
void set_last_failed_node(int32_t node);

// What a run that failed, or read lost memory (Binding::lost), did to each output target.
// Failures should cost only what depends on them: work independent of a failed node (or of a
// lost input) still runs and writes its outputs, and an output that depends on it is either
// never written (its memory keeps the value it had) or, for the node that failed while
// writing, left with unknown contents.
enum class OutputFate : uint8_t {
  kWritten,    // the run wrote the output's new value
  kUntouched,  // not written: the destination holds what it held before the run
  kLost,       // maybe partly written: unknown contents
};
// Per output target (run()'s order) of the calling thread's last run that failed or read lost
// memory, as reported by a runtime that reports fates; empty otherwise (callers then take every
// output of a failed run as lost).
const std::vector<OutputFate>& last_run_fates();
std::vector<OutputFate>& mutable_last_run_fates();

// The device index ("tpu:N") that run() executes on, per thread: a stream's worker thread sets its
// stream's device once; an inline run sets the launching device for its duration. Runtimes with
// real devices (PJRT) place uploads and the execution there; the host runtime ignores it.
c10::DeviceIndex execution_device();
void set_execution_device(c10::DeviceIndex device);
class ExecutionDeviceGuard {
 public:
  explicit ExecutionDeviceGuard(c10::DeviceIndex device) : previous_(execution_device()) {
    set_execution_device(device);
  }
  ~ExecutionDeviceGuard() { set_execution_device(previous_); }
  ExecutionDeviceGuard(const ExecutionDeviceGuard&) = delete;
  ExecutionDeviceGuard& operator=(const ExecutionDeviceGuard&) = delete;

 private:
  c10::DeviceIndex previous_;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Human-readable steps and fused clusters (node ids, shape, dtype, tile size), one per line,
  // for TORCH_TPU_DEBUG_FUSION output; empty when the runtime has nothing to say. Never throws.
  virtual std::string describe() const { return {}; }
  // Counts fixed at compile time. Never throws.
  virtual ExecutableStats stats() const { return {}; }
  // True if run() honours Binding::lost and, after a failure or with lost inputs, continues
  // with the independent work and reports every output's fate (last_run_fates).
  virtual bool reports_fates() const { return false; }
  // True if a run that throws reports every output's fate (last_run_fates), even where lost
  // inputs are not honoured (the PJRT runtime's failed index checks write nothing).
  virtual bool reports_failure_fates() const { return reports_fates(); }
  // Runs the program. Thread-safe (no mutable state). Throws c10::Error subclasses on
  // run-time failures (c10::IndexError for an out-of-range gather index); outputs may then be
  // partially written.
  virtual void run(const std::vector<Binding>& inputs, const std::vector<OutputTarget>& outputs,
                   RngState rng) const = 0;
  // run(), taking over the `owner` references of the inputs and output destinations (left
  // null): a runtime that knows when its program is done with a memory drops the reference
  // then, so memory whose tensors died while the run was queued goes back to the allocator
  // during the run, as it does between strict mode's ops, not after its last step. The
  // default runs, then drops them all.
  virtual void run_and_release(std::vector<Binding>& inputs, std::vector<OutputTarget>& outputs, RngState rng) const {
    run(inputs, outputs, rng);
    for (Binding& b : inputs) b.owner.reset();
    for (OutputTarget& o : outputs) o.dest.owner.reset();
  }
};

// What the caller knows about which memory a program's parameters and outputs may share: a
// class per binding and per output node, equal for memory that may overlap (one storage),
// kUnknownMemory for "may overlap anything". Without it, a runtime must assume every output
// may overwrite what any parameter reads or any other output writes.
struct MemoryClasses {
  static constexpr int32_t kUnknownMemory = -1;
  std::vector<int32_t> bindings;                     // per binding index (missing: unknown)
  std::vector<std::pair<int32_t, int32_t>> outputs;  // (output node, class)
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual const char* name() const = 0;
  // Compiles a verified graph. `outputs` lists the node ids run() may be asked to write.
  // Throws c10::Error if an op/dtype is unsupported by this runtime.
  virtual std::unique_ptr<Executable> compile(const ir::Graph& graph,
                                              const std::vector<int32_t>& outputs) = 0;
  // The same, knowing which parameters and outputs may share memory: a runtime that orders
  // its memory writes itself (the host executor's clusters) may then keep independent work
  // together. Runtimes that do not need it compile as above.
  virtual std::unique_ptr<Executable> compile_with_memory(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                                                          const MemoryClasses& memory) {
    (void)memory;
    return compile(graph, outputs);
  }
  // The devices this runtime drives (PJRT: the plugin's addressable devices, "tpu:i" is device
  // i). 0: device memory is host RAM and any number of devices is emulated
  // (TORCH_TPU_NUM_DEVICES). Never throws.
  virtual int device_count() const { return 0; }
  // A description of device i (e.g. "NVIDIA H200"), or empty to use the emulated name.
  virtual std::string device_name(int index) const { return {}; }
};

// The embedded host runtime (device memory is host RAM). Never null; lives forever.
Runtime& host_runtime();

}  // namespace torch_tpu::runtime
