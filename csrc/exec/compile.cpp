// Turning a lowered graph into an executable program: verify (debug mode or TORCH_TPU_VERIFY),
// then compile on the runtime.
#include "common/config.h"
#include "exec/call.h"
#include "exec/mode.h"
#include "ir/verifier.h"

namespace torch_tpu::exec {

void finish_program(compiler::Program& program, const std::vector<int32_t>& output_nodes) {
  static const bool always_verify = config::get_bool("TORCH_TPU_VERIFY");
  if (always_verify || mode() == Mode::Debug) ir::verify(program.graph);
  program.executable = runtime::host_runtime().compile(program.graph, output_nodes);
  // Work estimate: elements produced, plus multiply-adds of contractions.
  constexpr int64_t kInlineLimit = 1 << 15;
  int64_t work = 0;
  for (int32_t i = 0; i < program.graph.size(); ++i) {
    const ir::Node& n = program.graph.node(i);
    int64_t elems = n.numel();
    if (n.kind == ir::OpKind::kDotGeneral || n.kind == ir::OpKind::kConvolution) elems *= 64;
    work += elems;
  }
  program.run_inline_when_idle = work <= kInlineLimit;
}

}  // namespace torch_tpu::exec
