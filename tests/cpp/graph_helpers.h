// Helpers shared by the C++ tests that build IR programs by hand. IR only (no PyTorch): the
// graph-pass tests use it alone; host_helpers.h adds what running on the host runtime needs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/verifier.h"

namespace torch_tpu::testing {

// The IR names every graph-building test uses (`using namespace torch_tpu::testing;`).
using ir::DType;
using ir::Graph;
using ir::Node;
using ir::OpKind;

// An IR graph under construction: add() appends a node and returns its id.
struct Program {
  Graph g;
  int32_t add(OpKind k, DType t, std::vector<int64_t> shape, std::vector<int32_t> operands = {},
              std::vector<int64_t> iattrs = {}, std::vector<double> fattrs = {}) {
    return g.add(Node{k, t, std::move(shape), std::move(operands), std::move(iattrs), std::move(fattrs)});
  }
  int32_t param(int64_t binding, DType t, std::vector<int64_t> shape) {
    return add(OpKind::kParameter, t, std::move(shape), {}, {binding});
  }
  int32_t constant(DType t, double v) { return add(OpKind::kConstant, t, {}, {}, {}, {v}); }
  // A scalar constant broadcast to `shape`.
  int32_t splat(DType t, double v, const std::vector<int64_t>& shape) {
    return add(OpKind::kBroadcastInDim, t, shape, {constant(t, v)}, {});
  }
};

// The verifier's message for g's first bad node, or "" when g verifies.
inline std::string verify_error(const Graph& g) {
  try {
    ir::verify(g);
  } catch (const ir::VerifyError& e) {
    return e.what();
  }
  return "";
}

}  // namespace torch_tpu::testing
