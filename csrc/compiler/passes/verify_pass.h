// Verifying a pass's output: the IR verifier (ir/verifier.h) run on the graph a Graph -> Graph
// pass returned, its error naming the pass.
//
// Design: a lowering's graph is verified before it is compiled (exec/compile.cpp); a pass that
// breaks a constraint would otherwise surface as a wrong kernel or a crash in a runtime, far
// from the pass. A runtime's planner calls this after each pass when TORCH_TPU_VERIFY is on
// (host: host_plan.cpp, HostOptions::verify); the flag is read by the caller, so passes stay IR
// only. Only passes whose output is plain IR are verified: the host's own rewrites write forms
// that only its kernels read (a dot_general with a bias operand; kernels.h).
#pragma once

#include <string_view>

#include "ir/graph.h"

namespace torch_tpu::compiler::passes {

// Throws ir::VerifyError ("after pass <pass>: <the verifier's message>", same node) for the
// first node of `graph` that violates a constraint.
void verify_pass_output(const ir::Graph& graph, std::string_view pass);

}  // namespace torch_tpu::compiler::passes
