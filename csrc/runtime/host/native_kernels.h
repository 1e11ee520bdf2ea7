// Native tile kernels: the host runtime's second tier for fused clusters.
//
// A cluster's tile program (tile_cluster.h) runs instruction by instruction: each instruction streams
// a whole tile through its buffers, so a chain of N arithmetic ops reads and writes L1/L2 N
// times. Once a cluster has run often enough to matter (TORCH_TPU_NATIVE_KERNELS), it asks for a
// native kernel: C++ source generated from its program (native_codegen.cpp, Cluster::native_source)
// that keeps each element's chain in vector registers, compiled by the system's C++ compiler on
// a background thread and loaded with dlopen. Until the kernel is loaded, and forever if no
// compiler is found or compilation fails, the cluster keeps interpreting: the tiers give the
// same bits (the generated code uses only IEEE-exact operations, compiled without contraction
// or fast-math; everything else calls back into the interpreter's own instruction), so a run
// may switch tiers between any two tiles.
//
// Kernels are shared by source text: clusters with the same program (a GELU in every layer)
// compile once per process, and each compiled library is kept in the program cache's disk
// tier (keyed by its whole source), so later processes load instead of compiling. Kernels are
// never unloaded.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_tpu::runtime::host {

// One tile of a cluster: slots[k] is the tile buffer of slot k (tile_cluster.h), n8 the lanes to
// compute (a multiple of 8). Instructions the kernel does not compute itself are run through
// `step(ctx, k)` (k: the instruction's index in the cluster's program).
using NativeTileFn = void (*)(float* const* slots, int64_t n8, void (*step)(void* ctx, int32_t k), void* ctx);

class NativeKernel {
 public:
  // Null until the background compiler has loaded it (and forever if it failed).
  NativeTileFn get() const { return fn_.load(std::memory_order_acquire); }

 private:
  friend class NativeCompiler;
  std::atomic<NativeTileFn> fn_{nullptr};
};

// When clusters ask for native kernels (TORCH_TPU_NATIVE_KERNELS).
struct NativeTierPolicy {
  bool enabled = false;
  bool synchronous = false;  // "sync": compile at the first run and wait (tests)
  int64_t hot_runs = 0;      // runs of a cluster before it asks
  int lanes = 8;             // vector width the generated code uses (16: AVX512, like the interpreter)
};
const NativeTierPolicy& native_tier_policy();

// The kernel for `source`, a function body generated for the policy's lane width in which the
// function's name is written NATIVE_TILE_FN: queued for compilation the first time it is asked
// for (compiled before returning when the policy is synchronous). Null when the tier is off.
NativeKernel* native_kernel(const std::string& source);

// Where compiled kernels persist between processes: the program cache's disk tier, wired in
// by the layer that configures it (python/cache_bindings.cpp). `load` returns the shared
// library stored under a key (the kernel's whole source as words) or nothing; `store` keeps one.
struct NativeKernelStore {
  std::function<std::optional<std::string>(const std::vector<int64_t>& key)> load;
  std::function<void(const std::vector<int64_t>& key, std::string_view library)> store;
};
void set_native_kernel_store(NativeKernelStore store);

struct NativeTierStats {
  int64_t requested = 0;   // distinct kernels asked for
  int64_t loaded = 0;      // compiled (or read from the disk tier) and loaded
  int64_t from_disk = 0;   // of those, read from the disk tier
  int64_t failed = 0;      // kernels whose compilation failed (they keep interpreting)
  int64_t compile_ns = 0;  // wall time of the compiler runs (background)
  std::string last_error;  // the last failure's reason ("" if none)
};
NativeTierStats native_tier_stats();

}  // namespace torch_tpu::runtime::host
