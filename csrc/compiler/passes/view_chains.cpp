#include "compiler/passes/view_chains.h"

#include <cstddef>
#include <cstdint>

namespace torch_tpu::compiler::passes {

using ir::Graph;
using ir::Node;
using ir::OpKind;

Graph collapse_view_chains(const Graph& graph, const std::vector<bool>& keep) {
  Graph out;
  out.reserve(static_cast<size_t>(graph.size()));
  std::vector<int32_t> forward(static_cast<size_t>(graph.size()));  // who reads node i reads this
  for (int32_t i = 0; i < graph.size(); ++i) {
    Node n = graph.node(i);
    for (auto& o : n.operands) o = forward[static_cast<size_t>(o)];
    bool identity = false;
    if (n.kind == OpKind::kReshape) {
      // A reshape keeps row-major order, so reshaping a reshape reshapes its operand.
      if (const Node& src = out.node(n.operands[0]); src.kind == OpKind::kReshape) n.operands[0] = src.operands[0];
      identity = out.node(n.operands[0]).shape == n.shape;
    } else if (n.kind == OpKind::kTranspose) {
      // transpose(transpose(x, p1), p2)[i] reads x's dim p1[p2[i]].
      if (const Node& src = out.node(n.operands[0]); src.kind == OpKind::kTranspose) {
        std::vector<int64_t> perm(n.iattrs.size());
        for (size_t d = 0; d < perm.size(); ++d) perm[d] = src.iattrs[static_cast<size_t>(n.iattrs[d])];
        n.iattrs = std::move(perm);
        n.operands[0] = src.operands[0];
      }
      identity = true;
      for (size_t d = 0; d < n.iattrs.size(); ++d) identity &= n.iattrs[d] == static_cast<int64_t>(d);
    }
    const bool kept = static_cast<size_t>(i) < keep.size() && keep[static_cast<size_t>(i)];
    forward[static_cast<size_t>(i)] = identity && !kept ? n.operands[0] : i;
    out.add(std::move(n));
  }
  return out;
}

}  // namespace torch_tpu::compiler::passes
