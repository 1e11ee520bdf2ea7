// Verifying a pass's output (compiler/passes/verify_pass.h), and the host planner doing it after
// its IR passes when asked (HostOptions::verify, set by TORCH_TPU_VERIFY=1).
#include <gtest/gtest.h>

#include <string>

#include "compiler/passes/verify_pass.h"
#include "compiler/passes/view_chains.h"
#include "graph_helpers.h"
#include "host_helpers.h"

namespace torch_tpu::compiler::passes {
namespace {

using namespace torch_tpu::testing;  // Program, DType, OpKind, compile_host (*_helpers.h)

// What a broken pass could return: an add whose operands' shapes differ.
Program broken_output() {
  Program p;
  p.param(0, DType::kF32, {2});
  p.param(1, DType::kF32, {3});
  p.add(OpKind::kAdd, DType::kF32, {2}, {0, 1});
  return p;
}

TEST(PassVerify, ABrokenOutputIsReportedWithThePassAndTheNode) {
  const Program p = broken_output();
  try {
    verify_pass_output(p.g, "my_pass");
    FAIL() << "the broken graph verified";
  } catch (const ir::VerifyError& e) {
    EXPECT_EQ(std::string(e.what()), "after pass my_pass: %2 = add: add.C1 operand shapes differ ([2] vs [3])");
    EXPECT_EQ(e.node(), 2);
  }
}

TEST(PassVerify, AGoodOutputPasses) {
  Program p;
  p.param(0, DType::kF32, {4, 6});
  p.add(OpKind::kReshape, DType::kF32, {24}, {0});
  p.add(OpKind::kReshape, DType::kF32, {6, 4}, {1});
  p.add(OpKind::kNeg, DType::kF32, {6, 4}, {2});
  EXPECT_NO_THROW(verify_pass_output(collapse_view_chains(p.g, {false, false, false, true}), "collapse_view_chains"));
}

TEST(PassVerify, TheHostPlannerVerifiesAndRunsANormalGraph) {
  Program p;
  const int32_t x = p.param(0, DType::kF32, {4, 6});
  const int32_t r1 = p.add(OpKind::kReshape, DType::kF32, {24}, {x});
  const int32_t r2 = p.add(OpKind::kReshape, DType::kF32, {6, 4}, {r1});
  const int32_t t = p.add(OpKind::kTranspose, DType::kF32, {4, 6}, {r2}, {1, 0});
  const int32_t y = p.add(OpKind::kNeg, DType::kF32, {4, 6}, {t});
  runtime::host::HostOptions o;
  o.verify = true;
  const runtime::host::HostExecutable exe(p.g, {y}, o);
  at::Tensor in = at::arange(24, at::kFloat).reshape({4, 6});
  std::vector<at::Tensor> results;
  exe.run({tensor_binding(in)}, fresh_targets(p, {y}, &results), {});
  EXPECT_TRUE(at::equal(results[0], -in.reshape({6, 4}).t()));
}

}  // namespace
}  // namespace torch_tpu::compiler::passes
