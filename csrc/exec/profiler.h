// Profiling records behind `python -m torch_tpu profile`, torch_tpu.diagnose.report() and the
// torch.profiler integration (docs/diagnostics.md, "profile").
//
// Design: one process-wide switch gates every record. Off (the default), the places that could
// record (program execution, host syncs, CPU fallbacks) pay one relaxed atomic load and a
// predictable branch; nothing is allocated, no clock is read and no Python frame is looked at,
// so the per-op path is unchanged (bench/dispatch.py). On, each record is taken under one mutex:
//   * device events: every program run on a device (strict per-op program, fused graph,
//     compiled graph) with wall-clock start/end in Unix-epoch nanoseconds (the clock kineto's
//     Chrome traces use, so they line up with the host's ATen events), the program's name, the
//     ATen ops it holds and the bytes it read and wrote;
//   * host syncs: by (user source line, ATen op that forced it), with the time the host waited;
//   * CPU fallbacks: by (user source line, op).
// Source lines come from the hook the Python extension installs (exec/fused.h,
// current_source_line): the first frame outside torch and torch_tpu, interned per call site.
//
// Rejected: recording always and filtering later (two clock reads, a name and a push under a
// mutex for every program, paid by runs nobody profiles); a Python sys.setprofile hook (costs
// every Python call, not just ops, and sees no device time).
//
// Thread safety: every function is thread-safe. Device events are recorded on stream worker
// threads as well as the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_tpu::runtime {
struct Binding;
struct OutputTarget;
}  // namespace torch_tpu::runtime

namespace torch_tpu::exec {
struct OpInfo;
}  // namespace torch_tpu::exec

namespace torch_tpu::exec::profiler {

extern std::atomic<bool> g_enabled;

// Whether profiling records are being taken. Never throws; one relaxed load.
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
// Turns recording on or off; records taken so far stay until reset().
void set_enabled(bool on);
// Drops every record.
void reset();

// Unix-epoch nanoseconds (std::chrono::system_clock), the time base of device events.
int64_t now_ns();

struct DeviceEvent {
  std::string name;     // "aten::add.Tensor", "fused graph (12 ops)", "compiled graph"
  std::string ops;      // the ATen ops the program holds, comma separated (a fused graph: in order)
  std::string cause;    // fused graphs: the flush cause
  int64_t start_ns = 0;  // now_ns() when the program started
  int64_t end_ns = 0;
  uint64_t bytes = 0;   // bytes of the program's tensor inputs and outputs
  int device = 0;
  int stream = 0;
  uint64_t kernels = 0;   // fused graphs: runtime steps (a fused cluster counts once)
  uint64_t clusters = 0;  // fused graphs: fused clusters
};
void record_device_event(DeviceEvent&& event);
// Bytes of a program's tensor inputs and output destinations (the "bytes moved" of its event).
// reads (optional, compiler::Program::reads_binding): per input, whether the program reads it
// (indices past its end are not read); an out= destination bound as an input but only written
// counts once, as an output.
uint64_t binding_bytes(const std::vector<runtime::Binding>& inputs, const std::vector<runtime::OutputTarget>& outputs,
                       const std::vector<uint8_t>* reads = nullptr);
// Records the run of one program that started at start_ns and ended now: a per-op program (op;
// null: a compiled graph) or a fused graph (graph_ops, in order; cause: its flush cause).
void record_program(const OpInfo* op, const std::vector<const OpInfo*>* graph_ops, const char* cause, int device,
                    int64_t stream, int64_t start_ns, uint64_t bytes, uint64_t kernels = 0, uint64_t clusters = 0);
// Returns the device events recorded since the last call (or reset) and forgets them.
std::vector<DeviceEvent> take_device_events();

// A host read of device values waited `wait_ns` for the device queue; op says which ATen op
// forced it. Records the user's source line. Call only when enabled().
void record_host_sync(const char* op, int64_t wait_ns);
// A call of `op` ran on the CPU (TORCH_TPU_FALLBACK=cpu). Call only when enabled().
void record_fallback(const std::string& op);

struct SiteCount {
  std::string line;  // "file:line", or "?" when there was no Python frame
  std::string op;
  uint64_t count = 0;
  int64_t wait_ns = 0;  // host syncs: total time waited
};
std::vector<SiteCount> host_syncs();
std::vector<SiteCount> fallbacks();

}  // namespace torch_tpu::exec::profiler
