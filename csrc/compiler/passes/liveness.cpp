#include "compiler/passes/liveness.h"

#include <cstddef>

namespace torch_tpu::compiler::passes {

Liveness liveness(const ir::Graph& graph, const std::vector<bool>& is_output) {
  Liveness l;
  l.live = is_output;
  l.readers.resize(static_cast<size_t>(graph.size()));
  for (int32_t i = graph.size() - 1; i >= 0; --i) {
    if (!l.live[i]) continue;
    for (int32_t o : graph.node(i).operands) {
      l.live[o] = true;
      if (l.readers[o].empty() || l.readers[o].back() != i) l.readers[o].push_back(i);
    }
  }
  return l;
}

}  // namespace torch_tpu::compiler::passes
