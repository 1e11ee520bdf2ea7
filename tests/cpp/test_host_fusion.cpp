// The host runtime's fused elementwise clusters (runtime/host/tile_cluster.h): every program runs
// with fusion on and off (the per-node ATen kernels are the expected values), and the cluster
// partition is checked through stats().
#include <ATen/ATen.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <thread>

#include "graph_helpers.h"
#include "host_helpers.h"
#include "ir/verifier.h"
#include "runtime/host/executor.h"
#include "runtime/host/vector_tanh.h"

namespace torch_tpu::runtime {
namespace {

using host::HostExecutable;
using host::HostOptions;
using host::kSumBlock;
using host::row_sums;
using namespace torch_tpu::testing;  // Program, DType, OpKind, tensor_binding, ... (*_helpers.h)

HostExecutable compile(const Program& p, const std::vector<int32_t>& outputs, bool fuse) {
  return compile_host(p, outputs, fuse);
}

// Fresh contiguous results of `outputs`.
std::vector<at::Tensor> run(const HostExecutable& exe, const Program& p, const std::vector<int32_t>& outputs,
                            const std::vector<Binding>& inputs) {
  std::vector<at::Tensor> results;
  exe.run(inputs, fresh_targets(p, outputs, &results), {});
  return results;
}

// Whether libtorch_cpu exports MKL's vector math: then a cluster's exp, log, sin, ... are the
// very functions ATen's kernels call (tile_cluster.h), so results have ATen's bits. (tanh is the
// runtime's own: vector_tanh.h.) Fused and unfused programs agree either way: the unfused
// float32 kernels run the clusters' functions (cluster_unary_f32).
bool has_mkl_vml() { return dlsym(RTLD_DEFAULT, "vmsTanh") != nullptr; }

// tanh with the host runtime's float32 function (vector_tanh.h), which clusters and the unfused
// kernel both use.
at::Tensor vector_tanh(const at::Tensor& x) {
  at::Tensor src = x.contiguous(), out = at::empty_like(src);
  runtime::host::tanh_f32(out.mutable_data_ptr<float>(), src.const_data_ptr<float>(), src.numel());
  return out;
}

// Runs fused and unfused; expects the fused program to have `clusters` clusters and both to
// agree exactly (exact) or within float32 test tolerances.
std::vector<at::Tensor> check(const Program& p, const std::vector<int32_t>& outputs, const std::vector<Binding>& inputs,
                              int clusters, bool exact = true) {
  HostExecutable fused = compile(p, outputs, true), plain = compile(p, outputs, false);
  EXPECT_EQ(fused.stats().clusters, clusters) << fused.describe();
  EXPECT_EQ(plain.stats().clusters, 0);
  EXPECT_EQ(plain.stats().fused_nodes, 0);
  auto got = run(fused, p, outputs, inputs);
  auto want = run(plain, p, outputs, inputs);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type());
    if (exact || !at::isFloatingType(got[i].scalar_type())) {
      EXPECT_TRUE(at::equal(got[i], want[i])) << "output " << i << "\n" << fused.describe();
    } else {
      // bf16 results may differ by one bf16 ulp where float transcendentals differ in the last
      // float bit (std:: vs ATen's SLEEF) right at a rounding boundary.
      double rtol = got[i].scalar_type() == at::kBFloat16 ? 8e-3 : 1.3e-6;
      EXPECT_TRUE(at::allclose(got[i].to(at::kFloat), want[i].to(at::kFloat), rtol, 1e-5))
          << "output " << i << " max diff "
          << (got[i].to(at::kFloat) - want[i].to(at::kFloat)).abs().max().item<float>();
    }
  }
  return got;
}

TEST(HostFusion, ArithmeticChainF32MatchesKernelsExactly) {
  // Not a multiple of the tile: the last tile is partial.
  const int64_t n = 5000;
  Program p;
  int32_t x = p.param(0, DType::kF32, {n});
  int32_t y = p.param(1, DType::kF32, {n});
  int32_t a = p.add(OpKind::kMul, DType::kF32, {n}, {x, p.splat(DType::kF32, 2.0, {n})});
  int32_t b = p.add(OpKind::kAdd, DType::kF32, {n}, {a, p.splat(DType::kF32, 1.0, {n})});
  int32_t c = p.add(OpKind::kDiv, DType::kF32, {n}, {b, y});
  int32_t d = p.add(OpKind::kSub, DType::kF32, {n}, {c, x});
  int32_t e = p.add(OpKind::kMax, DType::kF32, {n}, {d, y});
  int32_t f = p.add(OpKind::kMin, DType::kF32, {n}, {e, a});
  int32_t g = p.add(OpKind::kAbs, DType::kF32, {n}, {f});
  int32_t h = p.add(OpKind::kNeg, DType::kF32, {n}, {g});
  int32_t r = p.add(OpKind::kRem, DType::kF32, {n}, {h, y});
  int32_t s = p.add(OpKind::kSqrt, DType::kF32, {n}, {g});
  int32_t t = p.add(OpKind::kFloor, DType::kF32, {n}, {s});
  int32_t u = p.add(OpKind::kRoundEven, DType::kF32, {n}, {r});
  at::Tensor xv = at::randn({n}), yv = at::rand({n}) + 0.5;
  check(p, {t, u}, {tensor_binding(xv), tensor_binding(yv)}, 1);
  HostExecutable exe = compile(p, {t, u}, true);
  EXPECT_EQ(exe.stats().steps, 1);  // one cluster (the two constants are folded: computed once)
  EXPECT_EQ(exe.stats().fused_nodes, 14);
}

TEST(HostFusion, TranscendentalChainF32WithinTolerance) {
  const int64_t n = 3001;
  Program p;
  int32_t x = p.param(0, DType::kF32, {n});
  int32_t y = p.param(1, DType::kF32, {n});
  int32_t prev = x;
  for (OpKind k : {OpKind::kTanh, OpKind::kExp, OpKind::kLog1p, OpKind::kLogistic, OpKind::kErf, OpKind::kSin,
                   OpKind::kCos, OpKind::kAtan, OpKind::kExpm1, OpKind::kAsinh, OpKind::kCbrt, OpKind::kRsqrt}) {
    prev = p.add(k, DType::kF32, {n}, {prev});
  }
  int32_t q = p.add(OpKind::kPow, DType::kF32, {n}, {prev, y});
  int32_t w = p.add(OpKind::kAtan2, DType::kF32, {n}, {q, x});
  int32_t fin = p.add(OpKind::kIsFinite, DType::kBool, {n}, {w});
  at::Tensor xv = at::randn({n}), yv = at::rand({n}) * 2;
  // Within tolerance: the unfused cbrt is the reference's recipe over ATen's pow (std:: pow for
  // an array's last elements), the cluster's SLEEF's pow in every lane; every other op runs the
  // clusters' function in both.
  check(p, {w, fin}, {tensor_binding(xv), tensor_binding(yv)}, 1, /*exact=*/false);
}

TEST(HostFusion, Bf16AndF16RoundAfterEveryNode) {
  const int64_t n = 2500;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Program p;
    int32_t x = p.param(0, dt, {n});
    int32_t y = p.param(1, dt, {n});
    int32_t a = p.add(OpKind::kMul, dt, {n}, {x, y});
    int32_t b = p.add(OpKind::kAdd, dt, {n}, {a, p.splat(dt, 0.1, {n})});
    int32_t c = p.add(OpKind::kDiv, dt, {n}, {b, y});
    int32_t d = p.add(OpKind::kConvert, DType::kF32, {n}, {c});
    int32_t e = p.add(OpKind::kMul, DType::kF32, {n}, {d, d});
    int32_t f = p.add(OpKind::kConvert, dt, {n}, {e});
    int32_t g = p.add(OpKind::kSub, dt, {n}, {f, x});
    at::ScalarType st = static_cast<at::ScalarType>(dt);
    at::Tensor xv = at::randn({n}).to(st), yv = (at::rand({n}) + 0.5).to(st);
    check(p, {d, g}, {tensor_binding(xv), tensor_binding(yv)}, 1);
    // Transcendentals: within one ulp of the dtype.
    Program q;
    int32_t qx = q.param(0, dt, {n});
    int32_t t = q.add(OpKind::kTanh, dt, {n}, {qx});
    int32_t ex = q.add(OpKind::kExp, dt, {n}, {t});
    int32_t m = q.add(OpKind::kMul, dt, {n}, {ex, qx});
    HostExecutable fused = compile(q, {m}, true), plain = compile(q, {m}, false);
    auto got = run(fused, q, {m}, {tensor_binding(xv)})[0].to(at::kFloat);
    auto want = run(plain, q, {m}, {tensor_binding(xv)})[0].to(at::kFloat);
    double ulp = dt == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
    EXPECT_TRUE(at::allclose(got, want, ulp, 1e-3)) << (got - want).abs().max().item<float>();
    EXPECT_EQ(fused.stats().clusters, 1);
  }
}

TEST(HostFusion, TranscendentalsGiveAtensBitsThroughMkl) {
  // Where libtorch_cpu carries MKL, ATen's float exp, log, sin, ... kernels are MKL's vector
  // math functions; a cluster calls the same ones per tile, so fused results equal ATen's bits,
  // over whole and partial tiles and a strided input alike. (float32 tanh: vector_tanh.h's
  // function, not ATen's.) The unfused program runs the clusters' functions too (tile_cluster.h,
  // cluster_unary_f32), so ATen's kernels are called here for the expected values.
  if (!has_mkl_vml()) GTEST_SKIP() << "this libtorch_cpu exports no MKL VML (no MKL build)";
  const int64_t n = 3001;
  for (OpKind k : {OpKind::kTanh, OpKind::kExp, OpKind::kLog, OpKind::kSin, OpKind::kCos, OpKind::kTan, OpKind::kAsin,
                   OpKind::kAcos, OpKind::kAtan, OpKind::kErf}) {
    Program p;
    int32_t x = p.param(0, DType::kF32, {n});
    int32_t a = p.add(OpKind::kMul, DType::kF32, {n}, {x, p.splat(DType::kF32, 0.75, {n})});
    int32_t b = p.add(k, DType::kF32, {n}, {a});
    int32_t c = p.add(OpKind::kAdd, DType::kF32, {n}, {b, x});
    at::Tensor xv = at::randn({2 * n}).slice(0, 0, 2 * n, 2);  // strided: gathered per tile
    if (k == OpKind::kLog) xv = xv.abs();
    if (k == OpKind::kAsin || k == OpKind::kAcos) xv = xv.clamp(-1.3, 1.3);  // in the domain (NaN != NaN)
    auto got = check(p, {c}, {tensor_binding(xv)}, 1, /*exact=*/true);
    const at::Tensor scaled = xv * 0.75f;
    const at::Tensor want = k == OpKind::kTanh   ? vector_tanh(scaled)
                            : k == OpKind::kExp  ? at::exp(scaled)
                            : k == OpKind::kLog  ? at::log(scaled)
                            : k == OpKind::kSin  ? at::sin(scaled)
                            : k == OpKind::kCos  ? at::cos(scaled)
                            : k == OpKind::kTan  ? at::tan(scaled)
                            : k == OpKind::kAsin ? at::asin(scaled)
                            : k == OpKind::kAcos ? at::acos(scaled)
                            : k == OpKind::kAtan ? at::atan(scaled)
                                                 : at::erf(scaled);
    EXPECT_TRUE(at::equal(got[0], want + xv)) << ir::op_name(k);
  }
}

TEST(HostFusion, ExpOfUnderflowingInputsKeepsAtensBits) {
  // Lanes below -110 (masked attention scores at -inf, say) skip MKL's slow underflow path:
  // computed from 0 and zeroed. Results must still be ATen's (MKL's) bits, denormals included,
  // next to infinities, in tiles with and without such lanes.
  if (!has_mkl_vml()) GTEST_SKIP() << "this libtorch_cpu exports no MKL VML (no MKL build)";
  const int64_t n = 3001;
  at::Tensor xv = at::randn({n}) * 60 - 60;  // about a third below -87: denormal or zero results
  xv.slice(0, 0, 1024).clamp_min_(-80);      // the first tile takes MKL's call unchanged
  const float specials[] = {-INFINITY, -1e30f, -110.5f, -110.f, -104.f, -103.9f, -100.f, -87.4f, INFINITY, 0.f};
  for (size_t i = 0; i < std::size(specials); ++i) xv[1500 + 7 * static_cast<int64_t>(i)] = specials[i];
  Program p;
  int32_t x = p.param(0, DType::kF32, {n});
  int32_t a = p.add(OpKind::kSub, DType::kF32, {n}, {x, p.splat(DType::kF32, 0.5, {n})});
  int32_t b = p.add(OpKind::kExp, DType::kF32, {n}, {a});
  int32_t c = p.add(OpKind::kExp, DType::kF32, {n}, {x});  // straight from the input's memory
  int32_t d = p.add(OpKind::kAdd, DType::kF32, {n}, {b, c});
  auto got = check(p, {b, d}, {tensor_binding(xv)}, 1, /*exact=*/true);
  EXPECT_TRUE(at::equal(got[0], at::exp(xv - 0.5f)));
  EXPECT_TRUE(at::equal(got[1], at::exp(xv - 0.5f) + at::exp(xv)));
}

TEST(HostFusion, TileInvariantOperandsInEveryPosition) {
  // Constants and one-element inputs are read from their buffer's first lanes by every group
  // (Instr::fixed): as the first, second and third operand, by the 8-lane tail of a partial
  // tile, by SLEEF's binary functions, and by pow's x * x rewrite (whose second operand is then
  // the per-tile first one).
  const int64_t n = 2005;
  Program p;
  int32_t x = p.param(0, DType::kF32, {n});
  int32_t s = p.param(1, DType::kF32, {});
  int32_t bs = p.add(OpKind::kBroadcastInDim, DType::kF32, {n}, {s}, {});
  int32_t two = p.splat(DType::kF32, 2.0, {n});
  int32_t a = p.add(OpKind::kSub, DType::kF32, {n}, {bs, x});   // fixed first operand
  int32_t b = p.add(OpKind::kDiv, DType::kF32, {n}, {a, two});  // fixed second operand
  int32_t m = p.add(OpKind::kCompare, DType::kBool, {n}, {b, bs}, {static_cast<int64_t>(ir::CompareDir::kGt)});
  int32_t c = p.add(OpKind::kSelect, DType::kF32, {n}, {m, two, b});  // fixed middle operand
  int32_t d = p.add(OpKind::kSelect, DType::kF32, {n}, {m, c, bs});   // fixed last operand
  int32_t e = p.add(OpKind::kPow, DType::kF32, {n}, {d, two}, {ir::kPowScalarExponent});  // x * x
  int32_t f = p.add(OpKind::kAtan2, DType::kF32, {n}, {bs, e});       // SLEEF, fixed first operand
  int32_t g = p.add(OpKind::kPow, DType::kF32, {n}, {bs, f});         // SLEEF pow, fixed base
  at::Tensor xv = at::randn({n}), sv = at::scalar_tensor(0.3f);
  auto got = check(p, {e, g}, {tensor_binding(xv), tensor_binding(sv)}, 1);
  at::Tensor aa = (0.3f - xv) / 2.f;
  at::Tensor mm = aa > 0.3f;
  at::Tensor dd = at::where(mm, at::where(mm, at::full_like(aa, 2.f), aa), at::full_like(aa, 0.3f));
  EXPECT_TRUE(at::equal(got[0], dd * dd));
  // atan2 and pow are SLEEF's 1-ulp functions fused and unfused (cluster_binary_f32); ATen's
  // kernels compute an array's last elements with std:: ones.
  EXPECT_TRUE(at::allclose(got[1], at::pow(at::full_like(aa, 0.3f), at::atan2(at::full_like(aa, 0.3f), dd * dd)),
                           1.3e-6, 1e-6));
}

TEST(HostFusion, PowWithAUniformExponentTakesAtensRecipesFusedOrNot) {
  // pow(x, e) with a broadcast Python number e (ir::kPowScalarExponent): x^2 as x*x, x^3 as
  // x*x*x, x^-1 as 1/x, x^-2 as 1/(x*x), x^1 as x, as ATen's scalar-exponent kernel computes
  // them (its bits, where the general pow differs in the last bit for up to a quarter of
  // inputs), both in the cluster (pow and a convert: a lone pow would run as a kernel) and in
  // the unfused kernel, which reads the broadcast exponent as one value. 1.5 takes the general
  // pow in both, and so does every exponent of a pow without the attribute (a tensor exponent,
  // as ATen's pow.Tensor_Tensor).
  const int64_t n = 4099;  // a partial tile and an 8-lane tail
  const at::Tensor xv = at::randn({n}) * 3;
  for (bool scalar_exponent : {true, false}) {
    Program p;
    int32_t x = p.param(0, DType::kF32, {n});
    int32_t e = p.param(1, DType::kF32, {});
    int32_t be = p.add(OpKind::kBroadcastInDim, DType::kF32, {n}, {e}, {});
    std::vector<int64_t> attrs;
    if (scalar_exponent) attrs.push_back(ir::kPowScalarExponent);
    int32_t y = p.add(OpKind::kPow, DType::kF32, {n}, {x, be}, attrs);
    int32_t z = p.add(OpKind::kConvert, DType::kF32, {n}, {y});
    for (float exponent : {2.f, 3.f, -1.f, -2.f, 1.f, 1.5f}) {
      SCOPED_TRACE(std::to_string(exponent) + (scalar_exponent ? " scalar" : " tensor"));
      // Negative bases give NaN for x^1.5 (at::equal counts NaN as unequal): |x| there.
      const at::Tensor base = exponent == 1.5f ? xv.abs() : xv;
      auto got = check(p, {z}, {tensor_binding(base), tensor_binding(at::scalar_tensor(exponent))}, 1);
      if (scalar_exponent && exponent != 1.5f) {
        EXPECT_TRUE(at::equal(got[0], at::pow(base, exponent)));
      } else {
        // ATen's general pow: SLEEF's, except the last n % 16 elements (std::pow there, within
        // an ulp of SLEEF's).
        const at::Tensor want = at::pow(base, at::full_like(base, exponent));
        EXPECT_TRUE(at::equal(got[0].narrow(0, 0, n / 16 * 16), want.narrow(0, 0, n / 16 * 16)));
        EXPECT_TRUE(at::allclose(got[0], want, 1.3e-6, 0));
      }
    }
  }
}

TEST(HostFusion, BroadcastOperandsAreStrideZeroReads) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {3, 1000});
  int32_t bias = p.param(1, DType::kF32, {1000});
  int32_t col = p.param(2, DType::kF32, {3, 1});
  int32_t scale = p.param(3, DType::kF32, {});
  int32_t bb = p.add(OpKind::kBroadcastInDim, DType::kF32, {3, 1000}, {bias}, {1});
  int32_t bc = p.add(OpKind::kBroadcastInDim, DType::kF32, {3, 1000}, {col}, {0, 1});
  int32_t bs = p.add(OpKind::kBroadcastInDim, DType::kF32, {3, 1000}, {scale}, {});
  int32_t a = p.add(OpKind::kAdd, DType::kF32, {3, 1000}, {x, bb});
  int32_t b = p.add(OpKind::kMul, DType::kF32, {3, 1000}, {a, bc});
  int32_t c = p.add(OpKind::kSub, DType::kF32, {3, 1000}, {b, bs});
  at::Tensor xv = at::randn({3, 1000}), biasv = at::randn({1000}), colv = at::randn({3, 1});
  Binding sc;
  sc.kind = Binding::Kind::Scalar;
  sc.d = 0.25;
  auto r = check(p, {c}, {tensor_binding(xv), tensor_binding(biasv), tensor_binding(colv), sc}, 1);
  EXPECT_TRUE(at::equal(r[0], (xv + biasv) * colv - 0.25f));
}

TEST(HostFusion, InputsRepeatingEveryTileAreLoadedOnce) {
  // In a plain cluster, a bias of 64 over rows of 64 repeats every tile of 1024 (loaded once per
  // run, including into the last partial tile); one of 48 does not divide the tile (loaded per
  // tile). A row cluster holds whole rows per tile, so a weight over its rows always repeats.
  for (int64_t width : {64, 48}) {
    for (bool row : {false, true}) {
      Program p;
      int32_t x = p.param(0, DType::kF32, {40, width});
      int32_t bias = p.param(1, DType::kF32, {width});
      int32_t bb = p.add(OpKind::kBroadcastInDim, DType::kF32, {40, width}, {bias}, {1});
      int32_t a = p.add(OpKind::kAdd, DType::kF32, {40, width}, {x, bb});
      int32_t m = p.add(OpKind::kMul, DType::kF32, {40, width}, {a, bb});
      std::vector<int32_t> outs = {m};
      if (row)
        outs.push_back(p.add(OpKind::kReduce, DType::kF32, {40}, {m}, {static_cast<int64_t>(ir::ReduceKind::kMax), 1}));
      at::Tensor xv = at::randn({40, width}), bv = at::randn({width});
      auto got = check(p, outs, {tensor_binding(xv), tensor_binding(bv)}, 1);
      at::Tensor want = (xv + bv) * bv;
      EXPECT_TRUE(at::equal(got[0], want)) << width << " " << row;
      if (row) {
        EXPECT_TRUE(at::equal(got[1], std::get<0>(want.max(1)))) << width;
      }
    }
  }
}

TEST(HostFusion, StridedInputsAndStridedDirectOutput) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {40, 70});
  int32_t y = p.param(1, DType::kBF16, {40, 70});
  int32_t yc = p.add(OpKind::kConvert, DType::kF32, {40, 70}, {y});
  int32_t a = p.add(OpKind::kMul, DType::kF32, {40, 70}, {x, yc});
  int32_t b = p.add(OpKind::kTanh, DType::kF32, {40, 70}, {a});
  at::Tensor xv = at::randn({70, 40}).t();  // transposed
  at::Tensor ybuf = at::randn({80, 220}).to(at::kBFloat16);
  at::Tensor yv = ybuf.slice(0, 0, 80, 2).slice(1, 5, 215, 3);  // [40, 70], strided
  ASSERT_EQ(yv.sizes(), (c10::IntArrayRef{40, 70}));
  check(p, {b}, {tensor_binding(xv), tensor_binding(yv)}, 1);
  // A strided destination of the node's dtype is written directly (scatter).
  HostExecutable exe = compile(p, {b}, true);
  at::Tensor obuf = at::full({70, 80}, -1.f);
  at::Tensor out = obuf.slice(1, 0, 80, 2).t();  // [40, 70], strides (2, 80)
  exe.run({tensor_binding(xv), tensor_binding(yv)}, {{b, tensor_binding(out)}}, {});
  EXPECT_TRUE(at::equal(out, vector_tanh(xv * yv.to(at::kFloat))));
  EXPECT_EQ(obuf[0][1].item<float>(), -1.f);  // untouched between the strided elements
}

TEST(HostFusion, RowReductionJoinsItsPrologueAndEpilogue) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {64, 33});
  int32_t a = p.add(OpKind::kMul, DType::kF32, {64, 33}, {x, x});
  int32_t b = p.add(OpKind::kAdd, DType::kF32, {64, 33}, {a, x});
  int32_t s = p.add(OpKind::kReduce, DType::kF32, {64}, {b}, {2, 1});  // max over dim 1
  int32_t bs = p.add(OpKind::kBroadcastInDim, DType::kF32, {64, 33}, {s}, {0});
  int32_t c = p.add(OpKind::kDiv, DType::kF32, {64, 33}, {b, bs});
  int32_t d = p.add(OpKind::kExp, DType::kF32, {64, 33}, {c});
  at::Tensor xv = at::randn({64, 33});
  // One pass: [mul, add, max, broadcast, div, exp]; the unfused exp runs the cluster's function.
  check(p, {d}, {tensor_binding(xv)}, 1, /*exact=*/true);
  HostExecutable exe = compile(p, {d}, true);
  EXPECT_EQ(exe.stats().steps, 1) << exe.describe();
  EXPECT_EQ(exe.stats().fused_nodes, 6) << exe.describe();
  EXPECT_NE(exe.describe().find("rows of 33"), std::string::npos) << exe.describe();
}

// Softmax as the lowering composes it: max, subtract, exp, sum, divide; 4-d, last dim.
TEST(HostFusion, SoftmaxRowsInOneCluster) {
  const std::vector<int64_t> full{6, 4, 7, 19}, lead{6, 4, 7};
  Program p;
  int32_t x = p.param(0, DType::kF32, full);
  int32_t m = p.add(OpKind::kReduce, DType::kF32, lead, {x}, {2, 3});
  int32_t bm = p.add(OpKind::kBroadcastInDim, DType::kF32, full, {m}, {0, 1, 2});
  int32_t z = p.add(OpKind::kSub, DType::kF32, full, {x, bm});
  int32_t e = p.add(OpKind::kExp, DType::kF32, full, {z});
  int32_t s = p.add(OpKind::kReduce, DType::kF32, lead, {e}, {0, 3});
  int32_t bs = p.add(OpKind::kBroadcastInDim, DType::kF32, full, {s}, {0, 1, 2});
  int32_t y = p.add(OpKind::kDiv, DType::kF32, full, {e, bs});
  at::Tensor xv = at::randn(full) * 4;
  // The first max reads the parameter (not a member): it starts the row cluster, and the rest
  // joins it [max, broadcast, sub, exp, sum, broadcast, div].
  auto got = check(p, {y, m}, {tensor_binding(xv)}, 1, /*exact=*/true);
  // Against ATen's softmax kernel: its own exp and summation order.
  EXPECT_TRUE(at::allclose(got[0], at::softmax(xv, -1), 1e-5, 1e-6));
}

// Max and min in a row cluster propagate NaN like amax/amin (and are exact).
TEST(HostFusion, RowMaxMinPropagateNaN) {
  // Rows of 21 (lanes and a scalar tail) and of 32 (lanes combined in registers).
  for (int64_t w : {21, 32}) {
    Program p;
    int32_t x = p.param(0, DType::kF32, {9, w});
    int32_t a = p.add(OpKind::kAbs, DType::kF32, {9, w}, {x});
    int32_t mx = p.add(OpKind::kReduce, DType::kF32, {9}, {a}, {2, 1});
    int32_t mn = p.add(OpKind::kReduce, DType::kF32, {9}, {a}, {3, 1});
    int32_t d = p.add(OpKind::kSub, DType::kF32, {9}, {mx, mn});
    at::Tensor xv = at::randn({9, w});
    xv.index_put_({2, 5}, std::numeric_limits<float>::quiet_NaN());
    xv.index_put_({4, w - 1}, -std::numeric_limits<float>::infinity());
    HostExecutable fused = compile(p, {d, mx}, true), plain = compile(p, {d, mx}, false);
    EXPECT_EQ(fused.stats().clusters, 1) << fused.describe();
    auto got = run(fused, p, {d, mx}, {tensor_binding(xv)});
    auto want = run(plain, p, {d, mx}, {tensor_binding(xv)});
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(at::allclose(got[i], want[i], 0, 0, /*equal_nan=*/true)) << got[i] << want[i];
    }
    EXPECT_TRUE(std::isnan(got[1][2].item<float>()));
    EXPECT_TRUE(at::allclose(got[1], at::amax(xv.abs(), 1), 0, 0, /*equal_nan=*/true));
  }
}

// Layer norm over the last two dims with the mean and rstd stored (reduced stores), a 0-d
// constant divisor broadcast to the reduced shape (an open plain cluster merged in), an
// epsilon from a parameter of the reduced shape, and a strided direct output.
TEST(HostFusion, LayerNormWithReducedStoresAndStridedOutput) {
  const std::vector<int64_t> full{5, 9, 6, 20}, lead{5, 9};
  Program p;
  int32_t x0 = p.param(0, DType::kF32, full);
  int32_t eps = p.param(1, DType::kF32, lead);
  int32_t x = p.add(OpKind::kMul, DType::kF32, full, {x0, p.splat(DType::kF32, 3.0, full)});
  int32_t n = p.splat(DType::kF32, 120.0, lead);
  int32_t s = p.add(OpKind::kReduce, DType::kF32, lead, {x}, {0, 2, 3});
  int32_t mean = p.add(OpKind::kDiv, DType::kF32, lead, {s, n});
  int32_t bmean = p.add(OpKind::kBroadcastInDim, DType::kF32, full, {mean}, {0, 1});
  int32_t xc = p.add(OpKind::kSub, DType::kF32, full, {x, bmean});
  int32_t sq = p.add(OpKind::kMul, DType::kF32, full, {xc, xc});
  int32_t ss = p.add(OpKind::kReduce, DType::kF32, lead, {sq}, {0, 2, 3});
  int32_t var = p.add(OpKind::kDiv, DType::kF32, lead, {ss, n});
  int32_t rstd = p.add(OpKind::kRsqrt, DType::kF32, lead, {p.add(OpKind::kAdd, DType::kF32, lead, {var, eps})});
  int32_t brstd = p.add(OpKind::kBroadcastInDim, DType::kF32, full, {rstd}, {0, 1});
  int32_t y = p.add(OpKind::kMul, DType::kF32, full, {xc, brstd});
  at::Tensor xv = at::randn(full) + 2, ev = at::full(lead, 1e-5);
  // One row cluster: both sums, the statistics and the normalization (constants aside).
  check(p, {y, mean, rstd}, {tensor_binding(xv), tensor_binding(ev)}, 1, /*exact=*/true);

  HostExecutable exe = compile(p, {y, mean, rstd}, true);
  EXPECT_EQ(exe.stats().fused_nodes, 14) << exe.describe();
  at::Tensor out = at::zeros({20, 6, 9, 5}).permute({3, 2, 1, 0});  // strided destination
  at::Tensor mv = at::zeros(lead), rv = at::zeros({9, 5}).t();
  exe.run({tensor_binding(xv), tensor_binding(ev)},
          {{y, tensor_binding(out)}, {mean, tensor_binding(mv)}, {rstd, tensor_binding(rv)}}, {});
  at::Tensor xs = xv * 3;
  at::Tensor want_mean = at::mean(xs, at::IntArrayRef{2, 3});
  at::Tensor want_var = at::var(xs, at::IntArrayRef{2, 3}, /*unbiased=*/false);
  EXPECT_TRUE(at::allclose(mv, want_mean, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(rv, (want_var + 1e-5).rsqrt(), 1e-4, 1e-5));
  EXPECT_TRUE(at::allclose(out, at::layer_norm(xs, at::IntArrayRef{6, 20}), 1e-4, 1e-5));
}

TEST(HostFusion, PerRowValuesFromBroadcastsAndStridedInputs) {
  // Per-row values are held one per row: a reduction's result, a per-row input read through a
  // transposed view, and a broadcast of a smaller input to the lead shape (absorbed with its
  // plain cluster). q = sum(x * x) / (w broadcast over dim 0) + v, stored per row; out = x - q.
  const std::vector<int64_t> full{16, 3, 100}, lead{16, 3};  // several tiles, the last one partial
  Program p;
  int32_t x = p.param(0, DType::kF32, full);
  int32_t w = p.param(1, DType::kF32, {3});
  int32_t v = p.param(2, DType::kF32, lead);
  int32_t wb = p.add(OpKind::kBroadcastInDim, DType::kF32, lead, {w}, {1});
  int32_t sq = p.add(OpKind::kMul, DType::kF32, full, {x, x});
  int32_t s = p.add(OpKind::kReduce, DType::kF32, lead, {sq}, {0, 2});
  int32_t q = p.add(OpKind::kAdd, DType::kF32, lead, {p.add(OpKind::kDiv, DType::kF32, lead, {s, wb}), v});
  int32_t qb = p.add(OpKind::kBroadcastInDim, DType::kF32, full, {q}, {0, 1});
  int32_t out = p.add(OpKind::kSub, DType::kF32, full, {x, qb});
  at::Tensor xv = at::randn(full), wv = at::rand({3}) + 1, vv = at::randn({3, 16}).t();  // v: strided
  auto got = check(p, {out, q}, {tensor_binding(xv), tensor_binding(wv), tensor_binding(vv)}, 1);
  EXPECT_EQ(compile(p, {out, q}, true).stats().fused_nodes, 7);  // the broadcast of w included
  at::Tensor want_q = (xv * xv).sum(-1) / wv + vv;
  // check() compared fused and unfused bit for bit; against ATen the row sums differ in their
  // summation order (row_sums, tile_cluster.h), so within float32 rounding of a 100-term sum.
  EXPECT_TRUE(at::allclose(got[1], want_q, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(got[0], xv - want_q.unsqueeze(-1), 1e-5, 1e-5));
}

// The sum-order tests' program: s = the sum of x * w + x (parameters 0 and 1; w along the last
// dim) over the dims in `reduce` (the reduce node's attributes: kind, dims) to `reduced`, and
// y = s * 0.5. Returns {y, s}.
std::pair<int32_t, int32_t> halved_weighted_sum(Program& p, const std::vector<int64_t>& full,
                                                const std::vector<int64_t>& reduced, std::vector<int64_t> reduce) {
  int32_t x = p.param(0, DType::kF32, full);
  int32_t w = p.param(1, DType::kF32, {full.back()});
  int32_t bw = p.add(OpKind::kBroadcastInDim, DType::kF32, full, {w}, {static_cast<int64_t>(full.size()) - 1});
  int32_t a = p.add(OpKind::kMul, DType::kF32, full, {x, bw});
  int32_t b = p.add(OpKind::kAdd, DType::kF32, full, {a, x});
  int32_t s = p.add(OpKind::kReduce, DType::kF32, reduced, {b}, std::move(reduce));
  int32_t y = p.add(OpKind::kMul, DType::kF32, reduced, {s, p.splat(DType::kF32, 0.5, reduced)});
  return {y, s};
}

// Sums in row clusters add in row_sums' order (tile_cluster.h), and so does the reduce kernel of a
// sum that runs outside a cluster (strict mode's one-op programs, fusion off, an operand no
// cluster holds): the same bits either way, whatever the operand's strides and the threads.
TEST(HostFusion, RowSumsHaveOneOrderFusedOrNot) {
  const std::vector<int64_t> full{300, 173}, lead{300};
  Program p;
  auto [y, s] = halved_weighted_sum(p, full, lead, {0, 1});
  at::Tensor xv = at::randn(full), wv = at::randn({173});
  // [broadcast, mul, add, sum, mul] in one row cluster vs kernels: bit for bit.
  auto got = check(p, {y, s}, {tensor_binding(xv), tensor_binding(wv)}, 1, /*exact=*/true);
  HostExecutable fused = compile(p, {y, s}, true);
  EXPECT_EQ(fused.stats().steps, 1) << fused.describe();  // the cluster (the 0.5 constant is folded)
  // A sum of a parameter (a kernel in both modes) over the prologue's values: the same bits.
  Program q;
  int32_t qx = q.param(0, DType::kF32, full);
  int32_t qs = q.add(OpKind::kReduce, DType::kF32, lead, {qx}, {0, 1});
  at::Tensor pre = xv * wv + xv;  // ATen's mul and add: bit-exact like the cluster's
  auto lone = check(q, {qs}, {tensor_binding(pre)}, 0, /*exact=*/true);
  EXPECT_TRUE(at::equal(lone[0], got[1]));
  // The logical order is summed whatever the memory order: a transposed operand, the same bits.
  at::Tensor pre_t = pre.t().contiguous().t();
  EXPECT_TRUE(at::equal(check(q, {qs}, {tensor_binding(pre_t)}, 0, /*exact=*/true)[0], got[1]));
  // Within float32 rounding of the exact sum.
  EXPECT_TRUE(at::allclose(got[1], pre.to(at::kDouble).sum(1).to(at::kFloat), 1e-5, 1e-5));
  // Threads: this thread's intra-op pool vs a thread with one OpenMP thread (a stream worker),
  // enough rows for parallel_for to split them (a row is never split).
  Program r;
  int32_t rx = r.param(0, DType::kF32, {4096, 96});
  int32_t ra = r.add(OpKind::kMul, DType::kF32, {4096, 96}, {rx, rx});
  int32_t rs = r.add(OpKind::kReduce, DType::kF32, {4096}, {ra}, {0, 1});
  at::Tensor rv = at::randn({4096, 96});
  auto many = check(r, {rs}, {tensor_binding(rv)}, 1, /*exact=*/true);
  std::vector<at::Tensor> one;
  std::thread worker([&] {
    // libgomp's per-thread setting (loaded through libtorch_cpu, not linked by this binary).
    auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (set_threads != nullptr) set_threads(1);
    one = check(r, {rs}, {tensor_binding(rv)}, 1, /*exact=*/true);
  });
  worker.join();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(at::equal(one[0], many[0]));
}

// A sum over every dim longer than a row ends the plain cluster of its operand (tile_cluster.h): one
// kernel, the operand never stored, and total_sum's order (blocks of kSumBlock in
// row_sum_one's order, then the blocks' sums), which the reduce kernel uses too: the same
// bits fused or not, on any thread.
TEST(HostFusion, TotalSumsEndTheirClusterInOneOrder) {
  const std::vector<int64_t> full{37, 3001};  // 111037 elements: 108 blocks, the last partial
  Program p;
  auto [y, s] = halved_weighted_sum(p, full, {}, {0, 0, 1});
  at::Tensor xv = at::randn(full), wv = at::randn({3001});
  // Two clusters: the operand's with its sum, then y's (the 0.5 broadcast and the mul).
  auto got = check(p, {y, s}, {tensor_binding(xv), tensor_binding(wv)}, 2, /*exact=*/true);
  HostExecutable fused = compile(p, {y, s}, true);
  EXPECT_EQ(fused.stats().steps, 2) << fused.describe();
  // The order, spelled out: the sums of the blocks of the flat operand, then their sum.
  at::Tensor pre = (xv * wv + xv).flatten();  // ATen's mul and add: bit-exact like the cluster's
  const int64_t n = pre.numel(), blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<float> sums(static_cast<size_t>(blocks));
  for (int64_t k = 0; k < blocks; ++k) {
    row_sums(pre.const_data_ptr<float>() + k * kSumBlock, 1, std::min(kSumBlock, n - k * kSumBlock), &sums[k]);
  }
  float want = 0;
  row_sums(sums.data(), 1, blocks, &want);
  EXPECT_EQ(got[1].item<float>(), want);
  EXPECT_TRUE(at::allclose(got[1], pre.to(at::kDouble).sum().to(at::kFloat), 1e-5, 1e-3));
  // On a thread with one OpenMP thread (a stream worker: the kernel threads split the blocks).
  std::vector<at::Tensor> one;
  std::thread worker([&] {
    auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (set_threads != nullptr) set_threads(1);
    one = check(p, {y, s}, {tensor_binding(xv), tensor_binding(wv)}, 2, /*exact=*/true);
  });
  worker.join();
  ASSERT_EQ(one.size(), 2u);
  EXPECT_TRUE(at::equal(one[1], got[1]));
}

// A loss's mean to 0-d: a row cluster of one row (lead rank 0).
TEST(HostFusion, MeanToScalarIsOneRow) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {300});
  int32_t sq = p.add(OpKind::kMul, DType::kF32, {300}, {x, x});
  int32_t s = p.add(OpKind::kReduce, DType::kF32, {}, {sq}, {0, 0});
  int32_t mean = p.add(OpKind::kDiv, DType::kF32, {}, {s, p.constant(DType::kF32, 300.0)});
  at::Tensor xv = at::randn({300});
  auto got = check(p, {mean}, {tensor_binding(xv)}, 1, /*exact=*/true);
  EXPECT_TRUE(at::allclose(got[0], (xv * xv).mean(), 1e-5, 1e-6));
}

// What stays a kernel: rows over kMaxRow, reductions over leading dims, prod, and reductions
// of values that are not members.
TEST(HostFusion, RowClusterLimits) {
  for (auto [shape, dims] :
       {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{2, host::kMaxRow + 8}, {1}}, {{40, 16}, {0}}}) {
    Program p;
    int32_t x = p.param(0, DType::kF32, shape);
    int32_t sq = p.add(OpKind::kMul, DType::kF32, shape, {x, x});
    std::vector<int64_t> attrs{0};
    attrs.insert(attrs.end(), dims.begin(), dims.end());
    std::vector<int64_t> out{shape[dims[0] == 0 ? 1 : 0]};
    int32_t s = p.add(OpKind::kReduce, DType::kF32, out, {sq}, attrs);
    int32_t y = p.add(OpKind::kExp, DType::kF32, out, {s});
    at::Tensor xv = at::randn(shape) * 0.01;
    // Not row sums (a row longer than kMaxRow, a sum over the leading dim): column sums, which
    // end the mul's cluster (column_sums.h); the exp is a kernel.
    check(p, {y}, {tensor_binding(xv)}, 1, /*exact=*/true);
    EXPECT_EQ(compile(p, {y}, true).stats().steps, 2);
  }
  {
    Program p;
    int32_t x = p.param(0, DType::kF32, {8, 16});
    int32_t sq = p.add(OpKind::kMul, DType::kF32, {8, 16}, {x, x});
    int32_t pr = p.add(OpKind::kReduce, DType::kF32, {8}, {sq}, {1, 1});  // prod
    int32_t y = p.add(OpKind::kExp, DType::kF32, {8}, {pr});
    check(p, {y}, {tensor_binding(at::rand({8, 16}) + 0.5)}, 0, /*exact=*/true);
  }
}

TEST(HostFusion, OutputsDirectConvertedDuplicatedAndAliasingAnInput) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {1500});
  int32_t a = p.add(OpKind::kMul, DType::kF32, {1500}, {x, x});
  int32_t b = p.add(OpKind::kSub, DType::kF32, {1500}, {a, x});
  int32_t c = p.add(OpKind::kNeg, DType::kF32, {1500}, {b});
  HostExecutable exe = compile(p, {a, c}, true);
  ASSERT_EQ(exe.stats().clusters, 1);
  at::Tensor xv = at::randn({1500});
  at::Tensor want_a = xv * xv, want_c = -(want_a - xv);
  // a: into a float64 destination (converted copy) and a float32 one; c: into x's own memory.
  at::Tensor da = at::empty({1500}, at::kDouble), da2 = at::empty({1500});
  at::Tensor xin = xv.clone();
  exe.run({tensor_binding(xin)}, {{a, tensor_binding(da)}, {a, tensor_binding(da2)}, {c, tensor_binding(xin)}}, {});
  EXPECT_TRUE(at::equal(da, want_a.to(at::kDouble)));
  EXPECT_TRUE(at::equal(da2, want_a));
  EXPECT_TRUE(at::equal(xin, want_c));
}

TEST(HostFusion, StoresComputedInTheirDestinationAcrossTiles) {
  // Contiguous float32 destinations that no input reads are the storing instructions' own
  // buffers, except in the last partial tile (5003 = 4 * 1024 + 907 elements, not a multiple
  // of 8): a stored member read again later in the tile, the last member, and one of the
  // outputs twice (a second, strided destination is copied).
  Program p;
  int32_t x = p.param(0, DType::kF32, {5003});
  int32_t y = p.param(1, DType::kF32, {5003});
  int32_t a = p.add(OpKind::kMul, DType::kF32, {5003}, {x, y});
  int32_t b = p.add(OpKind::kTanh, DType::kF32, {5003}, {a});
  int32_t c = p.add(OpKind::kSub, DType::kF32, {5003}, {b, a});
  at::Tensor xv = at::randn({5003}), yv = at::randn({5003});
  auto got = check(p, {a, c}, {tensor_binding(xv), tensor_binding(yv)}, 1);
  EXPECT_TRUE(at::equal(got[0], xv * yv));
  EXPECT_TRUE(at::equal(got[1], vector_tanh(xv * yv) - xv * yv));
  HostExecutable exe = compile(p, {a, c}, true);
  at::Tensor da = at::empty({5003}), dc = at::empty({5003}), dc2 = at::zeros({5003, 2});
  exe.run({tensor_binding(xv), tensor_binding(yv)},
          {{a, tensor_binding(da)}, {c, tensor_binding(dc)}, {c, tensor_binding(dc2.select(1, 1))}}, {});
  EXPECT_TRUE(at::equal(da, got[0]));
  EXPECT_TRUE(at::equal(dc, got[1]));
  EXPECT_TRUE(at::equal(dc2.select(1, 1), got[1]));
  EXPECT_EQ(dc2.select(1, 0).abs().sum().item<float>(), 0.f);
}

TEST(HostFusion, MemoryClassesCountViewsOfAnInputAsItsMemory) {
  // x is read through a transpose (a view kernel) by a cluster of another shape, then
  // rewritten in place (its new value, 2x, goes to x's memory: class 0), and a product reads
  // the new value, which runs the writing cluster first. The reading cluster must run before
  // that write although it reads no parameter directly: the transpose's value is x's memory.
  Program p;
  int32_t x = p.param(0, DType::kF32, {4, 8});
  int32_t b = p.param(1, DType::kF32, {8, 4});
  int32_t m = p.param(2, DType::kF32, {8, 3});
  int32_t t = p.add(OpKind::kTranspose, DType::kF32, {8, 4}, {x}, {1, 0});
  int32_t r = p.add(OpKind::kAdd, DType::kF32, {8, 4},
                    {p.add(OpKind::kMul, DType::kF32, {8, 4}, {t, p.splat(DType::kF32, 3, {8, 4})}), b});
  int32_t x2 = p.add(OpKind::kMul, DType::kF32, {4, 8}, {x, p.splat(DType::kF32, 2, {4, 8})});
  int32_t prod = p.add(OpKind::kDotGeneral, DType::kF32, {4, 3}, {x2, m}, {0, 1, 1, 0});
  ir::verify(p.g);
  MemoryClasses memory;
  memory.bindings = {0, 1, 2};
  memory.outputs = {{r, 3}, {prod, 4}, {x2, 0}};
  HostOptions options;
  options.memory = &memory;
  HostExecutable exe(p.g, {r, prod, x2}, options);
  at::Tensor xv = at::randn({4, 8}), bv = at::randn({8, 4}), mv = at::randn({8, 3});
  const at::Tensor want_r = xv.t() * 3 + bv, want_x = xv * 2;
  at::Tensor got_r = at::empty({8, 4}), got_prod = at::empty({4, 3});
  exe.run({tensor_binding(xv), tensor_binding(bv), tensor_binding(mv)},
          {{r, tensor_binding(got_r)}, {prod, tensor_binding(got_prod)}, {x2, tensor_binding(xv)}}, {});
  EXPECT_TRUE(at::equal(got_r, want_r));  // the same float32 operations as ATen
  EXPECT_TRUE(at::equal(xv, want_x));
  EXPECT_TRUE(at::allclose(got_prod, at::mm(want_x, mv)));
}

TEST(HostFusion, InPlaceUpdateIsWrittenIntoItsInputOnlyWithTheSameLayout) {
  // z = x * y + x stored into x's own memory (an in-place update such as `x.addcmul_(x, y)`),
  // over several tiles. With the same layout the cluster writes x directly (each tile reads
  // its elements first); through a transposed view of the same memory it must not (later tiles
  // would read elements already overwritten).
  Program p;
  int32_t x = p.param(0, DType::kF32, {80, 80});
  int32_t y = p.param(1, DType::kF32, {80, 80});
  int32_t xy = p.add(OpKind::kMul, DType::kF32, {80, 80}, {x, y});
  int32_t z = p.add(OpKind::kAdd, DType::kF32, {80, 80}, {xy, x});
  at::Tensor orig = at::randn({80, 80}), yv = at::randn({80, 80});
  at::Tensor want = orig * yv + orig;
  for (bool fuse : {false, true}) {
    HostExecutable exe = compile(p, {z}, fuse);
    if (fuse) {
      ASSERT_EQ(exe.stats().clusters, 1);
    }
    at::Tensor mem = orig.clone();
    exe.run({tensor_binding(mem), tensor_binding(yv)}, {{z, tensor_binding(mem)}}, {});
    EXPECT_TRUE(at::equal(mem, want)) << "fuse " << fuse;
    at::Tensor mem_t = orig.clone();
    exe.run({tensor_binding(mem_t), tensor_binding(yv)}, {{z, tensor_binding(mem_t.t())}}, {});
    EXPECT_TRUE(at::equal(mem_t.t(), want)) << "fuse " << fuse;
  }
}

TEST(HostFusion, ChannelsLastOperandsAreWalkedInMemoryOrder) {
  // conv(x) -> per-channel scale -> + residual -> max with the residual -> square -> conv: the
  // first convolution's input is a parameter and its result stays in the program, so it runs
  // channels-last; the cluster then walks (N, H, W, C) order, reads the contiguous residual
  // strided, and stores the value the second convolution reads channels-last (internal). z,
  // also in the cluster, goes to a contiguous and then to a channels-last destination.
  // Everything agrees with ATen's NCHW kernels within float32's usual test tolerance (equal
  // bits on this machine's oneDNN; its NHWC and blocked kernels may add products in another
  // order on other CPUs).
  const int64_t n = 2, c = 5, h = 6, w = 7;
  Program p;
  int32_t x = p.param(0, DType::kF32, {n, c, h, w});
  int32_t w1 = p.param(1, DType::kF32, {c, c, 3, 3});
  int32_t scale = p.param(2, DType::kF32, {c});
  int32_t res = p.param(3, DType::kF32, {n, c, h, w});
  int32_t w2 = p.param(4, DType::kF32, {c, c, 3, 3});
  const std::vector<int64_t> same = {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // stride 1, pad 1, groups 1
  int32_t c1 = p.add(OpKind::kConvolution, DType::kF32, {n, c, h, w}, {x, w1}, same);
  int32_t bs = p.add(OpKind::kBroadcastInDim, DType::kF32, {n, c, h, w}, {scale}, {1});
  int32_t m = p.add(OpKind::kMul, DType::kF32, {n, c, h, w}, {c1, bs});
  int32_t a = p.add(OpKind::kAdd, DType::kF32, {n, c, h, w}, {m, res});
  int32_t r = p.add(OpKind::kMax, DType::kF32, {n, c, h, w}, {a, res});
  int32_t y = p.add(OpKind::kMul, DType::kF32, {n, c, h, w}, {r, r});
  int32_t z = p.add(OpKind::kAdd, DType::kF32, {n, c, h, w}, {y, y});
  int32_t c2 = p.add(OpKind::kConvolution, DType::kF32, {n, c, h, w}, {y, w2}, same);
  at::Tensor xv = at::randn({n, c, h, w}), w1v = at::randn({c, c, 3, 3}), sv = at::randn({c}),
             rv = at::randn({n, c, h, w}), w2v = at::randn({c, c, 3, 3});
  const at::Tensor want_y = at::square(at::maximum(at::conv2d(xv, w1v, {}, 1, 1) * sv.view({c, 1, 1}) + rv, rv));
  const at::Tensor want_z = want_y + want_y, want_c2 = at::conv2d(want_y, w2v, {}, 1, 1);
  HostExecutable exe = compile(p, {z, c2}, true);
  ASSERT_EQ(exe.stats().clusters, 1) << exe.describe();
  for (bool cl_dest : {false, true}) {
    const auto format = cl_dest ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    at::Tensor dz = at::empty({n, c, h, w}).contiguous(format), dc = at::empty({n, c, h, w}).contiguous(format);
    exe.run({tensor_binding(xv), tensor_binding(w1v), tensor_binding(sv), tensor_binding(rv), tensor_binding(w2v)},
            {{z, tensor_binding(dz)}, {c2, tensor_binding(dc)}}, {});
    EXPECT_TRUE(at::allclose(dz, want_z, 1.3e-6, 1e-5)) << cl_dest << " " << (dz - want_z).abs().max().item<float>();
    EXPECT_TRUE(at::allclose(dc, want_c2, 1.3e-6, 1e-5)) << cl_dest << " " << (dc - want_c2).abs().max().item<float>();
  }
}

TEST(HostFusion, SnapshotBindingIsReadAtBindTime) {
  // y = x * 2 is written into x's memory; z = x' + 1 reads the same memory through another
  // binding. Unfused, z's kernel runs after y was written, so only a snapshot sees the old x.
  Program p;
  int32_t x = p.param(0, DType::kF32, {100});
  int32_t x2 = p.param(1, DType::kF32, {100});
  int32_t y = p.add(OpKind::kMul, DType::kF32, {100}, {x, p.splat(DType::kF32, 2.0, {100})});
  int32_t z = p.add(OpKind::kAdd, DType::kF32, {100}, {x2, p.splat(DType::kF32, 1.0, {100})});
  at::Tensor orig = at::randn({100});
  for (bool fuse : {false, true}) {
    for (bool snapshot : {false, true}) {
      HostExecutable exe = compile(p, {y, z}, fuse);
      at::Tensor mem = orig.clone(), zout = at::empty({100});
      exe.run({tensor_binding(mem), tensor_binding(mem, snapshot)},
              {{y, tensor_binding(mem)}, {z, tensor_binding(zout)}}, {});
      EXPECT_TRUE(at::equal(mem, orig * 2));
      if (snapshot) {
        EXPECT_TRUE(at::equal(zout, orig + 1)) << "fuse " << fuse;
      }
    }
  }
}

TEST(HostFusion, CompareSelectAndBoolMasks) {
  const int64_t n = 4099;
  Program p;
  int32_t x = p.param(0, DType::kF32, {n});
  int32_t y = p.param(1, DType::kF32, {n});
  int32_t keep = p.param(2, DType::kBool, {n});
  int32_t gt = p.add(OpKind::kCompare, DType::kBool, {n}, {x, y}, {4});
  int32_t le = p.add(OpKind::kCompare, DType::kBool, {n}, {x, p.splat(DType::kF32, 0.5, {n})}, {3});
  int32_t both = p.add(OpKind::kAnd, DType::kBool, {n}, {gt, keep});
  int32_t either = p.add(OpKind::kOr, DType::kBool, {n}, {both, le});
  int32_t none = p.add(OpKind::kNot, DType::kBool, {n}, {either});
  int32_t ex = p.add(OpKind::kXor, DType::kBool, {n}, {none, gt});
  int32_t s = p.add(OpKind::kSelect, DType::kF32, {n}, {ex, x, y});
  int32_t m = p.add(OpKind::kConvert, DType::kF32, {n}, {both});
  int32_t t = p.add(OpKind::kMul, DType::kF32, {n}, {s, m});
  int32_t b = p.add(OpKind::kConvert, DType::kBool, {n}, {t});
  at::Tensor xv = at::randn({n}), yv = at::randn({n}), kv = at::rand({n}) > 0.3;
  check(p, {ex, t, b}, {tensor_binding(xv), tensor_binding(yv), tensor_binding(kv)}, 1);
}

TEST(HostFusion, IntegerInputsOnlyThroughConvert) {
  Program p;
  int32_t i = p.param(0, DType::kI64, {300});
  int32_t f = p.add(OpKind::kConvert, DType::kF32, {300}, {i});
  int32_t h = p.add(OpKind::kConvert, DType::kBF16, {300}, {i});
  int32_t hf = p.add(OpKind::kConvert, DType::kF32, {300}, {h});
  int32_t a = p.add(OpKind::kSub, DType::kF32, {300}, {f, hf});
  int32_t k = p.add(OpKind::kAdd, DType::kI64, {300}, {i, i});  // integer arithmetic: a kernel
  int32_t kf = p.add(OpKind::kConvert, DType::kF32, {300}, {k});
  int32_t r = p.add(OpKind::kAdd, DType::kF32, {300}, {a, kf});
  at::Tensor iv = at::randint(-(int64_t{1} << 40), int64_t{1} << 40, {300}, at::kLong);
  check(p, {r}, {tensor_binding(iv)}, 1);
}

TEST(HostFusion, OutputOrderAndClosingRules) {
  // Two shapes interleaved, outputs in both, and a kernel output in between: results (and the
  // order writes happen in) must match the unfused program.
  Program p;
  int32_t x = p.param(0, DType::kF32, {50});
  int32_t w = p.param(1, DType::kF32, {7});
  int32_t a = p.add(OpKind::kExp, DType::kF32, {50}, {x});
  int32_t v = p.add(OpKind::kNeg, DType::kF32, {7}, {w});
  int32_t b = p.add(OpKind::kMul, DType::kF32, {50}, {a, x});  // output: closes [v] (one node: a kernel)
  int32_t u = p.add(OpKind::kAbs, DType::kF32, {7}, {v});      // output: closes [a, b]
  int32_t s = p.add(OpKind::kReduce, DType::kF32, {}, {b}, {0, 0});
  int32_t c = p.add(OpKind::kAdd, DType::kF32, {50}, {b, x});
  int32_t d = p.add(OpKind::kSub, DType::kF32, {50}, {c, a});
  at::Tensor xv = at::randn({50}), wv = at::randn({7});
  check(p, {b, u, s, d}, {tensor_binding(xv), tensor_binding(wv)}, 2, /*exact=*/true);  // [a, b], [c, d]
  // Fusion off via the environment.
  setenv("TORCH_TPU_HOST_FUSION", "0", 1);
  EXPECT_FALSE(HostOptions::from_env().fuse);
  unsetenv("TORCH_TPU_HOST_FUSION");
  EXPECT_TRUE(HostOptions::from_env().fuse);
}

TEST(HostFusion, ElementwiseNodesAfterAKernelReadingTheClusterJoinItFirst) {
  // A cluster computes g and x_hat, a per-channel max of g (a kernel: dims 0, 2, 3) closes it,
  // then g * x_hat is summed per channel. The product joins the cluster before the max runs
  // instead of starting a cluster after it (where it would end in its column sum). A node
  // that reads the max, and an output, keep their places.
  Program p;
  int32_t dy = p.param(0, DType::kF32, {4, 3, 5, 5});
  int32_t x = p.param(1, DType::kF32, {4, 3, 5, 5});
  int32_t g = p.add(OpKind::kMul, DType::kF32, {4, 3, 5, 5}, {dy, dy});
  int32_t xh = p.add(OpKind::kSub, DType::kF32, {4, 3, 5, 5}, {x, dy});
  int32_t s1 = p.add(OpKind::kReduce, DType::kF32, {3}, {g}, {2, 0, 2, 3});  // max
  int32_t prod = p.add(OpKind::kMul, DType::kF32, {4, 3, 5, 5}, {g, xh});
  int32_t s2 = p.add(OpKind::kReduce, DType::kF32, {3}, {prod}, {0, 0, 2, 3});  // a kernel after the max
  int32_t b1 = p.add(OpKind::kBroadcastInDim, DType::kF32, {4, 3, 5, 5}, {s1}, {1});
  int32_t out = p.add(OpKind::kSub, DType::kF32, {4, 3, 5, 5}, {prod, b1});  // reads s1: stays after it
  int32_t late = p.add(OpKind::kAbs, DType::kF32, {4, 3, 5, 5}, {xh});       // an output: stays
  at::Tensor dv = at::randn({4, 3, 5, 5}), xv = at::randn({4, 3, 5, 5});
  check(p, {s1, s2, out, late}, {tensor_binding(dv), tensor_binding(xv)}, 2);  // [g, xh, prod], [b1, out, late]
  HostExecutable exe = compile(p, {s1, s2, out, late}, true);
  EXPECT_EQ(exe.stats().steps, 4) << exe.describe();  // cluster, s1, s2, cluster
  EXPECT_EQ(exe.stats().fused_nodes, 6) << exe.describe();
}

TEST(HostFusion, EmptyAndTinyShapes) {
  for (int64_t n : {0, 1, 7, 8, 9, 1024, 1025}) {
    Program p;
    int32_t x = p.param(0, DType::kF32, {n, 1});
    int32_t a = p.add(OpKind::kAdd, DType::kF32, {n, 1}, {x, x});
    int32_t b = p.add(OpKind::kMul, DType::kF32, {n, 1}, {a, x});
    at::Tensor xv = at::randn({n, 1});
    check(p, {b}, {tensor_binding(xv)}, 1);
  }
}

// var_mean of a half-precision tensor as the lowering builds it: the 0-d mean is broadcast over
// the input (folded into that cluster) and also converted back to the input dtype. With an
// empty input the broadcasting cluster never runs, so the mean must not be folded into it
// (it was, and the converted mean read uninitialized memory instead of NaN).
TEST(HostFusion, ScalarFoldedIntoBroadcastIsComputedForEmptyShapes) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t n : {0, 1, 5, 300}) {
      Program p;
      int32_t x = p.param(0, dt, {n});
      int32_t xc = p.add(OpKind::kConvert, DType::kF32, {n}, {x});
      int32_t s = p.add(OpKind::kReduce, DType::kF32, {}, {xc}, {0, 0});
      int32_t mean = p.add(OpKind::kDiv, DType::kF32, {}, {s, p.constant(DType::kF32, static_cast<double>(n))});
      int32_t bm = p.add(OpKind::kBroadcastInDim, DType::kF32, {n}, {mean}, {});
      int32_t dev = p.add(OpKind::kSub, DType::kF32, {n}, {xc, bm});
      int32_t sq = p.add(OpKind::kMul, DType::kF32, {n}, {dev, dev});
      int32_t m2 = p.add(OpKind::kReduce, DType::kF32, {}, {sq}, {0, 0});
      int32_t var = p.add(OpKind::kDiv, DType::kF32, {}, {m2, p.constant(DType::kF32, std::max(n - 1.0, 0.0))});
      int32_t var_out = p.add(OpKind::kConvert, dt, {}, {var});
      int32_t mean_out = p.add(OpKind::kConvert, dt, {}, {mean});
      const at::ScalarType st = static_cast<at::ScalarType>(dt);
      at::Tensor xv = (at::randn({n}) + 1).to(st);
      auto [want_var, want_mean] = at::var_mean(xv.to(at::kFloat), at::IntArrayRef{0}, /*correction=*/1);
      for (bool fuse : {true, false}) {
        HostExecutable exe = compile(p, {var_out, mean_out}, fuse);
        auto got = run(exe, p, {var_out, mean_out}, {tensor_binding(xv)});
        const double tol = dt == DType::kBF16 ? 8e-3 : 1e-3;  // one rounding to the half dtype
        for (auto [g, w] : {std::pair{got[0], want_var}, std::pair{got[1], want_mean}}) {
          EXPECT_EQ(g.scalar_type(), st);
          EXPECT_TRUE(at::allclose(g.to(at::kFloat), w, tol, tol, /*equal_nan=*/true))
              << "n " << n << " fuse " << fuse << " got " << g.item<float>() << " want " << w.item<float>() << "\n"
              << exe.describe();
        }
      }
    }
  }
}

TEST(HostFusion, LongChainsSplitIntoBoundedClusters) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {777});
  int32_t v = x;
  const int chain = static_cast<int>(torch_tpu::runtime::host::kMaxClusterNodes) + 36;
  for (int k = 0; k < chain; ++k) v = p.add(k % 2 ? OpKind::kAdd : OpKind::kMul, DType::kF32, {777}, {v, x});
  at::Tensor xv = at::rand({777}) * 0.1;
  check(p, {v}, {tensor_binding(xv)}, 2);  // a full cluster, then 36 members
}

// A 0-d chain that only feeds broadcasts (an optimizer's bias corrections) is computed again
// inside each cluster that broadcasts it instead of running as a step of its own and being
// stored; one that is also an output (or that a kernel reads) is computed once and stored.
TEST(HostFusion, ScalarChainsAreRecomputedInEachBroadcastingCluster) {
  for (bool scalar_is_output : {false, true}) {
    Program p;
    int32_t x = p.param(0, DType::kF32, {300});
    int32_t y = p.param(1, DType::kF32, {7, 5});
    int32_t s = p.param(2, DType::kF32, {});
    int32_t t = p.add(OpKind::kMul, DType::kF32, {}, {s, p.constant(DType::kF32, 0.9)});
    int32_t u = p.add(OpKind::kSub, DType::kF32, {}, {p.constant(DType::kF32, 1.0), t});
    int32_t ox =
        p.add(OpKind::kMul, DType::kF32, {300}, {x, p.add(OpKind::kBroadcastInDim, DType::kF32, {300}, {u}, {})});
    int32_t oy =
        p.add(OpKind::kDiv, DType::kF32, {7, 5}, {y, p.add(OpKind::kBroadcastInDim, DType::kF32, {7, 5}, {u}, {})});
    std::vector<int32_t> outputs{ox, oy};
    if (scalar_is_output) outputs.push_back(u);
    at::Tensor xv = at::randn({300}), yv = at::randn({7, 5}), sv = at::scalar_tensor(0.5f);
    const int clusters = scalar_is_output ? 3 : 2;  // the 0-d chain is a cluster of its own when stored
    check(p, outputs, {tensor_binding(xv), tensor_binding(yv), tensor_binding(sv)}, clusters);
    EXPECT_EQ(compile(p, outputs, true).stats().steps, clusters);
  }
}

TEST(HostFusion, UnsupportedDtypesStayKernels) {
  Program p;
  int32_t d = p.param(0, DType::kF64, {10});
  int32_t i = p.param(1, DType::kI32, {10});
  int32_t b = p.add(OpKind::kConvert, DType::kBool, {10}, {d});  // 1e-50 is true: not via float
  int32_t s = p.add(OpKind::kAdd, DType::kF64, {10}, {d, d});
  int32_t j = p.add(OpKind::kMul, DType::kI32, {10}, {i, i});
  int32_t k = p.add(OpKind::kNot, DType::kI32, {10}, {j});  // bitwise not
  at::Tensor dv = at::full({10}, 1e-50, at::kDouble), iv = at::arange(10, at::kInt);
  auto r = check(p, {b, s, k}, {tensor_binding(dv), tensor_binding(iv)}, 0);
  EXPECT_TRUE(r[0].all().item<bool>());
}

TEST(HostFusion, LargeStridedInputsAcrossThreads) {
  // Many tiles (split over the intra-op pool), a transposed bf16 input and a broadcast column.
  Program p;
  int32_t x = p.param(0, DType::kBF16, {700, 900});
  int32_t c = p.param(1, DType::kF32, {700});
  int32_t xf = p.add(OpKind::kConvert, DType::kF32, {700, 900}, {x});
  int32_t bc = p.add(OpKind::kBroadcastInDim, DType::kF32, {700, 900}, {c}, {0});
  int32_t a = p.add(OpKind::kMul, DType::kF32, {700, 900}, {xf, bc});
  int32_t l = p.add(OpKind::kLogistic, DType::kF32, {700, 900}, {a});
  int32_t o = p.add(OpKind::kConvert, DType::kBF16, {700, 900}, {l});
  at::Tensor xv = at::randn({900, 700}).to(at::kBFloat16).t(), cv = at::randn({700});
  check(p, {o, l}, {tensor_binding(xv), tensor_binding(cv)}, 1, /*exact=*/true);
}

// Quick timings on 1M floats, fused vs per-node kernels (printed; the numbers depend on the
// machine and its load, so nothing is asserted).
TEST(HostFusion, TimingReport) {
  const int64_t n = 1 << 20;
  for (bool with_tanh : {false, true}) {
    Program p;
    int32_t x = p.param(0, DType::kF32, {n});
    int32_t y = p.param(1, DType::kF32, {n});
    int32_t a = p.add(OpKind::kMul, DType::kF32, {n}, {x, p.splat(DType::kF32, 2.0, {n})});
    int32_t b = p.add(OpKind::kAdd, DType::kF32, {n}, {a, p.splat(DType::kF32, 1.0, {n})});
    int32_t c = with_tanh ? p.add(OpKind::kTanh, DType::kF32, {n}, {b}) : b;
    int32_t d = p.add(OpKind::kMul, DType::kF32, {n}, {c, y});
    int32_t e = with_tanh ? d : p.add(OpKind::kSub, DType::kF32, {n}, {d, x});
    at::Tensor xv = at::randn({n}), yv = at::randn({n}), out = at::empty({n});
    for (bool fuse : {false, true}) {
      HostExecutable exe = compile(p, {e}, fuse);
      auto once = [&] { exe.run({tensor_binding(xv), tensor_binding(yv)}, {{e, tensor_binding(out)}}, {}); };
      once();
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < 10; ++k) once();
        auto dt = std::chrono::steady_clock::now() - t0;
        best = std::min(best, std::chrono::duration<double, std::micro>(dt).count() / 10);
      }
      std::printf("[ timing ] %s, 1M f32, fusion %s: %.0f us/run (%d steps)\n",
                  with_tanh ? "x*2+1 -> tanh -> *y" : "(x*2+1)*y-x", fuse ? "on " : "off", best, exe.stats().steps);
      if (fuse && with_tanh) std::printf("%s", exe.describe().c_str());
    }
  }
}

// row_sums' order (tile_cluster.h) spelled out one scalar add at a time: 32 lanes from +0, lane j
// adding elements j, j + 32, ... in sequence, then lanes pairwise (j += j + 16, + 8, + 4, + 2,
// + 1). Every row length up to three groups and a bit, short rows (the usual 8, 16, 24) and
// rows summing to zero or holding -0 included, must give these bits.
TEST(HostFusion, RowSumsFollowTheDocumentedLaneOrder) {
  auto reference = [](const float* x, int64_t m) {
    float lanes[32] = {};
    for (int64_t i = 0; i < m; ++i) lanes[i % 32] += x[i];
    for (int w = 16; w >= 1; w /= 2) {
      for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
    }
    return lanes[0];
  };
  for (int64_t m = 1; m <= 100; ++m) {
    at::Tensor x = at::randn({3, m}) * 1e3;
    x[1].fill_(-0.0);
    x[2].narrow(0, 0, m / 2 * 2)
        .view({-1, 2})
        .select(1, 1)
        .copy_(-x[2].narrow(0, 0, m / 2 * 2).view({-1, 2}).select(1, 0));
    std::vector<float> got(3);
    row_sums(x.const_data_ptr<float>(), 3, m, got.data());
    for (int64_t r = 0; r < 3; ++r) {
      const float want = reference(x.const_data_ptr<float>() + r * m, m);
      EXPECT_EQ(std::bit_cast<uint32_t>(got[r]), std::bit_cast<uint32_t>(want)) << "m " << m << " row " << r;
    }
  }
}

}  // namespace
}  // namespace torch_tpu::runtime
