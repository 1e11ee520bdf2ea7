// Turning a lowered graph into an executable program: verify (debug mode or TORCH_TPU_VERIFY),
// then compile on the runtime.
#include "common/check.h"
#include "common/config.h"
#include "exec/call.h"
#include "exec/mode.h"
#include "ir/verifier.h"

namespace torch_tpu::exec {

void finish_program(compiler::Program& program, const std::vector<int32_t>& output_nodes,
                    const runtime::MemoryClasses* memory) {
  static const bool always_verify = config::get_bool("TORCH_TPU_VERIFY");
  if (always_verify || mode() == Mode::Debug) ir::verify(program.graph);
  program.executable = memory ? selected_runtime().compile_with_memory(program.graph, output_nodes, *memory)
                              : selected_runtime().compile(program.graph, output_nodes);
  // Lowerings declare a parameter for every tensor argument; only those some node (or an
  // output) uses are reads. Fused mode loads (and keeps alive) just those.
  std::vector<uint8_t> used(static_cast<size_t>(program.graph.size()), 0);
  for (const ir::Node& n : program.graph.nodes()) {
    for (int32_t o : n.operands) used[static_cast<size_t>(o)] = 1;
  }
  for (int32_t o : output_nodes) used[static_cast<size_t>(o)] = 1;
  for (int32_t i = 0; i < program.graph.size(); ++i) {
    const ir::Node& n = program.graph.node(i);
    if (n.kind != ir::OpKind::kParameter || n.iattrs.at(0) < 0 || !used[static_cast<size_t>(i)]) continue;
    auto b = static_cast<size_t>(n.iattrs[0]);
    if (program.reads_binding.size() <= b) program.reads_binding.resize(b + 1, 0);
    program.reads_binding[b] = 1;
  }
  // Work estimate: elements produced, plus multiply-adds of contractions.
  static const int64_t kInlineLimit = config::get_int("TORCH_TPU_INLINE_WORK");
  int64_t work = 0;
  bool elementwise = true;
  for (int32_t i = 0; i < program.graph.size(); ++i) {
    const ir::Node& n = program.graph.node(i);
    int64_t elems = n.numel();
    const bool contraction = n.kind == ir::OpKind::kDotGeneral || n.kind == ir::OpKind::kConvolution;
    if (contraction) elems *= 64;
    program.contracts = program.contracts || contraction;
    work += elems;
    // Memory-bound: one pass over the operands (no contraction, reduction or indexing).
    elementwise = elementwise &&
                  (ir::is_elementwise(n.kind) || n.kind == ir::OpKind::kParameter || n.kind == ir::OpKind::kConstant ||
                   n.kind == ir::OpKind::kBroadcastInDim || n.kind == ir::OpKind::kReshape);
  }
  // Elementwise programs of any size too: on an idle stream the calling thread runs them with
  // ATen's threads over cache-warm memory, where the worker would take a hand-off and, with
  // up to 64 queued outputs, cache-cold destinations (docs/notes/perf-strict-512x512-add.md).
  program.run_inline_when_idle = work <= kInlineLimit || (elementwise && kInlineLimit > 0);
}

}  // namespace torch_tpu::exec
