// The IR verifier: re-checks every constraint GraphBuilder (torch_tpu/ir/builder.py) checks.
//
// Design: the Python builder infers types while lowerings record nodes; the C++ side receives
// only the serialized result, so before a graph is hashed into a cache, compiled or executed
// verify() recomputes each node's result type from its operands and attributes and compares it
// with the recorded one. A failure is a bug in a lowering (or in the wire conversion), so the
// message is aimed at its author: "%4 = add: add.C2 operand dtypes differ (f32 vs f16)" names
// the node, the op and the constraint.
//
// Constraint numbers: `<op>.C<n>` are the per-op constraints of docs/ir.md (numbers after the
// documented ones cover the further checks builder.py makes, listed in verifier.cpp next to
// each op). `<op>.G<n>` are the structural checks every node gets:
//   G1 operands name earlier nodes      G2 operand count          G3 attribute count
//   G4 dtype code and shape are valid   G5 recorded dtype == inferred dtype
//   G6 recorded shape == inferred shape
#pragma once

#include <stdexcept>
#include <string>

#include "ir/graph.h"

namespace torch_tpu::ir {

class VerifyError : public std::runtime_error {
 public:
  VerifyError(int32_t node, const std::string& message)
      : std::runtime_error(message), node_(node) {}
  int32_t node() const { return node_; }  // id of the offending node

 private:
  int32_t node_;
};

// Throws VerifyError for the first node that violates a constraint.
void verify(const Graph& graph);

}  // namespace torch_tpu::ir
