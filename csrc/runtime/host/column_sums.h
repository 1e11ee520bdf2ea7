// Column sums: float32 sums over leading dims, in one order wherever they run.
//
// Design: batch norm's statistics and gradients sum a [N, C, H, W] value over N, H and W, and a
// bias gradient sums [B, T, C] over B and T. Seen in the right order such a sum is a matrix of
// "rows" (the reduced positions, row-major over the reduced dims) by "columns" (the kept
// positions, row-major over the kept dims), summed down each column. ATen's sum of a
// channels-last [8, 16, 32, 32] over N, H and W took 48 us inside a ResNet step; a fused
// cluster (tile_cluster.h) sums a member it computes as its tiles stream, without storing it. To give
// the same bits fused or not (as row sums do), every column sum adds in one order, defined on
// the logical values, never on strides, tiles or threads:
//   column c's rows are cut into blocks of kColumnBlock rows; in a block, lane j (j < 8) adds
//   rows j, j + 8, j + 16, ... in sequence, and the lanes combine pairwise (lane j += lane
//   j + 4, then + 2, then + 1); the blocks' sums add in total_sum's order (one block: its sum).
// Eight lanes suit both layouts: over [rows, C] memory (a row-major bias gradient, a
// channels-last batch norm) eight lane accumulators of 8 columns stay in vector registers,
// and over NCHW memory 8 consecutive rows of a column are one vector whose elements are the
// lanes. Each lane adds at most 32 terms and the rest is pairwise, so the rounding error stays
// near ATen's cascade sum.
// Which sums are column sums: f32 sums of f32 values that keep one contiguous range of dims
// [k0, k1) (at least one dim reduced and one kept) and that no row cluster could hold
// (row_reduce_lead_rank: rows up to kMaxRow reduced over trailing dims keep their order).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace torch_tpu::runtime::host {

// Rows per block of a column sum. A cluster's tiles (powers of two) divide kColumnBlock x C
// elements, so a tile never straddles two blocks and each block's tiles go to one thread.
inline constexpr int64_t kColumnBlock = 256;

// The kept dims [k0, k1) of a column sum node (see above), or nothing.
std::optional<std::pair<int, int>> column_sum_kept(const ir::Graph& g, int32_t id);

// out[c] = column c's sum (in the order above) of a float32 tensor whose dims [k0, k1) are kept
// and the others reduced; out holds the kept positions in row-major order. Any strides.
// Splits across the host runtime's kernel threads like the reduce kernels.
void column_sums(const at::Tensor& x, int k0, int k1, float* out);

// The lane accumulators of one block of a [rows, C] walk (tile_cluster.h's clusters feed them tile
// by tile). reset() before a block's first element; add() elements [e0, e0 + n) of the block
// (row-major over [rows, C], in order, any cut); finish() writes the block's C sums.
class ColumnLanes {
 public:
  void reset(int64_t cols);
  void add(int64_t e0, const float* x, int64_t n);
  void finish(float* block_sums) const;

 private:
  int64_t cols_ = 0;
  std::vector<float> lanes_;  // [8][cols_]
};

// Column c's sum from the blocks' sums: block_sums[b * cols + c] for b < blocks.
void combine_column_blocks(const float* block_sums, int64_t blocks, int64_t cols, float* out);

}  // namespace torch_tpu::runtime::host
