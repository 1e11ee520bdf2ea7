// Helpers shared by the C++ tests that build IR programs by hand and bind ATen CPU tensors.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "runtime/runtime.h"

namespace torch_tpu::testing {

// An IR graph under construction: add() appends a node and returns its id.
struct Program {
  ir::Graph g;
  int32_t add(ir::OpKind k, ir::DType t, std::vector<int64_t> shape, std::vector<int32_t> operands = {},
              std::vector<int64_t> iattrs = {}, std::vector<double> fattrs = {}) {
    return g.add(ir::Node{k, t, std::move(shape), std::move(operands), std::move(iattrs), std::move(fattrs)});
  }
  int32_t param(int64_t binding, ir::DType t, std::vector<int64_t> shape) {
    return add(ir::OpKind::kParameter, t, std::move(shape), {}, {binding});
  }
  int32_t constant(ir::DType t, double v) { return add(ir::OpKind::kConstant, t, {}, {}, {}, {v}); }
  // A scalar constant broadcast to `shape`.
  int32_t splat(ir::DType t, double v, const std::vector<int64_t>& shape) {
    return add(ir::OpKind::kBroadcastInDim, t, shape, {constant(t, v)}, {});
  }
};

// A tensor binding over t's memory (t must outlive the run).
inline runtime::Binding tensor_binding(const at::Tensor& t, bool snapshot = false) {
  runtime::Binding b;
  b.kind = runtime::Binding::Kind::Tensor;
  b.dtype = t.scalar_type();
  b.data = t.data_ptr();
  b.sizes.assign(t.sizes().begin(), t.sizes().end());
  b.strides.assign(t.strides().begin(), t.strides().end());
  b.snapshot = snapshot;
  return b;
}

}  // namespace torch_tpu::testing
