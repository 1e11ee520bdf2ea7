// The PJRT runtime: IR programs emitted as StableHLO, compiled and run by a PJRT C API plugin.
//
// Design (docs/pjrt.md has the whole picture and the road to device-resident storage):
//   * compile(): csrc/stablehlo emits the graph's MLIR text; PJRT_Client_Compile compiles it
//     with format "mlir" and compile_options_proto() (1 replica, 1 partition). The argument
//     order is the emitter's: parameter bindings >= 0 ascending, then RNG seed and offset.
//   * run(): staged execution. Tensor memory stays where the device allocator put it (host
//     RAM, as on the host runtime), so every binding, view and stride keeps PyTorch's storage
//     semantics unchanged. Each run starts all input uploads (strided views are made dense on
//     the host first), launches the executable, starts all output downloads, awaits the events
//     together, and writes each output into its destination view (converting the dtype when
//     the destination's differs). Inputs are marked non-donatable: they are the caller's
//     storage. In-place ops therefore cost an upload and a download per program; keeping
//     storages resident as PJRT buffers (DataPtr -> buffer handle, donation for in-place
//     writes) is the next step and is designed in docs/pjrt.md.
//   * Compiled executables are kept on disk (executable_cache.h) when the plugin can serialize
//     them, so a restarted process skips the plugin's compiler.
//   * Executables are compiled portable (not bound to a device): run() uploads to, and executes
//     on, the PJRT device of runtime::execution_device(), so "tpu:i" is the plugin's device i.
//
// Thread safety: the runtime and its executables are immutable after construction/compile and
// may be used from several worker threads at once (PJRT clients are thread-safe).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "runtime/pjrt/client.h"
#include "runtime/pjrt/executable_cache.h"
#include "runtime/runtime.h"

namespace torch_tpu::pjrt {

// A serialized xla.CompileOptionsProto { executable_build_options { num_replicas: 1,
// num_partitions: 1 } compile_portable_executable: true }, written by hand (protobuf wire format) so that no protobuf library is
// needed. Never throws.
std::string compile_options_proto();

class PjrtRuntime final : public runtime::Runtime {
 public:
  explicit PjrtRuntime(std::shared_ptr<Client> client);
  const char* name() const override { return "pjrt"; }
  // Emits StableHLO and compiles it with the plugin. Throws NotImplementedError for an op/dtype
  // without a StableHLO translation, and the plugin's compile error otherwise.
  std::unique_ptr<runtime::Executable> compile(const ir::Graph& graph, const std::vector<int32_t>& outputs) override;
  const Client& client() const { return *client_; }
  int device_count() const override { return static_cast<int>(client_->devices().size()); }
  std::string device_name(int index) const override;
  // Programs executed on each device so far (diagnostics: where "tpu:i" work really ran).
  std::vector<int64_t> executions_per_device() const;
  // Programs compiled by the plugin (not loaded from the executable cache) in this process.
  int64_t compiles() const { return compiles_.load(std::memory_order_relaxed); }
  // The on-disk executable cache's figures (enabled false when off or unsupported).
  ExecutableCacheStats executable_cache_stats() const;

 private:
  std::shared_ptr<Client> client_;
  std::unique_ptr<ExecutableCache> executable_cache_;  // null when the disk cache is off
  std::atomic<int64_t> compiles_{0};
  // Shared with the executables, which count each run (the runtime lives for the process).
  std::shared_ptr<std::vector<std::atomic<int64_t>>> executions_ =
      std::make_shared<std::vector<std::atomic<int64_t>>>(client_->devices().size());
};

// The PJRT runtime chosen by TORCH_TPU_RUNTIME, created on first use:
//   * required (TORCH_TPU_RUNTIME=pjrt, or TORCH_TPU_PJRT_PLUGIN set): loads plugin_path() and
//     creates a client with TORCH_TPU_PJRT_OPTIONS; every failure throws (naming what was
//     looked for, the plugin path, or the plugin's error).
//   * not required (auto): returns null when no plugin is discovered, or when the discovered
//     plugin cannot create a client (then warns once with the reason, e.g. "no CUDA device").
// The result is cached for the process. Not thread-safe against itself (called once, from the
// runtime selection's static initializer).
PjrtRuntime* pjrt_runtime(bool required);
// The runtime created by pjrt_runtime(), or null. Never throws.
PjrtRuntime* active_pjrt_runtime();

}  // namespace torch_tpu::pjrt
