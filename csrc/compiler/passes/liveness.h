// Graph analysis: which nodes the requested outputs depend on, and which live nodes read each.
//
// Design: one backward walk from the outputs. A runtime plans work only for live nodes (dead
// code costs nothing) and releases a value after its last live reader, so it needs both
// answers. They depend on the graph alone, not on how a runtime runs it, hence a pass of its
// own (compiler/passes/: IR only, no runtime).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace torch_tpu::compiler::passes {

struct Liveness {
  std::vector<bool> live;                     // per node: an output, or read by a live node
  std::vector<std::vector<int32_t>> readers;  // per node: its live readers, each once, in decreasing id order
};

// is_output has one entry per node of `graph`.
Liveness liveness(const ir::Graph& graph, const std::vector<bool>& is_output);

}  // namespace torch_tpu::compiler::passes
