// The output plan (exec/output_plan.h) turned into a Program's plan fields: new tensors
// numbered in output order, returns and host outputs kept, every index checked.
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "exec/output_plan.h"
#include "graph_helpers.h"

namespace torch_tpu::exec {
namespace {

// %0 = parameter 0 f32[2,3]; %1 = parameter 1 f32[2,3]; %2 = add.
ir::Graph add_graph() {
  testing::Program p;
  int32_t a = p.param(0, ir::DType::kF32, {2, 3});
  int32_t b = p.param(1, ir::DType::kF32, {2, 3});
  p.add(ir::OpKind::kAdd, ir::DType::kF32, {2, 3}, {a, b});
  return p.g;
}

compiler::ReturnSpec ret(compiler::ReturnSpec::Kind kind, int32_t index) {
  compiler::ReturnSpec r;
  r.kind = kind;
  r.index = index;
  return r;
}

TEST(OutputPlan, NewTensorsAreNumberedInOutputOrder) {
  OutputPlan plan;
  plan.outputs = {{2, -1, true, std::nullopt}, {2, 0, false, std::nullopt}, {0, -1, true, std::nullopt}};
  plan.returns = {ret(compiler::ReturnSpec::Kind::New, 1), ret(compiler::ReturnSpec::Kind::Binding, 0)};
  plan.host_outputs = {{2, 1}};
  plan.rng_counters = 3;
  auto prog = program_from_plan(add_graph(), plan, 2, "test");
  ASSERT_EQ(prog->outputs.size(), 3u);
  EXPECT_EQ(prog->outputs[0].new_index, 0);
  EXPECT_EQ(prog->outputs[1].new_index, -1);
  EXPECT_FALSE(prog->outputs[1].snapshot);
  EXPECT_EQ(prog->outputs[2].new_index, 1);
  ASSERT_EQ(prog->new_tensors.size(), 2u);
  EXPECT_EQ(prog->new_tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(prog->returns.size(), 2u);
  ASSERT_EQ(prog->host_outputs.size(), 1u);
  EXPECT_EQ(prog->host_outputs[0].target, 1);
  EXPECT_EQ(prog->rng_counters, 3u);
}

TEST(OutputPlan, IndicesOutOfRangeAreValueErrors) {
  auto fails = [](const OutputPlan& plan, int32_t num_bindings) {
    try {
      program_from_plan(add_graph(), plan, num_bindings, "test");
    } catch (const c10::ValueError&) {
      return true;
    }
    return false;
  };
  OutputPlan node;
  node.outputs = {{3, -1, true, std::nullopt}};
  EXPECT_TRUE(fails(node, 2));
  OutputPlan target;
  target.outputs = {{2, 2, true, std::nullopt}};
  EXPECT_TRUE(fails(target, 2));
  EXPECT_FALSE(fails(target, -1));  // bindings unknown: unchecked
  OutputPlan new_return;
  new_return.outputs = {{2, -1, true, std::nullopt}};
  new_return.returns = {ret(compiler::ReturnSpec::Kind::New, 1)};
  EXPECT_TRUE(fails(new_return, 2));
  OutputPlan list;
  compiler::ReturnSpec items = ret(compiler::ReturnSpec::Kind::List, 0);
  items.items = {ret(compiler::ReturnSpec::Kind::Binding, 5)};
  list.returns = {items};
  EXPECT_TRUE(fails(list, 2));
  OutputPlan host;
  host.host_outputs = {{2, 7}};
  EXPECT_TRUE(fails(host, 2));
}

}  // namespace
}  // namespace torch_tpu::exec
