// Host runtime kernels: how each IR node becomes a closure over ATen CPU ops.
//
// Design: compilation turns every live node into a `Kernel`, a closure that captures the
// node's operand ids and everything derivable from the graph alone (ATen argument vectors,
// permutations, fill values, constants), so running a node only gathers operand tensors and
// calls ATen. A kernel receives the value table (at::Tensor per node id, operands already
// computed) and, when the node is an output whose destination has the node's dtype and shape
// and aliases no input, that destination: kernels with an ATen `_out` variant write into it
// and return it, the others return a fresh tensor (the executor then copies). Kernels never
// modify their operands, so values (including views of bindings and shared constants) can be
// aliased freely. Grouped by file: elementwise (incl. rng), data movement, reductions,
// contractions.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace torch_tpu::runtime::host {

using Values = std::vector<at::Tensor>;

// The channels-last format a 4-d (5-d) tensor is laid out in, when it is and is not also
// contiguous: a value the host runtime keeps channels-last inside a program
// (kernels_contract.cpp, tile_cluster.h "Layout"). Empty otherwise.
inline std::optional<at::MemoryFormat> channels_last_format(const at::Tensor& t) {
  const int64_t rank = t.dim();
  if (rank != 4 && rank != 5) return std::nullopt;
  const auto format = rank == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
  if (t.is_contiguous() || !t.is_contiguous(format)) return std::nullopt;
  return format;
}
// Returns the node's value; may write into (and return) *out when out is non-null.
using Kernel = std::function<at::Tensor(const Values& values, at::Tensor* out)>;

inline at::ScalarType to_aten(ir::DType t) { return static_cast<at::ScalarType>(t); }

// Each returns the kernel for `id`, or an empty Kernel if the op is not in its group.
Kernel make_elementwise_kernel(const ir::Graph& g, int32_t id);  // kernels_elementwise.cpp
Kernel make_rng_kernel(const ir::Graph& g, int32_t id);          // kernels_rng.cpp
Kernel make_data_kernel(const ir::Graph& g, int32_t id);         // kernels_data.cpp
Kernel make_reduce_kernel(const ir::Graph& g, int32_t id);       // kernels_reduce.cpp
Kernel make_contract_kernel(const ir::Graph& g, int32_t id);     // kernels_contract.cpp
Kernel make_linalg_kernel(const ir::Graph& g, int32_t id);       // kernels_linalg.cpp
// Multiply-adds of a dot_general or convolution node (what its kernel splits by, divided by
// kMultiplyAddsPerElement); 0 for other ops.
int64_t contraction_macs(const ir::Graph& g, int32_t id);  // kernels_contract.cpp

// Transposed convolutions that read their weight as it is (kernels_contract.cpp). The lowering
// expresses a transposed convolution (a convolution's input gradient) as a convolution over
// the weight reversed spatially with its in/out channels swapped per group (nn_conv.py,
// _flip_weight: reshape, transpose, reshape, reverse); the host kernel runs ATen's transposed
// convolution, which takes the weight un-flipped, so it flipped it back: three copies of the
// weight per call. absorb_weight_flips points the reverse node of such a chain straight at the
// weight (node ids and node shapes kept: the convolution's sizes still come from the reverse
// node; the reshapes and transpose between lose their only reader and their steps) and adds
// the reverse and convolution nodes it rewrote to `rewritten`, whose kernels come from
// make_unflipped_kernel: the reverse passes the weight on, the convolution uses it as is.
// Only chains read by nothing else, in convolutions that take the transposed form, and no
// outputs (`keep`).
ir::Graph absorb_weight_flips(const ir::Graph& graph, const std::vector<bool>& keep,
                              std::unordered_set<int32_t>& rewritten);
Kernel make_unflipped_kernel(const ir::Graph& g, int32_t id);

// Product forms (kernels_contract.cpp): what the host graph knows about a dot_general node
// beyond the IR, filled by the two passes below and built by make_product_kernel.
struct ProductForm {
  std::vector<int64_t> bias_dims;  // the node's third operand is a bias broadcast along these
  std::vector<int64_t> order;      // the result's memory order (outermost dim first); empty: row-major
};
using ProductForms = std::unordered_map<int32_t, ProductForm>;
Kernel make_product_kernel(const ir::Graph& g, int32_t id, const ProductForm& form);

// Bias epilogues. A linear layer lowers to add(dot_general(x, w), broadcast_in_dim(bias)),
// which ran as a product and then a cluster pass over its whole result (TinyGPT inference: 6
// such passes, 8% of a compiled step). absorb_bias_adds turns the add node into a dot_general
// reading [lhs, rhs, bias] (node id and shape kept; the plain product and the broadcast lose
// their reader) and records the broadcast's dims in its form. Its kernel adds a float32 bias
// along the last dim to each block of rows right after that block's GEMM, while it is in
// cache, and any other bias after the product (the same additions as the separate add).
// BLAS beta = 1 over a result pre-filled with the bias (ATen's addmm) was slower on our CPU.
// Only float products of one dtype whose plain result has no other reader and is no output
// (`keep`), with the bias broadcast along increasing dims.
ir::Graph absorb_bias_adds(const ir::Graph& graph, const std::vector<bool>& keep, ProductForms& forms);

// Product layouts. Attention's p @ v ([B, H, T, D]) is read only by a transpose to [B, T, H,
// D], then merged to [B, T, H * D]: from a row-major product that merge was a copy per call.
// product_layouts gives each batched float product read by nothing but one transpose that
// keeps its last dim last (and no output: `keep`) the transpose's order as its memory order,
// which its kernel writes (BLAS writes each matrix with a leading dimension), so the transpose
// is row-major and the merge a view.
void product_layouts(const ir::Graph& graph, const std::vector<bool>& keep, ProductForms& forms);

// Small shared helpers.
inline std::vector<int64_t> attr_slice(const ir::Node& n, size_t from, size_t count) {
  return {n.iattrs.begin() + from, n.iattrs.begin() + from + count};
}

// dst[j] += src[j] for j < n. Groups of 8 with restrict pointers vectorize at -O2 (whose cost
// model leaves loops of unknown trip count scalar).
inline void add_into(float* __restrict dst, const float* __restrict src, int64_t n) {
  const int64_t n8 = n / 8 * 8;
  for (int64_t j = 0; j < n8; j += 8) {
    for (int k = 0; k < 8; ++k) dst[j + k] += src[j + k];
  }
  for (int64_t j = n8; j < n; ++j) dst[j] += src[j];
}

// Per node, how many operand slots read it (host graph rewrites absorb a node read only once).
inline std::vector<int32_t> reader_counts(const ir::Graph& g) {
  std::vector<int32_t> readers(static_cast<size_t>(g.size()), 0);
  for (const ir::Node& node : g.nodes()) {
    for (int32_t o : node.operands) readers[static_cast<size_t>(o)]++;
  }
  return readers;
}

// [first, last] byte addresses a non-empty strided region can touch (strides in elements, of
// either sign): overlap tests between bindings (executor) and cluster operands (fusion).
inline std::pair<uintptr_t, uintptr_t> byte_extent(const void* base, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                                   int64_t item) {
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const int64_t ext = (sizes[d] - 1) * strides[d];
    (ext < 0 ? lo : hi) += ext;
  }
  const auto b = reinterpret_cast<uintptr_t>(base);
  return {b + lo * item, b + hi * item + item - 1};
}

}  // namespace torch_tpu::runtime::host
