// Column sums (column_sums.h): classification, the lane accumulators and the standalone sum.
#include "runtime/host/column_sums.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <cstring>

#include "runtime/host/clones.h"
#include "runtime/host/tile_cluster.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/strided_copy.h"

namespace torch_tpu::runtime::host {
namespace {

constexpr int64_t kLanes = 8;  // lanes per column: lane j adds rows j, j + 8, j + 16, ... of a block
typedef float Vec __attribute__((vector_size(32)));

// Always inlined into the AVX2 and default clones alike: no vector crosses a call, whatever
// GCC says about the ABI of vector arguments.
#pragma GCC diagnostic ignored "-Wpsabi"
[[gnu::always_inline]] inline Vec load8(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store8(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// The lanes of one or eight columns pairwise: lane j += lane j + 4, then + 2, then + 1.
template <typename T>
[[gnu::always_inline]] inline T pairwise(const T* l) {
  const T m0 = l[0] + l[4], m1 = l[1] + l[5], m2 = l[2] + l[6], m3 = l[3] + l[7];
  return (m0 + m2) + (m1 + m3);
}

// Rows [row0, row0 + rows) of a block (row r at x + (r - row0) * ld, `width` columns) into
// lanes[r % 8][col] (`width` floats per lane). Groups of 8 rows from a lane-0 row keep eight
// lane accumulators of 8 columns in registers (named: an array of them stayed on the stack,
// 2.5x slower), over at most 64 KiB of rows at a time (wide rows: a pass over a whole block
// of 3 KiB rows missed the TLB on every row). The rows around the groups add one by one.
// Every lane of every column is one chain of additions in row order either way.
TPU_AVX2_CLONES void add_rows(float* __restrict lanes, int64_t width, int64_t row0, const float* __restrict x,
                              int64_t ld, int64_t rows) {
  auto one_row = [&](int64_t i) {
    float* __restrict l = lanes + ((row0 + i) % kLanes) * width;
    const float* __restrict p = x + i * ld;
    for (int64_t c = 0; c < width; ++c) l[c] += p[c];
  };
  int64_t i = 0;
  for (; i < rows && (row0 + i) % kLanes != 0; ++i) one_row(i);
  const int64_t sub = std::max<int64_t>(kLanes, (65536 / (ld * 4)) / kLanes * kLanes);
  for (; rows - i >= kLanes;) {
    const int64_t groups = std::min(sub, rows - i) / kLanes;
    const float* const first = x + i * ld;
    int64_t c = 0;
    for (; c + 8 <= width; c += 8) {
      float* const l = lanes + c;
      Vec a0 = load8(l), a1 = load8(l + width), a2 = load8(l + 2 * width), a3 = load8(l + 3 * width);
      Vec a4 = load8(l + 4 * width), a5 = load8(l + 5 * width), a6 = load8(l + 6 * width), a7 = load8(l + 7 * width);
      const float* p = first + c;
      for (int64_t g = 0; g < groups; ++g, p += kLanes * ld) {
        a0 += load8(p);
        a1 += load8(p + ld);
        a2 += load8(p + 2 * ld);
        a3 += load8(p + 3 * ld);
        a4 += load8(p + 4 * ld);
        a5 += load8(p + 5 * ld);
        a6 += load8(p + 6 * ld);
        a7 += load8(p + 7 * ld);
      }
      store8(l, a0);
      store8(l + width, a1);
      store8(l + 2 * width, a2);
      store8(l + 3 * width, a3);
      store8(l + 4 * width, a4);
      store8(l + 5 * width, a5);
      store8(l + 6 * width, a6);
      store8(l + 7 * width, a7);
    }
    for (; c < width; ++c) {
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t k = 0; k < kLanes; ++k) lanes[k * width + c] += first[(g * kLanes + k) * ld + c];
      }
    }
    i += groups * kLanes;
  }
  for (; i < rows; ++i) one_row(i);
}

// out[c] = lanes[0..7][c] pairwise, for c < width.
TPU_AVX2_CLONES void finish_lanes(const float* __restrict lanes, int64_t width, float* __restrict out) {
  int64_t c = 0;
  for (; c + 8 <= width; c += 8) {
    Vec l[kLanes];
    for (int64_t k = 0; k < kLanes; ++k) l[k] = load8(lanes + k * width + c);
    store8(out + c, pairwise(l));
  }
  for (; c < width; ++c) {
    float l[kLanes];
    for (int64_t k = 0; k < kLanes; ++k) l[k] = lanes[k * width + c];
    out[c] = pairwise(l);
  }
}

// [rows, cols] memory with rows `ld` apart: lanes per block of rows and chunk of columns.
void sum_rows(const float* x, int64_t rows, int64_t cols, int64_t ld, float* out) {
  constexpr int64_t kChunk = 256;  // 8 lanes of 256 columns: 8 KiB
  const int64_t blocks = (rows + kColumnBlock - 1) / kColumnBlock, chunks = (cols + kChunk - 1) / kChunk;
  std::vector<float> block_sums(blocks == 1 ? 0 : static_cast<size_t>(blocks * cols));
  float* const sums = blocks == 1 ? out : block_sums.data();
  parallel_units(rows * cols, blocks * chunks, kColumnBlock * std::min(cols, kChunk), [&](int64_t u0, int64_t u1) {
    thread_local std::vector<float> lanes;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / chunks, c0 = (u % chunks) * kChunk, width = std::min(kChunk, cols - c0);
      lanes.assign(static_cast<size_t>(kLanes * width), 0.f);
      add_rows(lanes.data(), width, 0, x + b * kColumnBlock * ld + c0, ld,
               std::min(kColumnBlock, rows - b * kColumnBlock));
      finish_lanes(lanes.data(), width, sums + b * cols + c0);
    }
  });
  if (blocks > 1) combine_column_blocks(block_sums.data(), blocks, cols, out);
}

// sum_rows over a [rows, cols] value t of any strides (a broadcast view, `x.expand(n, m).sum(0)`),
// each block's rows of a column chunk read through read_logical into a small buffer: the same
// lanes add the same values in the same order, and t is never made contiguous.
void sum_rows_strided(const at::Tensor& t, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t kChunk = 256;
  const int64_t blocks = (rows + kColumnBlock - 1) / kColumnBlock, chunks = (cols + kChunk - 1) / kChunk;
  std::vector<float> block_sums(blocks == 1 ? 0 : static_cast<size_t>(blocks * cols));
  float* const sums = blocks == 1 ? out : block_sums.data();
  parallel_units(rows * cols, blocks * chunks, kColumnBlock * std::min(cols, kChunk), [&](int64_t u0, int64_t u1) {
    std::vector<float> lanes, block;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / chunks, c0 = (u % chunks) * kChunk, width = std::min(kChunk, cols - c0);
      const int64_t first = b * kColumnBlock, n = std::min(kColumnBlock, rows - first);
      block.resize(static_cast<size_t>(n * width));
      for (int64_t r = 0; r < n; ++r) read_logical(t, (first + r) * cols + c0, width, block.data() + r * width);
      lanes.assign(static_cast<size_t>(kLanes * width), 0.f);
      add_rows(lanes.data(), width, 0, block.data(), width, n);
      finish_lanes(lanes.data(), width, sums + b * cols + c0);
    }
  });
  if (blocks > 1) combine_column_blocks(block_sums.data(), blocks, cols, out);
}

// Row-major [outer, cols, inner] memory (NCHW kept over C), inner a multiple of 8: column c's
// rows are `outer` runs of `inner` contiguous values, so 8 consecutive rows are one vector
// whose elements are the 8 lanes. Four columns at a time (named accumulators, in registers)
// hide the add latency; block_sums[b * cols + c] receives block b of column c.
template <int kColumns>
[[gnu::always_inline]] inline void sum_runs_group(const float* __restrict x, int64_t outer, int64_t cols, int64_t inner,
                                                  int64_t c, float* __restrict block_sums) {
  Vec a0 = {}, a1 = {}, a2 = {}, a3 = {};
  auto finish = [&](Vec& a, float* dst) {
    float l[kLanes];
    std::memcpy(l, &a, sizeof l);
    *dst = pairwise(l);
    a = Vec{};
  };
  int64_t row = 0;
  for (int64_t i = 0; i < outer; ++i) {
    const float* run = x + (i * cols + c) * inner;
    for (int64_t off = 0; off < inner;) {
      // Up to the end of the run or of the block, whichever comes first.
      const int64_t end = off + std::min(inner - off, kColumnBlock - row % kColumnBlock);
      for (const float* p = run + off; p < run + end; p += kLanes) {
        a0 += load8(p);
        if constexpr (kColumns > 1) a1 += load8(p + inner);
        if constexpr (kColumns > 2) a2 += load8(p + 2 * inner);
        if constexpr (kColumns > 3) a3 += load8(p + 3 * inner);
      }
      row += end - off;
      off = end;
      if (row % kColumnBlock == 0 || (i == outer - 1 && off == inner)) {
        float* dst = block_sums + ((row - 1) / kColumnBlock) * cols + c;
        finish(a0, dst);
        if constexpr (kColumns > 1) finish(a1, dst + 1);
        if constexpr (kColumns > 2) finish(a2, dst + 2);
        if constexpr (kColumns > 3) finish(a3, dst + 3);
      }
    }
  }
}

TPU_AVX2_CLONES void sum_runs_columns(const float* __restrict x, int64_t outer, int64_t cols, int64_t inner, int64_t c0,
                                      int64_t c1, float* __restrict block_sums) {
  int64_t c = c0;
  for (; c + 4 <= c1; c += 4) sum_runs_group<4>(x, outer, cols, inner, c, block_sums);
  for (; c < c1; ++c) sum_runs_group<1>(x, outer, cols, inner, c, block_sums);
}

void sum_runs(const float* x, int64_t outer, int64_t cols, int64_t inner, float* out) {
  const int64_t rows = outer * inner, blocks = (rows + kColumnBlock - 1) / kColumnBlock;
  std::vector<float> block_sums(blocks == 1 ? 0 : static_cast<size_t>(blocks * cols));
  float* const sums = blocks == 1 ? out : block_sums.data();
  parallel_units(rows * cols, (cols + 3) / 4, rows * 4, [&](int64_t g0, int64_t g1) {
    sum_runs_columns(x, outer, cols, inner, g0 * 4, std::min(cols, g1 * 4), sums);
  });
  if (blocks > 1) combine_column_blocks(block_sums.data(), blocks, cols, out);
}

}  // namespace

std::optional<std::pair<int, int>> column_sum_kept(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.kind != ir::OpKind::kReduce || n.operands.size() != 1 || n.dtype != ir::DType::kF32) return std::nullopt;
  const ir::Node& x = g.node(n.operands[0]);
  if (x.dtype != ir::DType::kF32 || static_cast<ir::ReduceKind>(n.iattrs.at(0)) != ir::ReduceKind::kSum) {
    return std::nullopt;
  }
  const int rank = static_cast<int>(x.shape.size());
  const int reduced = static_cast<int>(n.iattrs.size()) - 1;
  if (reduced < 1 || reduced >= rank || c10::multiply_integers(x.shape) == 0 || row_reduce_lead_rank(g, id) >= 0) {
    return std::nullopt;
  }
  std::vector<bool> is_reduced(static_cast<size_t>(rank), false);
  for (int k = 0; k < reduced; ++k) {
    const int64_t d = n.iattrs[1 + k];
    if (d < 0 || d >= rank || is_reduced[static_cast<size_t>(d)]) return std::nullopt;
    is_reduced[static_cast<size_t>(d)] = true;
  }
  const int k0 = static_cast<int>(std::find(is_reduced.begin(), is_reduced.end(), false) - is_reduced.begin());
  int k1 = k0;
  while (k1 < rank && !is_reduced[static_cast<size_t>(k1)]) ++k1;
  if (std::find(is_reduced.begin() + k1, is_reduced.end(), false) != is_reduced.end()) return std::nullopt;
  return std::make_pair(k0, k1);
}

void column_sums(const at::Tensor& x, int k0, int k1, float* out) {
  const auto sizes = x.sizes();
  const int64_t outer = c10::multiply_integers(sizes.begin(), sizes.begin() + k0);
  const int64_t cols = c10::multiply_integers(sizes.begin() + k0, sizes.begin() + k1);
  const int64_t inner = c10::multiply_integers(sizes.begin() + k1, sizes.end());
  // The value as [rows, cols]: the reduced dims, then the kept ones.
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < k0 || d >= k1) order.push_back(d);
  }
  for (int64_t d = k0; d < k1; ++d) order.push_back(d);
  const at::Tensor rows = x.permute(order);
  if (rows.is_contiguous()) return sum_rows(rows.const_data_ptr<float>(), outer * inner, cols, cols, out);
  if (x.is_contiguous() && inner % kLanes == 0) return sum_runs(x.const_data_ptr<float>(), outer, cols, inner, out);
  sum_rows_strided(rows, outer * inner, cols, out);
}

void ColumnLanes::reset(int64_t cols) {
  cols_ = cols;
  lanes_.assign(static_cast<size_t>(kLanes * cols), 0.f);
}

void ColumnLanes::add(int64_t e0, const float* x, int64_t n) {
  int64_t row = e0 / cols_;
  if (const int64_t col = e0 - row * cols_; col != 0) {  // the end of a row an earlier tile began
    const int64_t len = std::min(cols_ - col, n);
    float* l = lanes_.data() + (row % kLanes) * cols_ + col;
    for (int64_t i = 0; i < len; ++i) l[i] += x[i];
    x += len;
    n -= len;
    ++row;
  }
  const int64_t full = n / cols_;
  add_rows(lanes_.data(), cols_, row, x, cols_, full);
  x += full * cols_;
  n -= full * cols_;
  row += full;
  float* l = lanes_.data() + (row % kLanes) * cols_;  // the start of a row a later tile ends
  for (int64_t i = 0; i < n; ++i) l[i] += x[i];
}

void ColumnLanes::finish(float* block_sums) const { finish_lanes(lanes_.data(), cols_, block_sums); }

void combine_column_blocks(const float* block_sums, int64_t blocks, int64_t cols, float* out) {
  if (blocks == 1) {
    std::copy_n(block_sums, cols, out);
    return;
  }
  std::vector<float> column(static_cast<size_t>(blocks));
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t b = 0; b < blocks; ++b) column[static_cast<size_t>(b)] = block_sums[b * cols + c];
    out[c] = total_sum(column.data(), blocks);
  }
}

}  // namespace torch_tpu::runtime::host
