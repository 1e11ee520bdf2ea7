// The PJRT runtime: IR programs emitted as StableHLO, compiled and run by a PJRT C API plugin.
//
// Design (docs/pjrt.md has the whole picture):
//   * compile(): csrc/stablehlo emits the graph's MLIR text with flat tensor arguments and
//     results (a device buffer stands for a run of bytes, whatever view of them a program
//     reads) and only the arguments some output depends on; PJRT_Client_Compile compiles it
//     with format "mlir" and compile_options_proto() (1 replica, 1 partition).
//   * run(): tensor memory keeps its host address from the device allocator, so bindings, views
//     and strides keep PyTorch's storage semantics; the bytes themselves may live on the device
//     (resident_buffers.h). Arguments already resident are passed as their buffers (dense
//     permuted views through a transposing variant), the others are uploaded (and kept for the
//     next reader); outputs into dense destinations stay on the device, the others are
//     downloaded into their views. An in-place write donates the buffer it overwrites through a
//     variant whose argument aliases the result (tf.aliasing_output). Variants are compiled
//     per executable on first use. TORCH_TPU_PJRT_RESIDENT=0 stages everything through host
//     memory instead.
//   * Compiled executables are kept on disk (executable_cache.h) when the plugin can serialize
//     them, so a restarted process skips the plugin's compiler.
//   * Completion is asynchronous (launched.h, runtime/completion.h): a program launched from a
//     stream worker whose outputs all stay on the device is not waited for in run(); the worker
//     waits for launched programs before other work and when its queue drains.
//   * Device out of memory: an upload or execution that fails with RESOURCE_EXHAUSTED evicts the
//     device's resident buffers into their host bytes and is retried once; a second failure
//     raises torch.OutOfMemoryError with the requested and available bytes (out_of_memory()).
//   * Executables are compiled portable (not bound to a device): run() uploads to, and executes
//     on, the PJRT device of runtime::execution_device(), so "tpu:i" is the plugin's device i.
//
// Thread safety: the runtime is immutable after construction except for its counters and the
// resident table (locked); an executable's only mutable state is its variant map (locked).
// Both may be used from several worker threads at once (PJRT clients are thread-safe).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/pjrt/client.h"
#include "runtime/pjrt/executable_cache.h"
#include "runtime/pjrt/launched.h"
#include "runtime/pjrt/resident_buffers.h"
#include "runtime/runtime.h"
#include "stablehlo/emitter.h"

namespace torch_tpu::pjrt {

// A serialized xla.CompileOptionsProto { executable_build_options { num_replicas: 1,
// num_partitions: 1 } compile_portable_executable: true }, written by hand (protobuf wire format) so that no protobuf library is
// needed. Never throws.
std::string compile_options_proto();

// Device RESOURCE_EXHAUSTED handling since the process started (diagnostics and tests).
struct OutOfMemoryStats {
  std::atomic<int64_t> evictions{0};      // failures answered by evicting the device's resident buffers
  std::atomic<int64_t> evicted_bytes{0};  // resident bytes those evictions dropped from the devices
  std::atomic<int64_t> retried{0};        // uploads/executions that succeeded on the retry
  std::atomic<int64_t> raised{0};         // failed again: raised as torch.OutOfMemoryError
};

// Host<->device transfers made by programs (resident-buffer syncs are in ResidencyStats).
struct TransferStats {
  std::atomic<int64_t> uploads{0}, upload_bytes{0}, downloads{0}, download_bytes{0};
};

// Programs run with index checks (EmitOptions::index_checks) and how many of them failed one.
struct IndexCheckStats {
  std::atomic<int64_t> checked_runs{0}, failures{0};
};

class PjrtRuntime final : public runtime::Runtime {
 public:
  explicit PjrtRuntime(std::shared_ptr<Client> client);
  const char* name() const override { return "pjrt"; }
  // Emits StableHLO (throws NotImplementedError for an op/dtype without a translation). The
  // plugin compiles each variant when a run first needs it, so its compile errors arrive then.
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
  const TransferStats& transfers() const { return transfers_; }
  TransferStats& transfers() { return transfers_; }
  IndexCheckStats& index_checks() const { return index_checks_; }
  // The resident-buffer table, or null when off (TORCH_TPU_PJRT_RESIDENT=0 or set_resident).
  ResidentBuffers* resident() const { return resident_on_.load(std::memory_order_acquire) ? resident_.get() : nullptr; }
  // Turns resident buffers off (stale device copies are downloaded, the table emptied; programs
  // then stage through host memory) or back on, for benchmarks that compare both in one process.
  // The caller waits for the devices' queued work first. No-op when TORCH_TPU_PJRT_RESIDENT=0.
  void set_resident(bool on);
  // The module of `graph` with `options` plus flat tensors and live arguments only (a variant's
  // aliases, layouts and views come in `options`). Throws NotImplementedError for an op/dtype
  // without a StableHLO translation.
  static stablehlo::Module emit(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                                stablehlo::EmitOptions options);
  // Compiles MLIR text with the plugin, or loads it from the executable cache.
  std::unique_ptr<LoadedExecutable> compile_text(const std::string& mlir, size_t num_outputs);
  // emit() then compile_text().
  std::unique_ptr<LoadedExecutable> build(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                                          stablehlo::EmitOptions options);
  void count_execution(size_t device);
  // A device copy of a one-element host value (a scalar operand), shared by every program that
  // binds the same value: an upload per distinct value instead of per run. Thread-safe.
  std::shared_ptr<Buffer> scalar_buffer(c::PJRT_Buffer_Type type, const at::Tensor& value, size_t device);
  // The resident-buffer table's figures (all 0 when TORCH_TPU_PJRT_RESIDENT=0).
  ResidencyStats residency_stats() const;
  // Programs launched without waiting for them (launched.h; runtime/completion.h).
  LaunchedPrograms& launched() const { return *launched_; }

  // Out of device memory. Runs `attempt` (an upload, or with `execution` a program's execution,
  // on `device`, needing at least `requested` bytes); on RESOURCE_EXHAUSTED
  // (c10::OutOfMemoryError) waits for the device's launched programs (their buffers go), evicts
  // its resident buffers into their host bytes and runs `attempt` once more; a second failure
  // raises c10::OutOfMemoryError naming the call, the requested bytes, the device's free bytes
  // where the plugin reports them and the bytes this process still holds there.
  template <class F>
  auto retry_out_of_memory(size_t device, int64_t requested, bool execution, F&& attempt) -> decltype(attempt());
  // Downloads the stale resident entries of `device` into their host bytes and drops all of its
  // entries; returns their bytes. Throws the device's error if a download fails.
  int64_t evict(size_t device);
  const OutOfMemoryStats& out_of_memory() const { return oom_; }
  // Tests only: the next `uploads` uploads and `executions` executions of programs fail as a
  // RESOURCE_EXHAUSTED of the plugin would (XLA's CPU plugin allocates from host RAM).
  void inject_out_of_memory(int uploads, int executions);

 private:
  std::shared_ptr<Client> client_;
  std::unique_ptr<ExecutableCache> executable_cache_;  // null when the disk cache is off
  std::atomic<int64_t> compiles_{0};
  std::unique_ptr<ResidentBuffers> resident_;  // null when TORCH_TPU_PJRT_RESIDENT=0
  std::atomic<bool> resident_on_{false};
  TransferStats transfers_;
  mutable IndexCheckStats index_checks_;
  OutOfMemoryStats oom_;
  std::atomic<int> inject_oom_uploads_{0}, inject_oom_executions_{0};
  // Throws the injected failure of an upload (or an execution) if one is pending.
  void maybe_inject_out_of_memory(bool execution);
  // The final OutOfMemoryError of retry_out_of_memory().
  [[noreturn]] void raise_out_of_memory(size_t device, int64_t requested, bool execution, const c10::Error& error,
                                        int64_t evicted);
  struct ScalarKey {
    c::PJRT_Buffer_Type type;
    uint64_t bits;  // the value's bytes, zero-extended
    size_t device;
    auto operator<=>(const ScalarKey&) const = default;
  };
  static constexpr size_t kMaxScalars = 4096;
  std::mutex scalars_mu_;
  std::map<ScalarKey, std::shared_ptr<Buffer>> scalars_;
  std::unique_ptr<std::vector<std::atomic<int64_t>>> executions_ =
      std::make_unique<std::vector<std::atomic<int64_t>>>(client_->devices().size());
  std::unique_ptr<LaunchedPrograms> launched_ = std::make_unique<LaunchedPrograms>(client_->devices().size());
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

template <class F>
auto PjrtRuntime::retry_out_of_memory(size_t device, int64_t requested, bool execution, F&& attempt)
    -> decltype(attempt()) {
  try {
    maybe_inject_out_of_memory(execution);
    return attempt();
  } catch (const c10::OutOfMemoryError&) {
  }
  const int64_t evicted = evict(device);
  try {
    maybe_inject_out_of_memory(execution);
    auto result = attempt();
    oom_.retried.fetch_add(1, std::memory_order_relaxed);
    return result;
  } catch (const c10::OutOfMemoryError& e) {
    raise_out_of_memory(device, requested, execution, e, evicted);
  }
}

}  // namespace torch_tpu::pjrt
