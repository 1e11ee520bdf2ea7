// Concatenates that copy their reshaped operands' sources straight into place.
//
// Design: attention merges heads back with a reshape of a transposed value
// ([B, H, T, D] -> [B, T, H, D] -> [B, T, H * D]), and a fused qkv projection's backward
// concatenates three such gradients. On the host a reshape of a transposed value is a copy, so
// each operand was copied twice: once by its reshape, once by the concatenate. When a reshape
// is read by nothing but one concatenate (and is no output), the concatenate reads the
// reshape's source instead and copies it into its slice of the result viewed in the source's
// shape (a reshape keeps row-major order, so that view holds exactly the reshaped elements);
// the reshape has no reader left and no step. absorb_concat_reshapes rewrites the graph (node
// ids kept) and says, per concatenate, the shape each operand takes in the result;
// make_concat_kernel builds the kernel that uses them.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "runtime/host/kernels.h"

namespace torch_tpu::runtime::host {

// Per rewritten concatenate: operand k's shape in the concatenation (its reshape's shape),
// or empty where operand k is read as it is.
using ConcatOperandShapes = std::unordered_map<int32_t, std::vector<std::vector<int64_t>>>;

// The graph with such reshapes absorbed into their concatenates; `shapes` receives the
// concatenates rewritten. Nodes in `keep` (outputs) are never absorbed.
ir::Graph absorb_concat_reshapes(const ir::Graph& graph, const std::vector<bool>& keep, ConcatOperandShapes& shapes);

// The kernel of concatenate `id` of a rewritten graph, given its operand shapes.
Kernel make_concat_kernel(const ir::Graph& graph, int32_t id, std::vector<std::vector<int64_t>> operand_shapes);

}  // namespace torch_tpu::runtime::host
