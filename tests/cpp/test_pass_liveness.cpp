// Graph analysis: liveness (compiler/passes/liveness.h; IR only, no PyTorch needed).
#include <gtest/gtest.h>

#include "compiler/passes/liveness.h"
#include "ir/graph.h"

namespace torch_tpu::compiler::passes {
namespace {

using ir::DType;
using ir::Graph;
using ir::Node;
using ir::OpKind;

Node make(OpKind k, std::vector<int32_t> operands = {}, std::vector<int64_t> iattrs = {}) {
  return Node{k, DType::kF32, {2, 3}, std::move(operands), std::move(iattrs), {}};
}

TEST(PassLiveness, OutputsAndWhatTheyReadAreLiveReadersListedOnceNewestFirst) {
  Graph g;
  g.add(make(OpKind::kParameter, {}, {0}));  // %0
  g.add(make(OpKind::kParameter, {}, {1}));  // %1: read only by dead %4
  g.add(make(OpKind::kAdd, {0, 0}));         // %2: reads %0 twice
  g.add(make(OpKind::kMul, {2, 0}));         // %3: output
  g.add(make(OpKind::kNeg, {1}));            // %4: dead
  g.add(make(OpKind::kExp, {2}));            // %5: output
  const Liveness l = liveness(g, {false, false, false, true, false, true});
  EXPECT_EQ(l.live, (std::vector<bool>{true, false, true, true, false, true}));
  EXPECT_EQ(l.readers[0], (std::vector<int32_t>{3, 2}));  // %2 reads it twice: listed once
  EXPECT_EQ(l.readers[2], (std::vector<int32_t>{5, 3}));
  EXPECT_TRUE(l.readers[1].empty());  // its reader is dead
  EXPECT_TRUE(l.readers[3].empty());
  EXPECT_TRUE(l.readers[4].empty());
}

TEST(PassLiveness, NoOutputsNothingLive) {
  Graph g;
  g.add(make(OpKind::kParameter, {}, {0}));
  g.add(make(OpKind::kNeg, {0}));
  const Liveness l = liveness(g, {false, false});
  EXPECT_EQ(l.live, (std::vector<bool>{false, false}));
  EXPECT_TRUE(l.readers[0].empty());
}

}  // namespace
}  // namespace torch_tpu::compiler::passes
