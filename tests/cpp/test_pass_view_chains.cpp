// Graph pass: collapse_view_chains (compiler/passes/view_chains.h; IR only, no PyTorch needed).
#include <gtest/gtest.h>

#include "compiler/passes/view_chains.h"
#include "graph_helpers.h"

namespace torch_tpu::compiler::passes {
namespace {

using namespace torch_tpu::testing;  // Program, OpKind, verify_error (graph_helpers.h)

TEST(PassViewChains, ChainsReadTheirStartAndNoOpViewsForwardTheirReaders) {
  Program p;
  p.add(OpKind::kParameter, DType::kF32, {4, 6}, {}, {0});            // %0
  p.add(OpKind::kReshape, DType::kF32, {24}, {0});                    // %1
  p.add(OpKind::kReshape, DType::kF32, {2, 12}, {1});                 // %2 -> reads %0
  p.add(OpKind::kReshape, DType::kF32, {4, 6}, {2});                  // %3: %0's shape again
  p.add(OpKind::kNeg, DType::kF32, {4, 6}, {3});                      // %4 -> reads %0
  p.add(OpKind::kParameter, DType::kF32, {2, 3, 5}, {}, {1});         // %5
  p.add(OpKind::kTranspose, DType::kF32, {3, 5, 2}, {5}, {1, 2, 0});  // %6
  p.add(OpKind::kTranspose, DType::kF32, {5, 2, 3}, {6}, {1, 2, 0});  // %7 -> %5, {2, 0, 1}
  p.add(OpKind::kTranspose, DType::kF32, {2, 3, 5}, {7}, {1, 2, 0});  // %8 -> identity
  p.add(OpKind::kExp, DType::kF32, {2, 3, 5}, {8});                   // %9 -> reads %5
  p.add(OpKind::kReshape, DType::kF32, {4, 6}, {1});                  // %10: identity, but an output
  const Graph out =
      collapse_view_chains(p.g, {false, false, false, false, false, false, false, false, false, false, true});
  ASSERT_EQ(out.size(), p.g.size());
  EXPECT_EQ(out.node(2).operands, std::vector<int32_t>{0});
  EXPECT_EQ(out.node(4).operands, std::vector<int32_t>{0});
  EXPECT_EQ(out.node(7).operands, std::vector<int32_t>{5});
  EXPECT_EQ(out.node(7).iattrs, (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(out.node(7).shape, (std::vector<int64_t>{5, 2, 3}));
  EXPECT_EQ(out.node(9).operands, std::vector<int32_t>{5});
  EXPECT_EQ(out.node(10).operands, std::vector<int32_t>{0});  // kept: still a node of its own
  EXPECT_EQ(verify_error(out), "");
}

}  // namespace
}  // namespace torch_tpu::compiler::passes
