// The output plan: how a lowered graph's results map back onto PyTorch tensors, in the one
// form both lowering entries hand over with their graph (per-op programs:
// torch_tpu/lowering/bridge.py; compiled FX graphs: torch_tpu/compile/lower_graph.py).
//
// Python form (read in one place, csrc/python/plan_convert.cpp):
//   outputs       [(node, target[, extra])]: target >= 0 writes node into the tensor of that
//                 binding (extra: whether it is bound as a copy, compiled graphs only; per-op
//                 programs decide per call); -1 allocates the next new tensor (extra: the
//                 c10::ScalarType code of a complex new tensor, whose node is its view_as_real)
//   returns       [ret], ret one of
//                   ("n", k)              new tensor k
//                   ("i", b)              the tensor (or value) of binding b, as is
//                   ("v", b, sizes, strides, offset, base sizes, base strides)
//                                         a view of binding b's tensor, as traced
//                   ("w", k, sizes, strides, offset, base sizes, base strides)
//                                         a view of new tensor k
//                   ("c", value)          None (an undefined tensor) or a Python number a
//                                         compiled graph returns as is
//                   ("l", [ret, ...])     a list (a Tensor[] return)
//   host_outputs  [(node, binding)]: compiled graphs' new values of mutated CPU 0-d inputs
// Here it becomes the plan fields of a compiler::Program (program_from_plan), checked against
// the graph and the bindings, so a malformed plan is a ValueError, never a bad write.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/program.h"
#include "ir/graph.h"

namespace torch_tpu::exec {

struct OutputPlan {
  struct Output {
    int32_t node = 0;
    int32_t target = -1;  // >= 0: a binding written; -1: a new tensor
    bool snapshot = true;
    std::optional<c10::ScalarType> complex_dtype;  // a complex new tensor
  };
  std::vector<Output> outputs;
  std::vector<compiler::ReturnSpec> returns;
  // Per return: the Python number a ("c", value) return stands for; None for every other
  // return and for ("c", None), whose ReturnSpec is Kind::Undefined either way.
  std::vector<c10::IValue> constants;
  std::vector<std::pair<int32_t, int32_t>> host_outputs;  // (node, binding)
  uint64_t rng_counters = 0;
  bool baked_scalars = false;
};

// The Program of `graph` and `plan`, without its executable (finish_program next). Every index
// is checked against the graph and, when num_bindings >= 0, against the bindings; a failed
// check raises ValueError naming `what` (the op, or "compiled graph").
std::shared_ptr<compiler::Program> program_from_plan(ir::Graph graph, const OutputPlan& plan, int32_t num_bindings,
                                                     std::string_view what);

}  // namespace torch_tpu::exec
