// Graph analysis: liveness (compiler/passes/liveness.h; IR only, no PyTorch needed).
#include <gtest/gtest.h>

#include "compiler/passes/liveness.h"
#include "graph_helpers.h"

namespace torch_tpu::compiler::passes {
namespace {

using namespace torch_tpu::testing;  // Program, OpKind (graph_helpers.h)

// Every node here is f32[2, 3]: liveness reads only operands.
int32_t add(Program& p, OpKind k, std::vector<int32_t> operands = {}, std::vector<int64_t> iattrs = {}) {
  return p.add(k, DType::kF32, {2, 3}, std::move(operands), std::move(iattrs));
}

TEST(PassLiveness, OutputsAndWhatTheyReadAreLiveReadersListedOnceNewestFirst) {
  Program p;
  add(p, OpKind::kParameter, {}, {0});  // %0
  add(p, OpKind::kParameter, {}, {1});  // %1: read only by dead %4
  add(p, OpKind::kAdd, {0, 0});         // %2: reads %0 twice
  add(p, OpKind::kMul, {2, 0});         // %3: output
  add(p, OpKind::kNeg, {1});            // %4: dead
  add(p, OpKind::kExp, {2});            // %5: output
  const Liveness l = liveness(p.g, {false, false, false, true, false, true});
  EXPECT_EQ(l.live, (std::vector<bool>{true, false, true, true, false, true}));
  EXPECT_EQ(l.readers[0], (std::vector<int32_t>{3, 2}));  // %2 reads it twice: listed once
  EXPECT_EQ(l.readers[2], (std::vector<int32_t>{5, 3}));
  EXPECT_TRUE(l.readers[1].empty());  // its reader is dead
  EXPECT_TRUE(l.readers[3].empty());
  EXPECT_TRUE(l.readers[4].empty());
}

TEST(PassLiveness, NoOutputsNothingLive) {
  Program p;
  add(p, OpKind::kParameter, {}, {0});
  add(p, OpKind::kNeg, {0});
  const Liveness l = liveness(p.g, {false, false});
  EXPECT_EQ(l.live, (std::vector<bool>{false, false}));
  EXPECT_TRUE(l.readers[0].empty());
}

}  // namespace
}  // namespace torch_tpu::compiler::passes
