// Graph analysis: which nodes compute the same value on every run of a program.
//
// Design: one forward walk. A constant or an iota is such a value, and so is a node of a kind
// that computes from its operands alone (elementwise, broadcast_in_dim, reshape, transpose,
// slice, reverse) when every operand is one. A runtime may compute these once when it builds
// the program and bind the results at each run like parameters (the host runtime does:
// HostExecutable::fold_constants, docs/notes/constant-folding.md), evaluating only what it
// chooses to (its own size bound, what fails at build time). Which values qualify depends on
// the graph alone, so the analysis is a pass (compiler/passes/: IR only, no runtime).
#pragma once

#include <vector>

#include "ir/graph.h"
#include "ir/ops.h"

namespace torch_tpu::compiler::passes {

// Whether a node of kind k is a constant when its operands are (a constant or an iota has none).
bool foldable_kind(ir::OpKind k);

// Per node: its value is the same on every run (see above).
std::vector<bool> constant_values(const ir::Graph& graph);

}  // namespace torch_tpu::compiler::passes
