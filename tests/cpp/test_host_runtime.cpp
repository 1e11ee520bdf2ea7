// The host runtime executing small IR programs; expected values are computed by hand or with
// torch_tpu/ir/builder.py's reference mode (noted where used).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "graph_helpers.h"
#include "host_helpers.h"
#include "ir/verifier.h"
#include "runtime/host/philox.h"
#include "runtime/host/scratch_allocator.h"
#include "runtime/runtime.h"

namespace torch_tpu::runtime {
namespace {

using namespace torch_tpu::testing;  // Program, DType, OpKind, tensor_binding, ... (*_helpers.h)

// Runs `p` with tensor/scalar inputs and returns fresh contiguous results of `outputs`.
std::vector<at::Tensor> run(const Program& p, const std::vector<int32_t>& outputs, const std::vector<Binding>& inputs,
                            RngState rng = {}) {
  ir::verify(p.g);
  auto exe = host_runtime().compile(p.g, outputs);
  std::vector<at::Tensor> results;
  std::vector<OutputTarget> targets;
  for (int32_t o : outputs) {
    const Node& n = p.g.node(o);
    results.push_back(at::empty(n.shape, static_cast<at::ScalarType>(n.dtype)));
    targets.push_back({o, tensor_binding(results.back())});
  }
  exe->run(inputs, targets, rng);
  return results;
}

void expect_equal(const at::Tensor& got, const at::Tensor& want) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type());
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(at::equal(got, want)) << "got\n" << got << "\nwant\n" << want;
}

TEST(HostRuntime, NameAndSingleton) {
  EXPECT_STREQ(host_runtime().name(), "host");
  EXPECT_EQ(&host_runtime(), &host_runtime());
}

TEST(HostRuntime, ElementwiseChain) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {2, 2});
  int32_t y = p.param(1, DType::kF32, {2, 2});
  int32_t s = p.add(OpKind::kMul, DType::kF32, {2, 2}, {x, y});
  int32_t e = p.add(OpKind::kNeg, DType::kF32, {2, 2}, {s});
  int32_t c = p.add(OpKind::kCompare, DType::kBool, {2, 2}, {e, x}, {2});  // lt
  at::Tensor a = at::tensor({1.f, -2.f, 3.f, 0.5f}).view({2, 2});
  at::Tensor b = at::tensor({2.f, 3.f, -1.f, 4.f}).view({2, 2});
  auto r = run(p, {e, c}, {tensor_binding(a), tensor_binding(b)});
  expect_equal(r[0], at::tensor({-2.f, 6.f, 3.f, -2.f}).view({2, 2}));
  expect_equal(r[1], at::tensor({1, 0, 0, 1}, at::kInt).to(at::kBool).view({2, 2}));
}

// Steps that read no parameter (constants, iotas and what is computed from them only, such as
// a causal mask) run once when the program is built and are bound at every run like parameters;
// results are the same, a folded node can be an output, and a result above 64 KiB stays a step.
TEST(HostRuntime, StepsOfConstantsAloneAreFoldedOnce) {
  Program p;
  const std::vector<int64_t> sq{4, 4}, big{128, 256};
  int32_t x = p.param(0, DType::kF32, sq);
  int32_t rows = p.add(OpKind::kIota, DType::kI32, sq, {}, {0});
  int32_t cols = p.add(OpKind::kIota, DType::kI32, sq, {}, {1});
  int32_t causal = p.add(OpKind::kCompare, DType::kBool, sq, {cols, rows}, {3});  // le
  int32_t masked = p.add(OpKind::kSelect, DType::kF32, sq, {causal, x, p.splat(DType::kF32, -1.0, sq)});
  int32_t ones =
      p.add(OpKind::kAdd, DType::kF32, big, {p.splat(DType::kF32, 0.5, big), p.splat(DType::kF32, 0.5, big)});
  // Unfused, the select (it reads x) and the 128 KiB add are the only steps left.
  auto exe = torch_tpu::testing::compile_host(p, {masked, ones}, /*fuse=*/false);
  EXPECT_EQ(exe.stats().steps, 2) << exe.describe();
  EXPECT_NE(exe.describe().find("compare"), std::string::npos) << exe.describe();
  // A requested output is never folded: it is written at its place in the run, not at its start.
  auto with_mask = torch_tpu::testing::compile_host(p, {masked, causal, ones}, /*fuse=*/false);
  EXPECT_EQ(with_mask.stats().steps, 3) << with_mask.describe();
  at::Tensor xv = at::randn(sq);
  at::Tensor want_mask = at::arange(4).view({1, 4}).le(at::arange(4).view({4, 1}));
  for (int run_index = 0; run_index < 2; ++run_index) {  // folded values are bound again each run
    auto r = run(p, {masked, causal, ones}, {tensor_binding(xv)});
    expect_equal(r[1], want_mask);
    expect_equal(r[0], at::where(want_mask, xv, at::full(sq, -1.f)));
    expect_equal(r[2], at::ones(big));
  }
}

TEST(HostRuntime, IntegerDivisionTruncatesAndRemKeepsDividendSign) {
  Program p;
  int32_t x = p.param(0, DType::kI32, {4});
  int32_t y = p.param(1, DType::kI32, {4});
  int32_t d = p.add(OpKind::kDiv, DType::kI32, {4}, {x, y});
  int32_t m = p.add(OpKind::kRem, DType::kI32, {4}, {x, y});
  int32_t sh = p.add(OpKind::kShrLogical, DType::kI32, {4}, {x, y});
  at::Tensor a = at::tensor({7, -7, 7, -7}, at::kInt), b = at::tensor({2, 2, -2, 40}, at::kInt);
  auto r = run(p, {d, m, sh}, {tensor_binding(a), tensor_binding(b)});
  expect_equal(r[0], at::tensor({3, -3, -3, 0}, at::kInt));
  expect_equal(r[1], at::tensor({1, -1, 1, -7}, at::kInt));
  // -7 >> 2 logically is 0x3FFFFFFE; a shift by -2 or >= 32 gives 0.
  expect_equal(r[2], at::tensor({1, 0x3FFFFFFE, 0, 0}, at::kInt));
}

TEST(HostRuntime, BroadcastScalarBindingAndConvert) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {2, 3});
  int32_t s = p.param(1, DType::kF32, {});  // bound to a Python-style double scalar
  int32_t b = p.add(OpKind::kBroadcastInDim, DType::kF32, {2, 3}, {s}, {});
  int32_t col = p.param(2, DType::kF32, {2});
  int32_t bc = p.add(OpKind::kBroadcastInDim, DType::kF32, {2, 3}, {col}, {0});
  int32_t sum = p.add(OpKind::kAdd, DType::kF32, {2, 3}, {x, b});
  int32_t sum2 = p.add(OpKind::kAdd, DType::kF32, {2, 3}, {sum, bc});
  int32_t i = p.add(OpKind::kConvert, DType::kI64, {2, 3}, {sum2});
  Binding scalar;
  scalar.kind = Binding::Kind::Scalar;
  scalar.dtype = at::kDouble;
  scalar.d = 0.25;
  at::Tensor a = at::arange(6, at::kFloat).view({2, 3});
  at::Tensor c = at::tensor({10.f, -10.f});
  auto r = run(p, {sum2, i}, {tensor_binding(a), scalar, tensor_binding(c)});
  expect_equal(r[0], at::tensor({10.25f, 11.25f, 12.25f, -6.75f, -5.75f, -4.75f}).view({2, 3}));
  expect_equal(r[1], at::tensor({10, 11, 12, -6, -5, -4}, at::kLong).view({2, 3}));  // truncation
}

// Runs reuse the tensors that wrapped an earlier run's bindings and scalars (executor.cpp,
// RecycledTensors): every run must read its own memory, strides and scalar values.
TEST(HostRuntime, EachRunReadsItsOwnBindings) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {3, 4});
  int32_t s = p.param(1, DType::kF32, {});
  int32_t t = p.add(OpKind::kTranspose, DType::kF32, {4, 3}, {x}, {1, 0});
  int32_t b = p.add(OpKind::kBroadcastInDim, DType::kF32, {4, 3}, {s}, {});
  int32_t m = p.add(OpKind::kMul, DType::kF32, {4, 3}, {t, b});
  ir::verify(p.g);
  auto exe = host_runtime().compile(p.g, {m});
  for (int k = 0; k < 6; ++k) {
    at::Tensor xv = k % 2 ? at::randn({4, 3}).t() : at::randn({3, 4});  // strided, then contiguous
    Binding scalar;
    scalar.kind = Binding::Kind::Scalar;
    scalar.dtype = at::kDouble;
    scalar.d = k + 0.5;
    at::Tensor out = at::empty({4, 3});
    exe->run({tensor_binding(xv), scalar}, {{m, tensor_binding(out)}}, {});
    expect_equal(out, xv.t() * static_cast<float>(k + 0.5));
  }
  // Integer scalars are rewritten in their pooled tensors too.
  Program q;
  int32_t i = q.param(0, DType::kI64, {4});
  int32_t n = q.param(1, DType::kI64, {});
  int32_t sum = q.add(OpKind::kAdd, DType::kI64, {4}, {i, q.add(OpKind::kBroadcastInDim, DType::kI64, {4}, {n}, {})});
  auto iexe = host_runtime().compile(q.g, {sum});
  for (int64_t k = 0; k < 4; ++k) {
    at::Tensor iv = at::arange(4, at::kLong) * (k + 1);
    Binding scalar;
    scalar.kind = Binding::Kind::Scalar;
    scalar.dtype = at::kLong;
    scalar.i = 100 * k - 7;
    at::Tensor out = at::empty({4}, at::kLong);
    iexe->run({tensor_binding(iv), scalar}, {{sum, tensor_binding(out)}}, {});
    expect_equal(out, iv + (100 * k - 7));
  }
}

TEST(HostRuntime, Reductions) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {2, 3});
  int32_t sum = p.add(OpKind::kReduce, DType::kF32, {3}, {x}, {0, 0});
  int32_t mx = p.add(OpKind::kReduce, DType::kF32, {2}, {x}, {2, 1});
  int32_t am = p.add(OpKind::kReduce, DType::kI64, {2}, {x}, {6, 1});
  int32_t all = p.add(OpKind::kReduce, DType::kF32, {}, {x}, {1, 0, 1});
  int32_t e = p.param(1, DType::kF32, {0, 2});
  int32_t emax = p.add(OpKind::kReduce, DType::kF32, {2}, {e}, {2, 0});
  int32_t esum = p.add(OpKind::kReduce, DType::kF32, {2}, {e}, {0, 0});
  at::Tensor a = at::tensor({1.f, NAN, 3.f, 4.f, 5.f, 5.f}).view({2, 3});
  at::Tensor empty = at::empty({0, 2});
  auto r = run(p, {sum, mx, am, all, emax, esum}, {tensor_binding(a), tensor_binding(empty)});
  EXPECT_EQ(r[0][0].item<float>(), 5.f);
  EXPECT_TRUE(std::isnan(r[0][1].item<float>()));
  EXPECT_TRUE(std::isnan(r[1][0].item<float>()));  // max propagates NaN
  EXPECT_EQ(r[1][1].item<float>(), 5.f);
  expect_equal(r[2], at::tensor({1, 1}, at::kLong));  // NaN is the max; first of two 5s
  EXPECT_TRUE(std::isnan(r[3].item<float>()));
  expect_equal(r[4], at::full({2}, -INFINITY));  // empty reductions give the identity
  expect_equal(r[5], at::zeros({2}));
}

TEST(HostRuntime, DotGeneralBatchedWithTransposedOperands) {
  Program p;
  // lhs [k=3, b=2, m=2], rhs [b=2, n=2, k=3]: batch (1; 0), contract (0; 2).
  int32_t l = p.param(0, DType::kF64, {3, 2, 2});
  int32_t r = p.param(1, DType::kF64, {2, 2, 3});
  int32_t d = p.add(OpKind::kDotGeneral, DType::kF64, {2, 2, 2}, {l, r}, {1, 1, 0, 1, 0, 2});
  at::Tensor a = at::arange(12, at::kDouble).view({3, 2, 2});
  at::Tensor b = at::arange(12, at::kDouble).view({2, 2, 3}) - 5;
  auto res = run(p, {d}, {tensor_binding(a), tensor_binding(b)});
  at::Tensor want = at::einsum("kbm,bnk->bmn", {a, b});
  expect_equal(res[0], want);
  // Integers: exact, wrapping in the narrow type.
  Program q;
  int32_t li = q.param(0, DType::kI8, {1, 2});
  int32_t ri = q.param(1, DType::kI8, {2, 1});
  int32_t di = q.add(OpKind::kDotGeneral, DType::kI8, {1, 1}, {li, ri}, {0, 1, 1, 0});
  at::Tensor ai = at::tensor({100, 100}, at::kChar).view({1, 2});
  at::Tensor bi = at::tensor({2, 1}, at::kChar).view({2, 1});
  auto ri8 = run(q, {di}, {tensor_binding(ai), tensor_binding(bi)});
  EXPECT_EQ(ri8[0].item<int8_t>(), static_cast<int8_t>(300 - 256));
}

// A transposed convolution as the lowering builds it (nn_conv.py, _conv_transpose): over the
// weight reshaped, transposed, reshaped and reversed. The host reads the weight as it is
// (absorb_weight_flips, kernels.h): the chain's reshapes and transpose are no steps, and the
// values are ATen's transposed convolution's.
TEST(HostRuntime, TransposedConvolutionReadsItsWeightUnflipped) {
  for (int64_t groups : {1, 2}) {
    const int64_t n = 2, cin = 4, cout_g = 3, h = 5, stride = 2, pad = 1, outpad = 1;
    const int64_t lo = 2 - pad, hi = lo + outpad, out = (h - 1) * stride - 2 * pad + 3 + outpad;
    Program p;
    int32_t x = p.param(0, DType::kF32, {n, cin, h, h});
    int32_t w = p.param(1, DType::kF32, {cin, cout_g, 3, 3});
    int32_t t1 = p.add(OpKind::kReshape, DType::kF32, {groups, cin / groups, cout_g, 3, 3}, {w});
    int32_t t2 = p.add(OpKind::kTranspose, DType::kF32, {groups, cout_g, cin / groups, 3, 3}, {t1}, {0, 2, 1, 3, 4});
    int32_t t3 = p.add(OpKind::kReshape, DType::kF32, {groups * cout_g, cin / groups, 3, 3}, {t2});
    int32_t flipped = p.add(OpKind::kReverse, DType::kF32, {groups * cout_g, cin / groups, 3, 3}, {t3}, {2, 3});
    int32_t y = p.add(OpKind::kConvolution, DType::kF32, {n, groups * cout_g, out, out}, {x, flipped},
                      {2, 1, 1, lo, lo, hi, hi, stride, stride, 1, 1, groups});
    ir::verify(p.g);
    auto exe = host_runtime().compile(p.g, {y});
    EXPECT_EQ(exe->stats().steps, 2) << exe->describe();  // the reverse (passing the weight on), the convolution
    at::Tensor xv = at::randn({n, cin, h, h}), wv = at::randn({cin, cout_g, 3, 3});
    at::Tensor got = at::empty({n, groups * cout_g, out, out});
    exe->run({tensor_binding(xv), tensor_binding(wv)}, {{y, tensor_binding(got)}}, {});
    at::Tensor want = at::conv_transpose2d(xv, wv, {}, stride, pad, outpad, groups);
    EXPECT_TRUE(at::allclose(got, want, 1.3e-6, 1e-5)) << groups << " " << (got - want).abs().max().item<float>();
  }
}

// A linear layer as the lowering builds it: add(dot_general(x, w), broadcast_in_dim(bias)). The
// host adds the bias inside the product's kernel (absorb_bias_adds, kernels.h): one step, the
// values of ATen's addmm. Covered: a plain and a batched product, the add's operands either way
// round, a bias along another dim and a float64 product (added after the product), and a
// product that is itself an output (not rewritten: product, then the add), a strided bias.
TEST(HostRuntime, LinearBiasIsAddedByTheProduct) {
  struct Case {
    std::vector<int64_t> x, w, out, dot_attrs;
    int64_t bias_dim;
    DType dtype;
    bool swap, product_is_output, strided_bias = false;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {7, 6}, {5, 6}, {0, 1, 1, 0}, 1, DType::kF32, false, false},
      {{5, 7}, {7, 6}, {5, 6}, {0, 1, 1, 0}, 1, DType::kF32, true, false},
      {{2, 5, 7}, {2, 7, 6}, {2, 5, 6}, {1, 0, 0, 1, 2, 1}, 2, DType::kF32, false, false},
      {{5, 7}, {7, 6}, {5, 6}, {0, 1, 1, 0}, 0, DType::kF32, false, false},
      {{5, 7}, {7, 6}, {5, 6}, {0, 1, 1, 0}, 1, DType::kF64, false, false},
      {{5, 7}, {7, 6}, {5, 6}, {0, 1, 1, 0}, 1, DType::kF32, false, true},
      {{5, 7}, {7, 6}, {5, 6}, {0, 1, 1, 0}, 1, DType::kF32, false, false, true},
  };
  for (const Case& c : cases) {
    const int64_t rank = static_cast<int64_t>(c.out.size());
    Program p;
    int32_t x = p.param(0, c.dtype, c.x);
    int32_t w = p.param(1, c.dtype, c.w);
    int32_t b = p.param(2, c.dtype, {c.out[static_cast<size_t>(c.bias_dim)]});
    int32_t prod = p.add(OpKind::kDotGeneral, c.dtype, c.out, {x, w}, c.dot_attrs);
    int32_t bb = p.add(OpKind::kBroadcastInDim, c.dtype, c.out, {b}, {c.bias_dim});
    int32_t y =
        p.add(OpKind::kAdd, c.dtype, c.out, c.swap ? std::vector<int32_t>{bb, prod} : std::vector<int32_t>{prod, bb});
    ir::verify(p.g);
    std::vector<int32_t> outputs = {y};
    if (c.product_is_output) outputs.push_back(prod);
    auto exe = host_runtime().compile(p.g, outputs);
    EXPECT_EQ(exe->stats().steps, c.product_is_output ? 2 : 1) << exe->describe();
    const auto dtype = static_cast<at::ScalarType>(c.dtype);
    const int64_t nbias = c.out[static_cast<size_t>(c.bias_dim)];
    at::Tensor xv = at::randn(c.x, dtype), wv = at::randn(c.w, dtype),
               bv =
                   c.strided_bias ? at::randn({2 * nbias}, dtype).slice(0, 0, 2 * nbias, 2) : at::randn({nbias}, dtype);
    at::Tensor got = at::empty(c.out, dtype), got_prod = at::empty(c.out, dtype);
    std::vector<OutputTarget> targets = {{y, tensor_binding(got)}};
    if (c.product_is_output) targets.push_back({prod, tensor_binding(got_prod)});
    exe->run({tensor_binding(xv), tensor_binding(wv), tensor_binding(bv)}, targets, {});
    std::vector<int64_t> bias_view(static_cast<size_t>(rank), 1);
    bias_view[static_cast<size_t>(c.bias_dim)] = c.out[static_cast<size_t>(c.bias_dim)];
    at::Tensor want = at::matmul(xv, wv) + bv.view(bias_view);
    EXPECT_TRUE(at::allclose(got, want, 1.3e-6, 1e-5)) << (got - want).abs().max().item<double>();
    if (c.product_is_output) {
      EXPECT_TRUE(at::allclose(got_prod, at::matmul(xv, wv), 1.3e-6, 1e-5));
    }
  }
}

// Float products without batch dims go to BLAS on the operands in place (float_matmul in
// kernels_contract.cpp): either operand transposed, free dims merged, a destination written
// transposed, no contracted elements; operands whose free dims do not merge take ATen's path.
// Values equal ATen's products of the same operands.
TEST(HostRuntime, FloatProductsReadTheirOperandsInPlace) {
  struct Case {
    std::vector<int64_t> lhs, rhs, out, attrs;
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> want;
    bool transposed_dest = false;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {7, 6}, {5, 6}, {0, 1, 1, 0}, [](auto& a, auto& b) { return a.mm(b); }},
      {{7, 5}, {7, 6}, {5, 6}, {0, 1, 0, 0}, [](auto& a, auto& b) { return a.t().mm(b); }},
      {{5, 7}, {6, 7}, {5, 6}, {0, 1, 1, 1}, [](auto& a, auto& b) { return a.mm(b.t()); }},
      {{2, 3, 7}, {7, 6}, {2, 3, 6}, {0, 1, 2, 0}, [](auto& a, auto& b) { return at::matmul(a, b); }},
      {{7, 2, 3}, {7, 6}, {2, 3, 6}, {0, 1, 0, 0}, [](auto& a, auto& b) { return at::tensordot(a, b, {0}, {0}); }},
      {{2, 7, 3}, {7, 6}, {2, 3, 6}, {0, 1, 1, 0}, [](auto& a, auto& b) { return at::tensordot(a, b, {1}, {0}); }},
      {{5, 0}, {0, 6}, {5, 6}, {0, 1, 1, 0}, [](auto& a, auto& b) { return a.mm(b); }},
      {{7, 5}, {7, 6}, {5, 6}, {0, 1, 0, 0}, [](auto& a, auto& b) { return a.t().mm(b); }, true},
  };
  for (const Case& c : cases) {
    Program p;
    int32_t x = p.param(0, DType::kF32, c.lhs);
    int32_t w = p.param(1, DType::kF32, c.rhs);
    int32_t y = p.add(OpKind::kDotGeneral, DType::kF32, c.out, {x, w}, c.attrs);
    ir::verify(p.g);
    auto exe = host_runtime().compile(p.g, {y});
    at::Tensor xv = at::randn(c.lhs), wv = at::randn(c.rhs);
    at::Tensor got = c.transposed_dest ? at::empty({c.out[1], c.out[0]}).t() : at::empty(c.out);
    exe->run({tensor_binding(xv), tensor_binding(wv)}, {{y, tensor_binding(got)}}, {});
    const at::Tensor want = c.want(xv, wv);
    EXPECT_TRUE(at::allclose(got, want, 1.3e-6, 1e-5))
        << c.lhs << " " << c.attrs << " " << (got - want).abs().max().item<float>();
  }
}

// Attention's merge of heads: a batched product [B, H, T, D] read only by a transpose to
// [B, T, H, D] and a reshape to [B, T, H * D]. The product is written in the transpose's order
// (product_layouts, kernels.h), or straight into an output it is lent through the views; either
// way the values are ATen's. Covered: the reshape as the output, the transpose as the output,
// and the reshape read by an elementwise op (the layout without a lent output).
TEST(HostRuntime, BatchedProductWrittenInItsReadersLayout) {
  const int64_t b = 2, h = 3, t = 4, d = 5, k = 6;
  for (int variant = 0; variant < 3; ++variant) {
    Program p;
    int32_t q = p.param(0, DType::kF32, {b, h, t, k});
    int32_t v = p.param(1, DType::kF32, {b, h, k, d});
    int32_t prod = p.add(OpKind::kDotGeneral, DType::kF32, {b, h, t, d}, {q, v}, {2, 0, 1, 0, 1, 1, 3, 2});
    int32_t tr = p.add(OpKind::kTranspose, DType::kF32, {b, t, h, d}, {prod}, {0, 2, 1, 3});
    int32_t merged = p.add(OpKind::kReshape, DType::kF32, {b, t, h * d}, {tr});
    int32_t y = variant == 0 ? merged : variant == 1 ? tr : p.add(OpKind::kNeg, DType::kF32, {b, t, h * d}, {merged});
    ir::verify(p.g);
    auto exe = host_runtime().compile(p.g, {y});
    at::Tensor qv = at::randn({b, h, t, k}), vv = at::randn({b, h, k, d});
    const at::Tensor att = at::matmul(qv, vv).transpose(1, 2);
    const at::Tensor want = variant == 0   ? att.reshape({b, t, h * d})
                            : variant == 1 ? att
                                           : -att.reshape({b, t, h * d});
    at::Tensor got = at::empty(want.sizes());
    exe->run({tensor_binding(qv), tensor_binding(vv)}, {{y, tensor_binding(got)}}, {});
    EXPECT_TRUE(at::allclose(got, want, 1.3e-6, 1e-5)) << variant << " " << (got - want).abs().max().item<float>();
  }
}

TEST(HostRuntime, GatherOutOfRangeRaisesIndexError) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {3});
  int32_t i = p.param(1, DType::kI64, {2});
  int32_t g = p.add(OpKind::kGather, DType::kF32, {2}, {x, i}, {0});
  at::Tensor a = at::tensor({1.f, 2.f, 3.f});
  at::Tensor ok = at::tensor({2, 0}, at::kLong);
  expect_equal(run(p, {g}, {tensor_binding(a), tensor_binding(ok)})[0], at::tensor({3.f, 1.f}));
  for (int64_t bad : {3, -1}) {
    at::Tensor idx = at::tensor({int64_t{0}, bad}, at::kLong);
    EXPECT_THROW(run(p, {g}, {tensor_binding(a), tensor_binding(idx)}), c10::IndexError);
  }
}

// Cross entropy's pick of each row's target ([n, m] gathered along dim 1 by an index [n, 1]):
// a loop of its own (kernels_data.cpp, pick_per_row); the values and the IndexError of gather.
TEST(HostRuntime, GatherOneElementPerRow) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {3, 4});
  int32_t i = p.param(1, DType::kI64, {3, 1});
  int32_t g = p.add(OpKind::kGather, DType::kF32, {3, 1}, {x, i}, {1});
  at::Tensor a = at::arange(12, at::kFloat).view({3, 4});
  at::Tensor ok = at::tensor({3, 0, 2}, at::kLong).view({3, 1});
  expect_equal(run(p, {g}, {tensor_binding(a), tensor_binding(ok)})[0], at::gather(a, 1, ok));
  expect_equal(run(p, {g}, {tensor_binding(a.t().contiguous().t()), tensor_binding(ok)})[0], at::gather(a, 1, ok));
  for (int64_t bad : {4, -1}) {
    at::Tensor idx = at::tensor({int64_t{0}, bad, int64_t{1}}, at::kLong).view({3, 1});
    EXPECT_THROW(run(p, {g}, {tensor_binding(a), tensor_binding(idx)}), c10::IndexError);
  }
}

TEST(HostRuntime, PhiloxKnownAnswer) {
  // Random123's known-answer vector for philox4x32_10 with zero counter and key.
  auto w = host::philox4x32_10(0, 0);
  EXPECT_EQ(w[0], 0x6627e8d5u);
  EXPECT_EQ(w[1], 0xe169c58du);
  EXPECT_EQ(w[2], 0xbc57ac4cu);
  EXPECT_EQ(w[3], 0x9b00dbd8u);
}

TEST(HostRuntime, RngMatchesReferenceAndIsDeterministic) {
  // builder.py: rng_uniform(f32, (4,)) then rng_normal(f64, (3,)) with seed 42, offset 7.
  Program p;
  int32_t seed = p.param(ir::kRngSeedBinding, DType::kI64, {});
  int32_t off = p.param(ir::kRngOffsetBinding, DType::kI64, {});
  int32_t u = p.add(OpKind::kRngUniform, DType::kF32, {4}, {seed, off});
  int32_t four = p.add(OpKind::kConstant, DType::kI64, {}, {}, {4});
  int32_t off2 = p.add(OpKind::kAdd, DType::kI64, {}, {off, four});
  int32_t nrm = p.add(OpKind::kRngNormal, DType::kF64, {3}, {seed, off2});
  auto r = run(p, {u, nrm}, {}, {42, 7});
  expect_equal(r[0], at::tensor({0.3583604693412781f, 0.5480090379714966f, 0.2663445472717285f, 0.5246256589889526f}));
  EXPECT_TRUE(at::allclose(
      r[1], at::tensor({-1.3787772257554678, 0.6473087293754172, -1.7180850977669817}, at::kDouble), 0, 1e-15));
  auto again = run(p, {u, nrm}, {}, {42, 7});
  expect_equal(again[0], r[0]);
  expect_equal(again[1], r[1]);
  auto other = run(p, {u}, {}, {43, 7});
  EXPECT_FALSE(at::equal(other[0], r[0]));
}

TEST(HostRuntime, StridedInputsAndOutputs) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {2, 3});
  int32_t one = p.add(OpKind::kConstant, DType::kF32, {}, {}, {}, {1.0});
  int32_t ones = p.add(OpKind::kBroadcastInDim, DType::kF32, {2, 3}, {one}, {});
  int32_t y = p.add(OpKind::kAdd, DType::kF32, {2, 3}, {x, ones});
  int32_t t = p.add(OpKind::kTranspose, DType::kF32, {3, 2}, {y}, {1, 0});
  // Input: a transposed view with a storage offset; outputs: strided views of a larger buffer
  // (one float64, so the value is converted on the way out).
  at::Tensor base = at::arange(20, at::kFloat).view({4, 5});
  at::Tensor in = base.slice(0, 1, 4).slice(1, 0, 2).t();  // [2, 3], strides (1, 5)
  at::Tensor out_buf = at::full({4, 6}, -1.f);
  at::Tensor out_y = out_buf.slice(0, 0, 4, 2).slice(1, 1, 4);  // [2, 3], strides (12, 1)
  at::Tensor out_t_buf = at::zeros({3, 4}, at::kDouble);
  at::Tensor out_t = out_t_buf.slice(1, 0, 4, 2);  // [3, 2], strides (4, 2)
  ir::verify(p.g);
  auto exe = host_runtime().compile(p.g, {y, t});
  exe->run({tensor_binding(in)}, {{y, tensor_binding(out_y)}, {t, tensor_binding(out_t)}}, {});
  at::Tensor want = in + 1;
  expect_equal(out_y, want);
  expect_equal(out_t, want.t().to(at::kDouble));
  EXPECT_EQ(out_buf[1][0].item<float>(), -1.f);  // untouched around the view
  EXPECT_EQ(out_t_buf[0][1].item<double>(), 0.0);
}

TEST(HostRuntime, OutputAliasingAnInputIsWrittenSafely) {
  // In-place style program: the output destination is the input's own memory.
  Program p;
  int32_t x = p.param(0, DType::kF32, {2, 2});
  int32_t t = p.add(OpKind::kTranspose, DType::kF32, {2, 2}, {x}, {1, 0});
  int32_t y = p.add(OpKind::kAdd, DType::kF32, {2, 2}, {x, t});
  int32_t z = p.add(OpKind::kMul, DType::kF32, {2, 2}, {y, x});
  at::Tensor a = at::tensor({1.f, 2.f, 3.f, 4.f}).view({2, 2});
  at::Tensor want = (a + a.t()) * a;
  ir::verify(p.g);
  auto exe = host_runtime().compile(p.g, {z});
  exe->run({tensor_binding(a)}, {{z, tensor_binding(a)}}, {});
  expect_equal(a, want);
}

TEST(HostRuntime, OutputsViewingAStepAreComputedInTheirDestination) {
  // What compiled training graphs return: a weight gradient as the transpose of a product, an
  // activation reshaped. The steps computing them write straight into the destinations (viewed
  // back to their shapes): no scratch memory is taken for their [512, 256] f32 values (512 KiB,
  // above kMinScratchBytes), and the outputs' own steps copy nothing.
  const int64_t m = 512, k = 32, n = 256;
  Program p;
  int32_t a = p.param(0, DType::kF32, {m, k});
  int32_t b = p.param(1, DType::kF32, {k, n});
  int32_t c = p.param(2, DType::kF32, {m, n});
  int32_t d = p.add(OpKind::kDotGeneral, DType::kF32, {m, n}, {a, b}, {0, 1, 1, 0});
  int32_t dt = p.add(OpKind::kTranspose, DType::kF32, {n, m}, {d}, {1, 0});
  int32_t s = p.add(OpKind::kAdd, DType::kF32, {m, n}, {c, c});
  int32_t sr = p.add(OpKind::kReshape, DType::kF32, {8, m / 8, n}, {s});
  // Reshaped, then transposed so the dims a reshape would merge are apart: no view of the
  // destination has s's shape, so s is computed aside and copied.
  int32_t srt = p.add(OpKind::kTranspose, DType::kF32, {m / 8, 8, n}, {sr}, {1, 0, 2});
  at::Tensor av = at::randn({m, k}), bv = at::randn({k, n}), cv = at::randn({m, n});
  const at::Tensor want_d = at::mm(av, bv), want_s = cv + cv;
  const std::vector<Binding> in = {tensor_binding(av), tensor_binding(bv), tensor_binding(cv)};
  for (bool fuse : {false, true}) {
    auto exe = torch_tpu::testing::compile_host(p, {dt, sr, srt, d}, fuse);
    at::Tensor got_dt = at::empty({n, m}), got_sr = at::empty({8, m / 8, n});
    const auto s0 = host::scratch_stats();
    exe.run(in, {{dt, tensor_binding(got_dt)}, {sr, tensor_binding(got_sr)}}, {});
    const auto s1 = host::scratch_stats();
    EXPECT_EQ(s1.hits + s1.misses, s0.hits + s0.misses) << "fuse " << fuse;
    EXPECT_TRUE(at::allclose(got_dt, want_d.t())) << "fuse " << fuse;
    expect_equal(got_sr, want_s.view({8, m / 8, n}));
    // The fallbacks give the same values: a destination no view undoes, a source that is an
    // output itself (it keeps its destination; the transpose copies from it), and a destination
    // in an input's memory (written when its own step runs, after every read of that input).
    at::Tensor got_srt = at::empty({m / 8, 8, n}), got_d = at::empty({m, n});
    got_dt.zero_();
    exe.run(in, {{srt, tensor_binding(got_srt)}, {d, tensor_binding(got_d)}, {dt, tensor_binding(got_dt)}}, {});
    expect_equal(got_srt, want_s.view({8, m / 8, n}).transpose(0, 1));
    EXPECT_TRUE(at::allclose(got_d, want_d)) << "fuse " << fuse;
    expect_equal(got_dt, got_d.t());
    at::Tensor mem = cv.clone();
    exe.run({tensor_binding(av), tensor_binding(bv), tensor_binding(mem)},
            {{sr, tensor_binding(mem.view({8, m / 8, n}))}}, {});
    expect_equal(mem, want_s);
  }
}

TEST(HostRuntime, ViewChainsRunAsOneStep) {
  // Fused graphs read each op's result through the view it was stored as: flatten, reshape to
  // the reader's shape. A transposed value flattened would be copied; collapsed, the chain
  // below is the value itself and runs no step of its own.
  Program p;
  int32_t x = p.param(0, DType::kF32, {4, 6});
  int32_t t = p.add(OpKind::kTranspose, DType::kF32, {6, 4}, {x}, {1, 0});
  int32_t e = p.add(OpKind::kExp, DType::kF32, {6, 4}, {t});
  int32_t flat = p.add(OpKind::kReshape, DType::kF32, {24}, {e});
  int32_t back = p.add(OpKind::kReshape, DType::kF32, {6, 4}, {flat});
  int32_t y = p.add(OpKind::kNeg, DType::kF32, {6, 4}, {back});
  int32_t r = p.add(OpKind::kReshape, DType::kF32, {3, 8}, {p.add(OpKind::kReshape, DType::kF32, {2, 12}, {e})});
  at::Tensor a = at::randn({4, 6});
  auto exe = torch_tpu::testing::compile_host(p, {y, r}, /*fuse=*/false);
  EXPECT_EQ(exe.stats().steps, 4);  // transpose, exp, negate, one reshape
  at::Tensor got_y = at::empty({6, 4}), got_r = at::empty({3, 8});
  exe.run({tensor_binding(a)}, {{y, tensor_binding(got_y)}, {r, tensor_binding(got_r)}}, {});
  expect_equal(got_y, -a.t().exp());
  expect_equal(got_r, a.t().exp().reshape({3, 8}));
}

TEST(HostRuntime, ConcatenatesCopyReshapedSourcesIntoPlace) {
  // Heads merged back ([2, 3, 4, 5] transposed to [2, 4, 3, 5], reshaped to [2, 4, 15]) and
  // concatenated: the reshape, read by the concatenate alone, runs no step of its own. A
  // reshape with another reader stays; a slice that cannot be viewed in the source's shape
  // (a [24] source reshaped to [4, 6], concatenated along dim 1) takes the reshape's copy.
  Program p;
  int32_t x = p.param(0, DType::kF32, {2, 3, 4, 5});
  int32_t w = p.param(1, DType::kF32, {2, 4, 6});
  int32_t x2 = p.param(2, DType::kF32, {2, 3, 4, 5});
  int32_t flat = p.param(3, DType::kF32, {24});
  int32_t t = p.add(OpKind::kTranspose, DType::kF32, {2, 4, 3, 5}, {x}, {0, 2, 1, 3});
  int32_t r = p.add(OpKind::kReshape, DType::kF32, {2, 4, 15}, {t});
  int32_t t2 = p.add(OpKind::kTranspose, DType::kF32, {2, 4, 3, 5}, {x2}, {0, 2, 1, 3});
  int32_t r2 = p.add(OpKind::kReshape, DType::kF32, {2, 4, 15}, {t2});
  int32_t c = p.add(OpKind::kConcatenate, DType::kF32, {2, 4, 36}, {r, w, r2}, {2});
  int32_t neg = p.add(OpKind::kNeg, DType::kF32, {2, 4, 15}, {r2});
  int32_t rf = p.add(OpKind::kReshape, DType::kF32, {4, 6}, {flat});
  int32_t cf = p.add(OpKind::kConcatenate, DType::kF32, {4, 9}, {rf, p.param(4, DType::kF32, {4, 3})}, {1});
  at::Tensor xv = at::randn({2, 3, 4, 5}), wv = at::randn({2, 4, 6}), x2v = at::randn({2, 3, 4, 5});
  at::Tensor fv = at::randn({24}), gv = at::randn({4, 3});
  auto exe = torch_tpu::testing::compile_host(p, {c, neg, cf}, /*fuse=*/false);
  EXPECT_EQ(exe.stats().steps, 6);  // t, t2, r2, c, neg, cf: r and rf are absorbed
  at::Tensor got_c = at::empty({2, 4, 36}), got_neg = at::empty({2, 4, 15}), got_cf = at::empty({4, 9});
  exe.run({tensor_binding(xv), tensor_binding(wv), tensor_binding(x2v), tensor_binding(fv), tensor_binding(gv)},
          {{c, tensor_binding(got_c)}, {neg, tensor_binding(got_neg)}, {cf, tensor_binding(got_cf)}}, {});
  const at::Tensor rx2 = x2v.permute({0, 2, 1, 3}).reshape({2, 4, 15});
  expect_equal(got_c, at::cat({xv.permute({0, 2, 1, 3}).reshape({2, 4, 15}), wv, rx2}, 2));
  expect_equal(got_neg, -rx2);
  expect_equal(got_cf, at::cat({fv.reshape({4, 6}), gv}, 1));
}

TEST(HostRuntime, PadSliceConcatenateReverse) {
  Program p;
  int32_t x = p.param(0, DType::kI32, {3});
  int32_t zero = p.add(OpKind::kConstant, DType::kI32, {}, {}, {0});
  // lo -1 crops the first element, interior 1 adds a zero between neighbours, hi 2.
  int32_t pd = p.add(OpKind::kPad, DType::kI32, {6}, {x, zero}, {-1, 2, 1});
  int32_t sl = p.add(OpKind::kSlice, DType::kI32, {2}, {x}, {0, 3, 2});
  int32_t cat = p.add(OpKind::kConcatenate, DType::kI32, {5}, {sl, x}, {0});
  int32_t rev = p.add(OpKind::kReverse, DType::kI32, {5}, {cat}, {0});
  at::Tensor a = at::tensor({1, 2, 3}, at::kInt);
  auto r = run(p, {pd, rev}, {tensor_binding(a)});
  expect_equal(r[0], at::tensor({0, 2, 0, 3, 0, 0}, at::kInt));
  expect_equal(r[1], at::tensor({3, 2, 1, 3, 1}, at::kInt));
}

TEST(HostRuntime, DeadNodesAreNotExecuted) {
  // %2 would raise (gather out of range) but no output depends on it.
  Program p;
  int32_t x = p.param(0, DType::kF32, {2});
  int32_t i = p.param(1, DType::kI64, {2});
  p.add(OpKind::kGather, DType::kF32, {2}, {x, i}, {0});
  int32_t y = p.add(OpKind::kAbs, DType::kF32, {2}, {x});
  at::Tensor a = at::tensor({-1.f, 2.f});
  at::Tensor bad = at::tensor({5, 5}, at::kLong);
  expect_equal(run(p, {y}, {tensor_binding(a), tensor_binding(bad)})[0], at::tensor({1.f, 2.f}));
}

// run_and_release (fused mode's graphs): each lent memory's owner is dropped when the program is
// done with that memory, not when the run returns: a parameter's after the last step reading it
// (all parameters reading one binding), a destination's once written. `run` leaves them alone.
TEST(HostRuntime, LentMemoryIsReleasedAfterItsLastUse) {
  // Drops record what the run had written by then.
  struct Probe final : c10::intrusive_ptr_target {
    std::function<void()> on_drop;
    ~Probe() override { on_drop(); }
  };
  const int64_t n = 64;
  Program p;
  int32_t a = p.param(0, DType::kF32, {n, n});
  int32_t b = p.param(1, DType::kF32, {n, n});
  int32_t b2 = p.param(1, DType::kF32, {n, n});  // a second parameter over the same binding
  int32_t da = p.add(OpKind::kDotGeneral, DType::kF32, {n, n}, {a, a}, {0, 1, 1, 0});
  int32_t db = p.add(OpKind::kDotGeneral, DType::kF32, {n, n}, {b, b2}, {0, 1, 1, 0});
  const at::Tensor av = at::randn({n, n}), bv = at::randn({n, n});
  for (bool fuse : {false, true}) {
    auto exe = torch_tpu::testing::compile_host(p, {da, db}, fuse);
    at::Tensor out_a = at::full({n, n}, 7.f), out_b = at::full({n, n}, 7.f);
    auto written = [](const at::Tensor& t) { return !at::equal(t, at::full_like(t, 7.f)); };
    std::vector<std::string> drops;
    auto probe = [&](const std::string& name) {
      auto pr = c10::make_intrusive<Probe>();
      pr->on_drop = [&, name] { drops.push_back(name + (written(out_a) ? " a" : "") + (written(out_b) ? " b" : "")); };
      return c10::intrusive_ptr<c10::intrusive_ptr_target>(std::move(pr));
    };
    std::vector<Binding> in = {tensor_binding(av), tensor_binding(bv)};
    std::vector<OutputTarget> out = {{da, tensor_binding(out_a)}, {db, tensor_binding(out_b)}};
    in[0].owner = probe("in0");
    in[1].owner = probe("in1");
    out[0].dest.owner = probe("out0");
    out[1].dest.owner = probe("out1");

    exe.run(in, out, {});  // a plain run takes nothing
    EXPECT_TRUE(drops.empty()) << "fuse " << fuse;
    for (const Binding& bi : in) EXPECT_EQ(bi.owner.use_count(), 1);
    out_a.fill_(7.f);
    out_b.fill_(7.f);

    exe.run_and_release(in, out, {});
    EXPECT_TRUE(at::equal(out_a, at::mm(av, av))) << "fuse " << fuse;
    EXPECT_TRUE(at::equal(out_b, at::mm(bv, bv))) << "fuse " << fuse;
    for (const Binding& bi : in) EXPECT_FALSE(bi.owner);
    for (const OutputTarget& o : out) EXPECT_FALSE(o.dest.owner);
    // In step order: a's product, then b's.
    EXPECT_EQ(drops, (std::vector<std::string>{"in0 a", "out0 a", "in1 a b", "out1 a b"})) << "fuse " << fuse;
  }
}

}  // namespace
}  // namespace torch_tpu::runtime
