#include "compiler/passes/constant_values.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace torch_tpu::compiler::passes {

bool foldable_kind(ir::OpKind k) {
  return k == ir::OpKind::kConstant || k == ir::OpKind::kIota || ir::is_elementwise(k) ||
         k == ir::OpKind::kBroadcastInDim || k == ir::OpKind::kReshape || k == ir::OpKind::kTranspose ||
         k == ir::OpKind::kSlice || k == ir::OpKind::kReverse;
}

std::vector<bool> constant_values(const ir::Graph& graph) {
  std::vector<bool> constant(static_cast<size_t>(graph.size()), false);
  for (int32_t i = 0; i < graph.size(); ++i) {
    const ir::Node& node = graph.node(i);
    constant[static_cast<size_t>(i)] =
        foldable_kind(node.kind) && std::all_of(node.operands.begin(), node.operands.end(),
                                                [&](int32_t o) { return constant[static_cast<size_t>(o)]; });
  }
  return constant;
}

}  // namespace torch_tpu::compiler::passes
