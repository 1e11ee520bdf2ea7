// New-tensor specs of a program's results, including complex tensors bound as their parts.
#include "compiler/program.h"

#include <algorithm>

#include "common/check.h"

namespace torch_tpu::compiler {
namespace {

std::optional<c10::ScalarType> complex_of(ir::DType parts) {
  if (parts == ir::DType::kF32) return c10::kComplexFloat;
  if (parts == ir::DType::kF64) return c10::kComplexDouble;
  return std::nullopt;
}

}  // namespace

NewTensorSpec new_tensor_for(const ir::Node& node, std::optional<c10::ScalarType> complex_dtype) {
  if (!complex_dtype.has_value()) return {static_cast<c10::ScalarType>(node.dtype), node.shape};
  TPU_CHECK(!node.shape.empty() && node.shape.back() == 2 && complex_of(node.dtype) == complex_dtype,
            "a complex result must be a float32/float64 [..., 2] node of its parts");
  return {*complex_dtype, std::vector<int64_t>(node.shape.begin(), node.shape.end() - 1)};
}

bool spec_matches_node(const NewTensorSpec& spec, const ir::Node& node) {
  if (c10::isComplexType(spec.dtype)) {
    return !node.shape.empty() && node.shape.back() == 2 && complex_of(node.dtype) == spec.dtype &&
           std::equal(spec.shape.begin(), spec.shape.end(), node.shape.begin(), node.shape.end() - 1);
  }
  return spec.shape == node.shape && static_cast<int>(spec.dtype) == static_cast<int>(node.dtype);
}

}  // namespace torch_tpu::compiler
