// Graph pass: collapse_view_chains (compiler/passes/view_chains.h; IR only, no PyTorch needed).
#include <gtest/gtest.h>

#include <string>

#include "compiler/passes/view_chains.h"
#include "ir/graph.h"
#include "ir/verifier.h"

namespace torch_tpu::compiler::passes {
namespace {

using ir::DType;
using ir::Graph;
using ir::Node;
using ir::OpKind;

Node make(OpKind k, DType t, std::vector<int64_t> shape, std::vector<int32_t> operands = {},
          std::vector<int64_t> iattrs = {}) {
  return Node{k, t, std::move(shape), std::move(operands), std::move(iattrs), {}};
}

std::string verify_error(const Graph& g) {
  try {
    ir::verify(g);
  } catch (const ir::VerifyError& e) {
    return e.what();
  }
  return "";
}

TEST(PassViewChains, ChainsReadTheirStartAndNoOpViewsForwardTheirReaders) {
  Graph g;
  g.add(make(OpKind::kParameter, DType::kF32, {4, 6}, {}, {0}));            // %0
  g.add(make(OpKind::kReshape, DType::kF32, {24}, {0}));                    // %1
  g.add(make(OpKind::kReshape, DType::kF32, {2, 12}, {1}));                 // %2 -> reads %0
  g.add(make(OpKind::kReshape, DType::kF32, {4, 6}, {2}));                  // %3: %0's shape again
  g.add(make(OpKind::kNeg, DType::kF32, {4, 6}, {3}));                      // %4 -> reads %0
  g.add(make(OpKind::kParameter, DType::kF32, {2, 3, 5}, {}, {1}));         // %5
  g.add(make(OpKind::kTranspose, DType::kF32, {3, 5, 2}, {5}, {1, 2, 0}));  // %6
  g.add(make(OpKind::kTranspose, DType::kF32, {5, 2, 3}, {6}, {1, 2, 0}));  // %7 -> %5, {2, 0, 1}
  g.add(make(OpKind::kTranspose, DType::kF32, {2, 3, 5}, {7}, {1, 2, 0}));  // %8 -> identity
  g.add(make(OpKind::kExp, DType::kF32, {2, 3, 5}, {8}));                   // %9 -> reads %5
  g.add(make(OpKind::kReshape, DType::kF32, {4, 6}, {1}));                  // %10: identity, but an output
  const Graph out =
      collapse_view_chains(g, {false, false, false, false, false, false, false, false, false, false, true});
  ASSERT_EQ(out.size(), g.size());
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
