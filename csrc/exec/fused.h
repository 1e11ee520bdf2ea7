// Fused eager mode (DeferAndFuse): ops are recorded into a pending graph and run at flushes.
//
// Design. Recording reuses everything strict mode has: the dispatcher gathers the call, finds
// (or lowers) the op's cached per-op Program, allocates the op's new output tensors, and then,
// instead of running the program, appends it to the device's pending graph:
//  * every tensor argument becomes either a memory load (a binding, as in strict mode) or, when
//    an earlier pending op wrote the storage it reads, that op's SSA value, reshaped / sliced /
//    transposed / broadcast to the view being read. A read through a view the IR cannot express
//    flushes first, so a composed graph never reads memory that it also writes earlier on;
//  * every output becomes a store into its destination memory, held by a weak reference to the
//    storage: a store whose tensor (and every view of it) is dead at flush time is not written,
//    and one fully overwritten by a later store in the same graph is dropped;
//  * the structural key (per-op program identities, where each input comes from, how stores
//    alias loads) is mixed word by word while recording, so a training loop's repeated step
//    finds its composed program with one hash lookup and the graph is never rebuilt on a hit.
// At flush the key (plus which stores are live) selects a composed program: on a miss the
// per-op graphs are concatenated into one ir::Graph and compiled by the runtime, which fuses
// elementwise clusters into single passes. Loads that a later store of the same graph overwrites
// while their value is still needed are bound as snapshots. The composed program runs on the
// device's stream like any strict program, or inline when the flush is a host read on an idle
// stream. Errors raised while it runs name the ATen op that recorded the failing node.
// Thread-safe: recording and flushing take one process-wide mutex (the autograd engine records
// from its own thread).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/program.h"
#include "device/stream.h"
#include "exec/call.h"

namespace torch_tpu::exec {

// Appends one executed call to the pending graph of the call's device (flushing first when the
// graph cannot express the call's reads). `news` are the call's freshly allocated outputs,
// `rng` its reserved generator state.
void fused_record(const std::shared_ptr<compiler::Program>& program, const OpInfo& info, const CallState& call,
                  const std::vector<at::Tensor>& news, runtime::RngState rng);

// Hands the pending graph of `device` (every device if < 0) to its stream. Installed as the
// device layer's pending-flush hook, so every synchronization point reaches it.
void fused_flush(c10::DeviceIndex device, device::FlushCause cause);

// Prints every flushed graph with its clusters to stderr (TORCH_TPU_DEBUG_FUSION=1).
void set_debug_fusion(bool enabled);
bool debug_fusion();

// Counters for torch_tpu.metrics().
struct FusedStats {
  uint64_t flushes_by_cause[static_cast<int>(device::FlushCause::kCount)] = {};
  uint64_t ops_recorded = 0;
  uint64_t ops_fused = 0;            // recorded ops that ran inside a composed graph of >= 2 ops
  uint64_t graphs_compiled = 0;      // composed-program cache misses
  uint64_t graph_cache_hits = 0;
  uint64_t kernels_launched = 0;     // runtime steps (a fused cluster counts once)
  uint64_t bytes_not_materialized = 0;  // stores skipped: dead or overwritten before the flush
  uint64_t stores_skipped = 0;
  uint64_t compile_ns = 0;
  uint64_t largest_graph_ops = 0;
};
FusedStats fused_stats();
void reset_fused_stats();
// The source lines ("file:line") whose host reads flushed pending graphs most often.
std::vector<std::pair<std::string, uint64_t>> top_host_read_lines(size_t n);

// Installed by the Python extension: the user's current source line ("file:line"), interned
// (the pointer stays valid for the process), or null when there is no Python frame.
using SourceLineHook = const std::string* (*)();
void set_source_line_hook(SourceLineHook hook);
// The hook's answer (null without a hook or a Python frame); for slow paths only.
const std::string* user_source_line();

}  // namespace torch_tpu::exec
