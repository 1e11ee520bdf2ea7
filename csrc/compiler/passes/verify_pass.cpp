#include "compiler/passes/verify_pass.h"

#include <string>

#include "ir/verifier.h"

namespace torch_tpu::compiler::passes {

void verify_pass_output(const ir::Graph& graph, std::string_view pass) {
  try {
    ir::verify(graph);
  } catch (const ir::VerifyError& e) {
    // The same type and node: callers that catch VerifyError see the pass in the message.
    throw ir::VerifyError(e.node(), "after pass " + std::string(pass) + ": " + e.what());
  }
}

}  // namespace torch_tpu::compiler::passes
