#include "runtime/host/concat_reshapes.h"

#include <ATen/TensorUtils.h>

#include <cstddef>

#include "runtime/host/strided_copy.h"

namespace torch_tpu::runtime::host {

ir::Graph absorb_concat_reshapes(const ir::Graph& graph, const std::vector<bool>& keep, ConcatOperandShapes& shapes) {
  const auto n = static_cast<size_t>(graph.size());
  const std::vector<int32_t> readers = reader_counts(graph);
  ir::Graph out;
  out.reserve(n);
  for (int32_t i = 0; i < graph.size(); ++i) {
    ir::Node node = graph.node(i);
    if (node.kind == ir::OpKind::kConcatenate) {
      std::vector<std::vector<int64_t>> operand_shapes(node.operands.size());
      bool any = false;
      for (size_t k = 0; k < node.operands.size(); ++k) {
        const auto o = static_cast<size_t>(node.operands[k]);
        const ir::Node& r = graph.node(node.operands[k]);
        if (r.kind != ir::OpKind::kReshape || readers[o] != 1 || (o < keep.size() && keep[o])) continue;
        operand_shapes[k] = r.shape;
        node.operands[k] = r.operands[0];
        any = true;
      }
      if (any) shapes[i] = std::move(operand_shapes);
    }
    out.add(std::move(node));
  }
  return out;
}

Kernel make_concat_kernel(const ir::Graph& graph, int32_t id, std::vector<std::vector<int64_t>> operand_shapes) {
  const ir::Node& node = graph.node(id);
  const std::vector<int32_t> xs = node.operands;
  const int64_t dim = node.iattrs.at(0);
  const std::vector<int64_t> shape = node.shape;
  return [xs, dim, shape, operand_shapes = std::move(operand_shapes)](const Values& v, at::Tensor* out) {
    at::Tensor result = out ? *out : at::empty(shape, v[xs[0]].options());
    // Each operand's slice of the result, by pointer arithmetic (strided_copy.h: no dispatch).
    auto* base = static_cast<char*>(result.mutable_data_ptr());
    const int64_t item = static_cast<int64_t>(result.element_size());
    std::vector<int64_t> slice_sizes = shape;
    int64_t offset = 0;
    for (size_t k = 0; k < xs.size(); ++k) {
      const at::Tensor& x = v[xs[k]];
      const std::vector<int64_t>& reshaped = operand_shapes[k];
      const int64_t size = reshaped.empty() ? x.size(dim) : reshaped[static_cast<size_t>(dim)];
      slice_sizes[static_cast<size_t>(dim)] = size;
      char* slice = base + offset * result.stride(dim) * item;
      offset += size;
      if (x.numel() == 0) continue;
      if (reshaped.empty()) {
        strided_copy(slice, result.strides(), x.const_data_ptr(), x.strides(), x.sizes(), x.element_size());
      } else if (auto strides = at::detail::computeStride(slice_sizes, result.strides(), x.sizes())) {
        strided_copy(slice, *strides, x.const_data_ptr(), x.strides(), x.sizes(), x.element_size());
      } else {  // the slice cannot be viewed in x's shape
        const at::Tensor y = reshaped_copy(x, reshaped);
        strided_copy(slice, result.strides(), y.const_data_ptr(), y.strides(), y.sizes(), y.element_size());
      }
    }
    return result;
  };
}

}  // namespace torch_tpu::runtime::host
