// The output plan turned into a Program's plan fields (see output_plan.h).
#include "exec/output_plan.h"

#include "common/check.h"

namespace torch_tpu::exec {
namespace {

// Checks a return (and a list's items) against the new tensor and binding counts.
void check_return(const compiler::ReturnSpec& r, int32_t new_count, int32_t num_bindings, std::string_view what) {
  using Kind = compiler::ReturnSpec::Kind;
  switch (r.kind) {
    case Kind::New:
    case Kind::NewView:
      TPU_CHECK_VALUE(r.index >= 0 && r.index < new_count, what, ": return of new tensor ", r.index, " out of range");
      break;
    case Kind::Binding:
    case Kind::View:
      TPU_CHECK_VALUE(r.index >= 0 && (num_bindings < 0 || r.index < num_bindings), what, ": returned input ",
                      r.index, " out of range");
      break;
    case Kind::List:
      for (const auto& item : r.items) check_return(item, new_count, num_bindings, what);
      break;
    case Kind::Undefined: break;
  }
}

}  // namespace

std::shared_ptr<compiler::Program> program_from_plan(ir::Graph graph, const OutputPlan& plan, int32_t num_bindings,
                                                     std::string_view what) {
  auto prog = std::make_shared<compiler::Program>();
  prog->graph = std::move(graph);
  const int32_t num_nodes = prog->graph.size();
  int32_t new_count = 0;
  prog->outputs.reserve(plan.outputs.size());
  for (const auto& o : plan.outputs) {
    TPU_CHECK_VALUE(o.node >= 0 && o.node < num_nodes, what, ": output node ", o.node, " out of range");
    compiler::OutputSpec spec;
    spec.node = o.node;
    spec.target = o.target;
    if (o.target < 0) {
      spec.new_index = new_count++;
      prog->new_tensors.push_back(compiler::new_tensor_for(prog->graph.node(o.node), o.complex_dtype));
    } else {
      TPU_CHECK_VALUE(num_bindings < 0 || o.target < num_bindings, what, ": written input ", o.target,
                      " out of range");
      spec.snapshot = o.snapshot;
    }
    prog->outputs.push_back(spec);
  }
  for (const auto& r : plan.returns) check_return(r, new_count, num_bindings, what);
  prog->returns = plan.returns;
  for (auto [node, target] : plan.host_outputs) {
    TPU_CHECK_VALUE(node >= 0 && node < num_nodes && target >= 0 && (num_bindings < 0 || target < num_bindings),
                    what, ": bad host output (", node, ", ", target, ")");
    prog->host_outputs.push_back({node, target, -1});
  }
  prog->rng_counters = plan.rng_counters;
  prog->baked_scalars = plan.baked_scalars;
  return prog;
}

}  // namespace torch_tpu::exec
