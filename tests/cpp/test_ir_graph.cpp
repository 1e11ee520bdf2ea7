// IR graph building, hashing, verification and printing (csrc/ir, no PyTorch needed).
#include <gtest/gtest.h>

#include <string>

#include "graph_helpers.h"
#include "ir/graph.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace torch_tpu::ir {
namespace {

Node make(OpKind k, DType t, std::vector<int64_t> shape, std::vector<int32_t> operands = {},
          std::vector<int64_t> iattrs = {}, std::vector<double> fattrs = {}) {
  return Node{k, t, std::move(shape), std::move(operands), std::move(iattrs), std::move(fattrs)};
}

// %0, %1 = parameters f32[2,3]; %2 = add; %3 = reduce sum over dim 1.
Graph small_graph(DType t = DType::kF32) {
  Graph g;
  g.add(make(OpKind::kParameter, t, {2, 3}, {}, {0}));
  g.add(make(OpKind::kParameter, t, {2, 3}, {}, {1}));
  g.add(make(OpKind::kAdd, t, {2, 3}, {0, 1}));
  g.add(make(OpKind::kReduce, t, {2}, {2}, {0, 1}));
  return g;
}

using torch_tpu::testing::verify_error;

TEST(IrOps, NamesMatchBuilderOrder) {
  EXPECT_EQ(kNumOpKinds, 75);
  EXPECT_STREQ(op_name(OpKind::kParameter), "parameter");
  EXPECT_STREQ(op_name(OpKind::kShrLogical), "shr_logical");
  EXPECT_STREQ(op_name(OpKind::kSort), "sort");
  EXPECT_STREQ(op_name(OpKind::kTriangularSolve), "triangular_solve");
  EXPECT_STREQ(op_name(OpKind::kNumOps), "<invalid>");
  EXPECT_EQ(static_cast<int>(OpKind::kAdd), 38);
}

TEST(IrDType, CodesAndSizes) {
  EXPECT_EQ(static_cast<int>(DType::kBF16), 15);
  EXPECT_EQ(itemsize(DType::kBF16), 2);
  EXPECT_EQ(itemsize(DType::kF64), 8);
  EXPECT_EQ(itemsize(DType::kBool), 1);
  EXPECT_STREQ(dtype_name(DType::kI16), "i16");
  EXPECT_TRUE(is_valid_dtype(11));
  EXPECT_FALSE(is_valid_dtype(8));
  EXPECT_TRUE(is_float(DType::kBF16));
  EXPECT_FALSE(is_integer(DType::kBool));
}

TEST(IrGraph, BuildAndAccess) {
  Graph g = small_graph();
  ASSERT_EQ(g.size(), 4);
  EXPECT_EQ(g.node(2).kind, OpKind::kAdd);
  EXPECT_EQ(g.node(3).shape, std::vector<int64_t>{2});
  EXPECT_EQ(g.node(3).numel(), 2);
  EXPECT_EQ(g.node(0).numel(), 6);
}

TEST(IrGraph, HashEqualForEqualGraphs) {
  EXPECT_EQ(small_graph().hash(), small_graph().hash());
  EXPECT_EQ(small_graph().node_hash(2), small_graph().node_hash(2));
  EXPECT_NE(Graph().hash(), small_graph().hash());
}

TEST(IrGraph, HashDiffersOnAnyField) {
  const uint64_t base = small_graph().hash();
  EXPECT_NE(small_graph(DType::kF16).hash(), base);  // dtype
  auto variant = [](auto edit) {
    Graph ref = small_graph(), g;
    for (int32_t i = 0; i < ref.size(); ++i) {
      Node n = ref.node(i);
      if (i == 3) edit(n);
      g.add(n);
    }
    return g.hash();
  };
  EXPECT_EQ(variant([](Node&) {}), base);
  EXPECT_NE(variant([](Node& n) { n.kind = OpKind::kReduceWindow; }), base);
  EXPECT_NE(variant([](Node& n) { n.shape = {3}; }), base);
  EXPECT_NE(variant([](Node& n) { n.operands = {1}; }), base);
  EXPECT_NE(variant([](Node& n) { n.iattrs = {2, 1}; }), base);
  EXPECT_NE(variant([](Node& n) { n.fattrs = {0.0}; }), base);
  // Same flattened contents, different split between lists: still different.
  EXPECT_NE(variant([](Node& n) {
              n.shape = {2, 2};
              n.operands = {};
            }),
            variant([](Node& n) {
              n.shape = {2};
              n.operands = {2};
            }));
  // Float attributes hash by bit pattern (0.0 vs -0.0 are different constants).
  Graph a, b;
  a.add(make(OpKind::kConstant, DType::kF32, {}, {}, {}, {0.0}));
  b.add(make(OpKind::kConstant, DType::kF32, {}, {}, {}, {-0.0}));
  EXPECT_NE(a.hash(), b.hash());
}

TEST(IrVerifier, AcceptsWellTypedGraphs) {
  EXPECT_NO_THROW(verify(small_graph()));
  Graph g;
  int32_t x = g.add(make(OpKind::kParameter, DType::kF32, {2, 3, 4}, {}, {0}));
  int32_t w = g.add(make(OpKind::kParameter, DType::kF32, {3, 5}, {}, {1}));
  g.add(make(OpKind::kDotGeneral, DType::kF32, {2, 4, 5}, {x, w}, {0, 1, 1, 0}));
  int32_t b = g.add(make(OpKind::kBroadcastInDim, DType::kF32, {7, 3, 5}, {w}, {1, 2}));
  g.add(make(OpKind::kTranspose, DType::kF32, {5, 7, 3}, {b}, {2, 0, 1}));
  int32_t s = g.add(make(OpKind::kParameter, DType::kI64, {}, {}, {-1}));
  int32_t o = g.add(make(OpKind::kParameter, DType::kI64, {}, {}, {-2}));
  g.add(make(OpKind::kRngNormal, DType::kBF16, {4}, {s, o}));
  int32_t c = g.add(make(OpKind::kConstant, DType::kF32, {}, {}, {}, {1.5}));
  g.add(make(OpKind::kPad, DType::kF32, {2, 4, 9}, {x, c}, {0, 1, -1, 0, 0, 0, 0, 0, 2}));
  g.add(make(OpKind::kReduce, DType::kI64, {2, 4}, {x}, {6, 1}));
  g.add(make(OpKind::kReduceWindow, DType::kF32, {1, 1, 3}, {x}, {1, 2, 3, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
  int32_t m = g.add(make(OpKind::kParameter, DType::kF64, {2, 3, 3}, {}, {2}));
  int32_t rhs = g.add(make(OpKind::kParameter, DType::kF64, {2, 4, 3}, {}, {3}));
  int32_t f = g.add(make(OpKind::kCholesky, DType::kF64, {2, 3, 3}, {m}, {1}));
  g.add(make(OpKind::kTriangularSolve, DType::kF64, {2, 4, 3}, {f, rhs}, {0, 1, 0, 1}));  // x a^T = b
  EXPECT_NO_THROW(verify(g)) << verify_error(g);
}

TEST(IrVerifier, RejectsWithConstraintCited) {
  {  // add.C2: dtypes differ
    Graph g;
    g.add(make(OpKind::kParameter, DType::kF32, {2}, {}, {0}));
    g.add(make(OpKind::kParameter, DType::kF16, {2}, {}, {1}));
    g.add(make(OpKind::kAdd, DType::kF32, {2}, {0, 1}));
    EXPECT_EQ(verify_error(g), "%2 = add: add.C2 operand dtypes differ (f32 vs f16)");
  }
  {  // add.C1: shapes differ
    Graph g;
    g.add(make(OpKind::kParameter, DType::kF32, {2}, {}, {0}));
    g.add(make(OpKind::kParameter, DType::kF32, {3}, {}, {1}));
    g.add(make(OpKind::kAdd, DType::kF32, {2}, {0, 1}));
    EXPECT_EQ(verify_error(g), "%2 = add: add.C1 operand shapes differ ([2] vs [3])");
  }
  {  // recorded result type differs from the inferred one
    Graph g = small_graph();
    Graph bad;
    for (int32_t i = 0; i < 3; ++i) bad.add(g.node(i));
    bad.add(make(OpKind::kReduce, DType::kF32, {3}, {2}, {0, 1}));
    EXPECT_EQ(verify_error(bad), "%3 = reduce: reduce.G6 recorded shape [3] != inferred [2]");
  }
  struct Case {
    Node bad;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {make(OpKind::kExp, DType::kI32, {2, 3}, {2}), "exp.C1 needs a float operand, got i32"},
      {make(OpKind::kAdd, DType::kI32, {2, 3}, {2}), "add.G2 expects 2 operands, got 1"},
      {make(OpKind::kAdd, DType::kI32, {2, 3}, {2, 9}), "add.G1 operand %9 is not an earlier node"},
      {make(OpKind::kShl, DType::kBool, {2, 3}, {3, 3}), "shl.C3 needs integer operands, got bool"},
      {make(OpKind::kSelect, DType::kI32, {2, 3}, {2, 2, 2}), "select.C1 predicate must be bool"},
      {make(OpKind::kIota, DType::kI32, {2, 3}, {}, {2}), "iota.C1 dim 2 out of range for rank 2"},
      {make(OpKind::kBroadcastInDim, DType::kI32, {4, 3}, {2}, {0, 1}), "broadcast_in_dim.C1"},
      {make(OpKind::kBroadcastInDim, DType::kI32, {2, 2}, {2}, {1, 0}), "broadcast_in_dim.C2"},
      {make(OpKind::kReshape, DType::kI32, {7}, {2}), "reshape.C1 [2,3] -> [7] changes"},
      {make(OpKind::kTranspose, DType::kI32, {3, 2}, {2}, {1, 1}), "transpose.C1"},
      {make(OpKind::kSlice, DType::kI32, {2, 3}, {2}, {0, 0, 2, 4, 1, 1}), "slice.C1 dim 1"},
      {make(OpKind::kGather, DType::kI32, {2, 3}, {2, 2}, {0}), "gather.C2 index i32[2,3]"},
      {make(OpKind::kReduce, DType::kI32, {2}, {2}, {4, 1}), "reduce.C2 and/or need bool"},
      {make(OpKind::kReduce, DType::kI32, {2}, {2}, {0, 1, 1}), "reduce.C1 dims [1,1]"},
      {make(OpKind::kDotGeneral, DType::kI32, {2, 2}, {2, 2}, {0, 1, 1, 0}), "dot_general.C3"},
      {make(OpKind::kConvolution, DType::kI32, {2, 2}, {2, 2}, {0}), "convolution.C1"},
      {make(OpKind::kConstant, DType::kF32, {}, {}, {1}), "constant.G3"},
      {make(OpKind::kParameter, DType::kF32, {}, {}, {-1}), "parameter.C1 RNG state"},
      {make(OpKind::kRngUniform, DType::kI32, {}, {0, 1}), "rng_uniform.C1"},
      {make(OpKind::kSort, DType::kI32, {2, 3}, {2}, {0, 0, 1}), "sort.G5 recorded dtype i32 != inferred i64"},
      {make(OpKind::kCholesky, DType::kI32, {2, 3}, {2}, {1}), "cholesky.C1 needs square matrices"},
      {make(OpKind::kTriangularSolve, DType::kI32, {2, 3}, {2, 2}, {1, 1, 0, 0}), "triangular_solve.C1"},
  };
  for (const Case& c : cases) {
    Graph g;
    g.add(make(OpKind::kParameter, DType::kI32, {2, 3}, {}, {0}));
    g.add(make(OpKind::kParameter, DType::kI32, {2, 3}, {}, {1}));
    g.add(make(OpKind::kAdd, DType::kI32, {2, 3}, {0, 1}));
    g.add(make(OpKind::kCompare, DType::kBool, {2, 3}, {0, 1}, {2}));
    g.add(c.bad);
    std::string msg = verify_error(g);
    EXPECT_EQ(msg.rfind("%4 = " + std::string(op_name(c.bad.kind)) + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << "got: " << msg << "\nwant: " << c.expected;
  }
}

TEST(IrVerifier, ErrorCarriesNodeId) {
  Graph g;
  g.add(make(OpKind::kParameter, DType::kF32, {2}, {}, {0}));
  g.add(make(OpKind::kLog, DType::kF32, {3}, {0}));
  try {
    verify(g);
    FAIL() << "expected a VerifyError";
  } catch (const VerifyError& e) {
    EXPECT_EQ(e.node(), 1);
  }
}

TEST(IrPrinter, StableHloLikeText) {
  Graph g = small_graph();
  g.add(make(OpKind::kConstant, DType::kF32, {}, {}, {}, {0.5}));
  g.add(make(OpKind::kCompare, DType::kBool, {2, 3}, {0, 1}, {2}));
  EXPECT_EQ(to_string(g),
            "%0 = parameter {binding = 0} : tensor<2x3xf32>\n"
            "%1 = parameter {binding = 1} : tensor<2x3xf32>\n"
            "%2 = add %0, %1 : tensor<2x3xf32>\n"
            "%3 = reduce %2 {kind = sum, dims = [1]} : tensor<2xf32>\n"
            "%4 = constant {value = 0.5} : tensor<f32>\n"
            "%5 = compare %0, %1 {dir = lt} : tensor<2x3xbool>\n");
  Graph d;
  d.add(make(OpKind::kParameter, DType::kF32, {2, 3, 4}, {}, {0}));
  d.add(make(OpKind::kParameter, DType::kF32, {3, 5}, {}, {1}));
  d.add(make(OpKind::kDotGeneral, DType::kF32, {2, 4, 5}, {0, 1}, {0, 1, 1, 0}));
  d.add(make(OpKind::kParameter, DType::kI64, {}, {}, {-1}));
  EXPECT_EQ(node_to_string(d, 2),
            "%2 = dot_general %0, %1 {lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
            "rhs_contract = [0]} : tensor<2x4x5xf32>");
  EXPECT_EQ(node_to_string(d, 3), "%3 = parameter {binding = rng_seed} : tensor<i64>");
}

}  // namespace
}  // namespace torch_tpu::ir
