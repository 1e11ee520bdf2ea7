// Graph analysis: constant_values (compiler/passes/constant_values.h; IR only, no PyTorch needed).
#include <gtest/gtest.h>

#include "compiler/passes/constant_values.h"
#include "graph_helpers.h"

namespace torch_tpu::compiler::passes {
namespace {

using namespace torch_tpu::testing;  // Program, OpKind (graph_helpers.h)

constexpr DType F32 = DType::kF32;

TEST(PassConstantValues, ConstantsIotasAndWhatIsComputedFromThemAlone) {
  Program p;
  const int32_t c = p.add(OpKind::kConstant, F32, {}, {}, {}, {2.0});    // constant
  const int32_t iota = p.add(OpKind::kIota, F32, {4}, {}, {0});          // constant
  const int32_t bc = p.add(OpKind::kBroadcastInDim, F32, {4}, {c}, {});  // of a constant
  const int32_t mask = p.add(OpKind::kMul, F32, {4}, {iota, bc});        // elementwise of constants
  const int32_t rev = p.add(OpKind::kReverse, F32, {4}, {mask}, {0});    // a view-like kind
  const int32_t param = p.add(OpKind::kParameter, F32, {4}, {}, {0});    // a run input
  const int32_t mixed = p.add(OpKind::kAdd, F32, {4}, {rev, param});     // reads an input
  const int32_t sum = p.add(OpKind::kReduce, F32, {}, {rev}, {0, 0});    // a kind never folded
  const int32_t after = p.add(OpKind::kNeg, F32, {}, {sum});             // reads a non-constant
  const std::vector<bool> k = constant_values(p.g);
  EXPECT_TRUE(k[c] && k[iota] && k[bc] && k[mask] && k[rev]);
  EXPECT_FALSE(k[param] || k[mixed] || k[sum] || k[after]);
}

TEST(PassConstantValues, FoldableKinds) {
  for (OpKind kind : {OpKind::kConstant, OpKind::kIota, OpKind::kAdd, OpKind::kConvert, OpKind::kSelect,
                      OpKind::kBroadcastInDim, OpKind::kReshape, OpKind::kTranspose, OpKind::kSlice,
                      OpKind::kReverse}) {
    EXPECT_TRUE(foldable_kind(kind)) << ir::op_name(kind);
  }
  for (OpKind kind : {OpKind::kParameter, OpKind::kRngUniform, OpKind::kReduce, OpKind::kDotGeneral,
                      OpKind::kConcatenate, OpKind::kGather}) {
    EXPECT_FALSE(foldable_kind(kind)) << ir::op_name(kind);
  }
}

}  // namespace
}  // namespace torch_tpu::compiler::passes
