// Compiled mode's engine: one FX graph of torch.compile(backend="tpu"), lowered by
// torch_tpu/compile/lower_graph.py into one IR graph and its output plan (exec/output_plan.h),
// compiled as one Program that runs on tpu tensors with strict semantics.
//
// What it is: the Program, plus what each run needs besides it: which inputs it writes (and
// whether each is bound as a copy), the Python numbers it returns as constants, a host
// executable for the CPU scalars it mutates (an optimizer's step counts, Program::host_outputs),
// and a conservative Program built the first time written inputs share memory at run time.
//
// Lifetime: torch_tpu/compile/backend.py builds one per graph and input signature (lowered, or
// loaded from the disk tier), keeps it in its program table and in the callable it hands to
// Dynamo/AOTAutograd. Construction verifies and compiles (lowering ran once, in Python);
// nothing is recompiled afterwards except the conservative Program, once, on demand.
//
// Running (run): C++ only, the per-op path's execute() steps: bindings from the inputs (tpu
// tensors, CPU 0-d tensors and numbers, read by value), new tensors, random-number counters,
// one launch through exec/launch.h (pending fused work is flushed first), then the host run of
// the mutated CPU scalars, then the results in the plan's return order. Python-free: inputs and
// results are IValues (tensor, bool, int, double, None); csrc/python/compile_bindings.cpp
// converts them and calls run without the GIL. Safe to run from several threads at once.
//
// Disk tier (load, store): the plan lives in the Program itself (outputs; returns as
// ReturnSpec), so a compiled graph is stored and loaded with the same serializer, directory,
// versioning and checks as per-op programs (compiler/program_serialize.h,
// compiler/disk_cache.h). The key is the caller's key text (the ATen graph's code and input
// signature; compile/backend.py) packed 8 bytes per key word behind a tag word, so two graphs
// never share an entry (key words are compared exactly). A graph that returns a Python number
// other than None is not stored (ReturnSpec cannot describe it). A loaded payload is untrusted:
// every index in it is checked against the graph's input count.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/program.h"
#include "exec/output_plan.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec {

class CompiledGraph {
 public:
  // Verifies and compiles `graph` with `plan` for `num_inputs` inputs (in placeholder order;
  // bindings are input indices). channels_last: new tensors to allocate channels-last (4-d
  // ones only). Throws ValueError for a plan that does not fit the graph.
  CompiledGraph(ir::Graph graph, const OutputPlan& plan, int32_t num_inputs, const std::vector<int32_t>& channels_last);

  // The graph stored under key_text by an earlier process, compiled and ready; null on a miss,
  // when the disk tier is off, or for an entry that fails any check (discarded as corrupt).
  static std::unique_ptr<CompiledGraph> load(const std::string& key_text, int32_t num_inputs);

  // Writes this graph under key_text; false when the disk tier is off, the graph returns a
  // constant ReturnSpec cannot describe, or the write failed (the tier is an optimization).
  bool store(const std::string& key_text) const;

  // Runs the program on `inputs` (tpu tensors, CPU 0-d tensors, bools, ints, doubles and
  // None, in the graph's placeholder order) and returns the graph's results.
  std::vector<c10::IValue> run(const std::vector<c10::IValue>& inputs);

  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }
  int32_t num_nodes() const { return prog_->graph.size(); }
  std::string describe() const { return prog_->executable->describe(); }

 private:
  CompiledGraph(std::shared_ptr<compiler::Program> prog, int32_t num_inputs);  // load(): checks prog
  void note_written_inputs();
  void finish();
  std::vector<runtime::OutputTarget> host_targets(const std::vector<c10::IValue>& inputs,
                                                  const std::vector<runtime::Binding>& bindings,
                                                  std::vector<at::Tensor>& tensors) const;
  std::shared_ptr<compiler::Program> conservative();
  bool snapshot_shared(const std::vector<at::Tensor>& tensors, std::vector<runtime::Binding>& bindings) const;

  std::shared_ptr<compiler::Program> prog_;
  int32_t num_inputs_;
  // Per input: whether to bind a copy. A written input the program reads after the write is
  // always copied (lower_graph.py, _needs_snapshot); one it does not is copied only when
  // another input shares its memory (which the analysis cannot see).
  enum Snapshot : uint8_t { kNever, kAlways, kUnlessAliased };
  std::vector<uint8_t> snapshot_;
  bool writes_inputs_ = false;       // some input is written (not kNever)
  std::vector<c10::IValue> constants_;  // per return: the number a constant return stands for
  std::mutex conservative_mutex_;
  std::shared_ptr<compiler::Program> conservative_;
  std::shared_ptr<runtime::Executable> host_exe_;  // computes host_outputs (null: none)
  std::vector<int32_t> host_reads_;                // bindings host_exe_ reads
  bool storable_ = true;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace torch_tpu::exec
