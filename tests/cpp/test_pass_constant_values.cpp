// Graph analysis: constant_values (compiler/passes/constant_values.h; IR only, no PyTorch needed).
#include <gtest/gtest.h>

#include "compiler/passes/constant_values.h"
#include "ir/graph.h"

namespace torch_tpu::compiler::passes {
namespace {

using ir::DType;
using ir::Graph;
using ir::Node;
using ir::OpKind;

int32_t add(Graph& g, OpKind k, std::vector<int64_t> shape, std::vector<int32_t> operands = {},
            std::vector<int64_t> iattrs = {}, std::vector<double> fattrs = {}) {
  return g.add(Node{k, DType::kF32, std::move(shape), std::move(operands), std::move(iattrs), std::move(fattrs)});
}

TEST(PassConstantValues, ConstantsIotasAndWhatIsComputedFromThemAlone) {
  Graph g;
  const int32_t c = add(g, OpKind::kConstant, {}, {}, {}, {2.0});          // constant
  const int32_t iota = add(g, OpKind::kIota, {4}, {}, {0});                // constant
  const int32_t bc = add(g, OpKind::kBroadcastInDim, {4}, {c}, {});        // of a constant
  const int32_t mask = add(g, OpKind::kMul, {4}, {iota, bc});              // elementwise of constants
  const int32_t rev = add(g, OpKind::kReverse, {4}, {mask}, {0});          // a view-like kind
  const int32_t p = add(g, OpKind::kParameter, {4}, {}, {0});              // a run input
  const int32_t mixed = add(g, OpKind::kAdd, {4}, {rev, p});               // reads an input
  const int32_t sum = add(g, OpKind::kReduce, {}, {rev}, {0, 0});          // a kind never folded
  const int32_t after = add(g, OpKind::kNeg, {}, {sum});                   // reads a non-constant
  const std::vector<bool> k = constant_values(g);
  EXPECT_TRUE(k[c] && k[iota] && k[bc] && k[mask] && k[rev]);
  EXPECT_FALSE(k[p] || k[mixed] || k[sum] || k[after]);
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
