// Text form of IR graphs, for error messages, debugging dumps and golden tests.
//
// Design: one line per node in a StableHLO-like syntax,
//   %3 = add %1, %2 : tensor<2x3xf32>
//   %5 = reduce %4 {kind = sum, dims = [1]} : tensor<2xf32>
// with attributes decoded into names from docs/ir.md, so a dump reads without the attribute
// layout at hand. Printing does not verify: malformed attributes print as raw lists.
#pragma once

#include <string>

#include "ir/graph.h"

namespace torch_tpu::ir {

std::string to_string(const Graph& graph);
// One node's line (without the trailing newline).
std::string node_to_string(const Graph& graph, int32_t id);

}  // namespace torch_tpu::ir
