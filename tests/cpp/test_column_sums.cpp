// Column sums (runtime/host/column_sums.h): one summation order over every memory layout and
// every way of feeding the lanes, spelled out here element by element.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "runtime/host/column_sums.h"
#include "runtime/host/tile_cluster.h"

namespace torch_tpu::runtime::host {
namespace {

// The documented order for one column (its rows in order): blocks of kColumnBlock rows, eight
// lanes per block (lane j adds rows j, j + 8, ... in sequence), the lanes pairwise, then the
// blocks' sums in total_sum's order.
float reference_column(const std::vector<float>& column) {
  const int64_t rows = static_cast<int64_t>(column.size());
  std::vector<float> blocks;
  for (int64_t b0 = 0; b0 < rows; b0 += kColumnBlock) {
    float lane[8] = {};
    for (int64_t r = b0; r < std::min(rows, b0 + kColumnBlock); ++r) lane[(r - b0) % 8] += column[r];
    const float m0 = lane[0] + lane[4], m1 = lane[1] + lane[5], m2 = lane[2] + lane[6], m3 = lane[3] + lane[7];
    blocks.push_back((m0 + m2) + (m1 + m3));
  }
  return blocks.size() == 1 ? blocks[0] : total_sum(blocks.data(), static_cast<int64_t>(blocks.size()));
}

// Column sums of x (kept dims [k0, k1)) by the reference, from x's logical values.
std::vector<float> reference(const at::Tensor& x, int k0, int k1) {
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < k0 || d >= k1) order.push_back(d);
  }
  for (int64_t d = k0; d < k1; ++d) order.push_back(d);
  const at::Tensor m = x.permute(order).contiguous();
  const int64_t cols = c10::multiply_integers(x.sizes().slice(k0, k1 - k0)), rows = m.numel() / cols;
  const at::Tensor t = m.view({rows, cols}).t().contiguous();
  std::vector<float> out;
  for (int64_t c = 0; c < cols; ++c) {
    const float* p = t.const_data_ptr<float>() + c * rows;
    out.push_back(reference_column(std::vector<float>(p, p + rows)));
  }
  return out;
}

std::vector<float> sums_of(const at::Tensor& x, int k0, int k1) {
  std::vector<float> out(static_cast<size_t>(c10::multiply_integers(x.sizes().slice(k0, k1 - k0))));
  column_sums(x, k0, k1, out.data());
  return out;
}

TEST(ColumnSums, EveryLayoutAddsInTheDocumentedOrder) {
  at::manual_seed(3);
  // [rows, C] memory (a bias gradient), with columns that are not a multiple of 8 and rows
  // that are not a multiple of 8 or of a block.
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1000, 5}, {600, 16}, {37, 300}, {3, 1}}) {
    at::Tensor x = at::randn({rows, cols}) * 4;
    const auto want = reference(x, 1, 2);
    EXPECT_EQ(sums_of(x, 1, 2), want) << rows << " x " << cols;
    EXPECT_EQ(sums_of(x.t().contiguous().t(), 1, 2), want) << "column-major memory";
  }
  // [N, C, H, W] kept over C: NCHW runs (8-aligned and not), channels-last memory, strided.
  for (auto shape : std::vector<std::vector<int64_t>>{{6, 5, 16, 8}, {3, 4, 7, 9}, {1, 3, 40, 40}, {40, 2, 4, 4}}) {
    at::Tensor x = at::randn(shape) * 4;
    const auto want = reference(x, 1, 2);
    EXPECT_EQ(sums_of(x, 1, 2), want) << x.sizes();
    EXPECT_EQ(sums_of(x.contiguous(at::MemoryFormat::ChannelsLast), 1, 2), want) << x.sizes();
    EXPECT_EQ(sums_of(x.transpose(2, 3).contiguous().transpose(2, 3), 1, 2), want) << x.sizes();
    // And keeping trailing dims (a sum over the batch of [N, C, H, W]).
    EXPECT_EQ(sums_of(x, 1, 4), reference(x, 1, 4)) << x.sizes();
  }
}

TEST(ColumnSums, LanesFedInAnyCutsGiveTheBlocksSums) {
  // A fused cluster feeds a block's elements tile by tile; tiles may end mid-row.
  std::mt19937 rng(5);
  for (int64_t cols : {1, 3, 16, 24, 100}) {
    const int64_t rows = kColumnBlock - 3;
    at::Tensor x = at::randn({rows, cols});
    const float* p = x.const_data_ptr<float>();
    ColumnLanes lanes;
    lanes.reset(cols);
    for (int64_t e = 0; e < rows * cols;) {
      const int64_t n = std::min<int64_t>(rows * cols - e, 1 + rng() % (3 * cols + 20));
      lanes.add(e, p + e, n);
      e += n;
    }
    std::vector<float> got(static_cast<size_t>(cols));
    lanes.finish(got.data());
    EXPECT_EQ(got, reference(x, 1, 2)) << cols << " columns";
  }
}

}  // namespace
}  // namespace torch_tpu::runtime::host
