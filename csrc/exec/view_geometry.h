// Strided views of values the fused-mode pending graph holds, expressed as IR view nodes.
//
// Design: fused mode records an op's tensor reads against the pending graph's SSA values. A
// value is stored in memory with some (offset, sizes, strides); a later op may read the same
// memory through another view, and the graph can only serve that read from the value if the
// view is a chain of IR views of it (reshape, slice, transpose, broadcast_in_dim), or a write
// through a view if it is a dynamic_update_slice of it. This is pure geometry over sizes and
// strides, separate from the recording (fused.cpp) and the composition (fused_compose.cpp)
// that use it, and testable on its own.
#pragma once

#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace torch_tpu::exec::fusion {

// Whether (sizes, strides) is row-major and dense (size-1 dims may carry any stride).
inline bool is_contiguous(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// For a value stored densely in some dimension order (a result that kept a transposed
// operand's layout): the permutation that orders its dims by decreasing stride, so the memory
// holds transpose(value, perm) contiguously. False when the layout has gaps or overlaps.
bool dense_order(c10::IntArrayRef sizes, c10::IntArrayRef strides, std::vector<int64_t>& perm);

// A view node reading the previous value of a chain (operand -1).
inline ir::Node view_node(ir::OpKind kind, ir::DType dtype, std::vector<int64_t> shape, std::vector<int64_t> iattrs) {
  ir::Node n;
  n.kind = kind;
  n.dtype = dtype;
  n.shape = std::move(shape);
  n.operands = {-1};
  n.iattrs = std::move(iattrs);
  return n;
}

// How a strided view of a value stored contiguously (n elements) sits in that value: with the
// view's dimensions sorted by decreasing stride, the first `len` elements reshaped to `base`
// (rows of the outermost stride, then each stride's quotient by the next, then the innermost
// stride) contain the view as the box [start, limit) — the last base dimension sliced to one
// element. Size-1 dimensions are ignored; stride-0 dimensions are broadcasts.
struct BoxLayout {
  struct Dim {
    int64_t size, stride;
    size_t pos;  // dimension index in the view
  };
  std::vector<Dim> real;  // dims with size > 1 and stride > 0, by decreasing stride
  bool broadcast = false;
  int64_t len = 0;
  std::vector<int64_t> base, start, limit;
};

// The box layout of the view (sizes, strides) at element `rel` of a value of n elements; false
// when there is none (negative or overlapping strides, a view past the end).
bool box_layout(int64_t n, int64_t rel, c10::IntArrayRef sizes, c10::IntArrayRef strides, BoxLayout& box);

// The view's real dims, in view order, as positions into the stride-sorted list.
std::vector<int64_t> view_order(const BoxLayout& box);

inline bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Appends nodes to a chain (operand -1 = the previous value), skipping no-op steps.
struct Chain {
  ir::DType dtype;
  std::vector<int64_t> cur;
  std::vector<ir::Node>& out;

  void reshape(const std::vector<int64_t>& shape) {
    if (shape == cur) return;
    out.push_back(view_node(ir::OpKind::kReshape, dtype, shape, {}));
    cur = shape;
  }
  void slice(const std::vector<int64_t>& start, const std::vector<int64_t>& limit) {
    std::vector<int64_t> shape(start.size());
    bool full = true;
    for (size_t d = 0; d < start.size(); ++d) {
      shape[d] = limit[d] - start[d];
      full &= start[d] == 0 && limit[d] == cur[d];
    }
    if (full) return;
    std::vector<int64_t> attrs = start;
    attrs.insert(attrs.end(), limit.begin(), limit.end());
    attrs.insert(attrs.end(), start.size(), 1);
    out.push_back(view_node(ir::OpKind::kSlice, dtype, shape, std::move(attrs)));
    cur = shape;
  }
  void transpose(const std::vector<int64_t>& perm) {
    if (is_identity(perm)) return;
    std::vector<int64_t> shape(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) shape[i] = cur[static_cast<size_t>(perm[i])];
    out.push_back(view_node(ir::OpKind::kTranspose, dtype, shape, perm));
    cur = shape;
  }
};

// Appends to `out` the nodes (operand -1: the previous value) that turn a value stored
// contiguously at element offset `w_offset` with shape `w_sizes` into the view (r_offset,
// r_sizes, r_strides) of the same storage: reshape to the box layout, slice the box, transpose
// into the view's dimension order, broadcast stride-0 dimensions. False when no such chain
// exists (overlapping strides, a box that wraps rows).
bool express_view(int64_t w_offset, c10::IntArrayRef w_sizes, ir::DType dtype, int64_t r_offset,
                  c10::IntArrayRef r_sizes, c10::IntArrayRef r_strides, std::vector<ir::Node>& out);

// Whether a write through the view (v_offset, v_sizes, v_strides) into a value stored
// contiguously at w_offset with w_sizes can be expressed as an update of that value.
bool can_update(int64_t w_offset, c10::IntArrayRef w_sizes, int64_t v_offset, c10::IntArrayRef v_sizes,
                c10::IntArrayRef v_strides);

}  // namespace torch_tpu::exec::fusion
