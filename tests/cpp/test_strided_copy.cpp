// The host runtime's own strided copies (runtime/host/strided_copy.h) against ATen's copy_.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "runtime/host/strided_copy.h"

namespace torch_tpu::runtime::host {
namespace {

// Copies src into a fresh tensor laid out like `like` (its strides) and compares with ATen.
void expect_copy(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor want = dst.clone();
  want.copy_(src);
  copy_into(dst, src);
  EXPECT_TRUE(at::equal(dst, want)) << src.sizes() << " " << src.strides() << " -> " << dst.strides();
}

TEST(StridedCopy, LayoutsAndDtypes) {
  for (auto dtype : {at::kByte, at::kHalf, at::kFloat, at::kDouble, at::kComplexDouble}) {
    const at::Tensor x = at::randn({4, 5, 6}).to(dtype);
    // Contiguous, transposed source, transposed destination, a sliced and a broadcast source.
    expect_copy(x, at::empty({4, 5, 6}, x.options()));
    expect_copy(x.permute({2, 0, 1}), at::empty({6, 4, 5}, x.options()));
    expect_copy(x, at::empty({6, 5, 4}, x.options()).permute({2, 1, 0}));
    expect_copy(x.slice(2, 1, 6, 2), at::empty({4, 5, 3}, x.options()));
    expect_copy(x.select(0, 1).select(0, 2).expand({3, 4, 6}), at::empty({3, 4, 6}, x.options()));
    expect_copy(x.select(0, 0).select(0, 0).select(0, 0), at::empty({}, x.options()));  // 0-d
    expect_copy(x.narrow(0, 0, 0), at::empty({0, 5, 6}, x.options()));                  // empty
  }
}

TEST(StridedCopy, ReshapedCopyKeepsRowMajorOrder) {
  const at::Tensor x = at::randn({8, 4, 32, 16});
  const at::Tensor t = x.transpose(1, 2);  // [8, 32, 4, 16]: a reshape to [8, 32, 64] copies
  const at::Tensor got = reshaped_copy(t, {8, 32, 64});
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_TRUE(at::equal(got, t.reshape({8, 32, 64})));
}

TEST(StridedCopy, ReadLogicalReadsAnyPieceInRowMajorOrder) {
  const at::Tensor x = at::randn({3, 4, 5});
  // Transposed, sliced, broadcast (stride 0 inner and outer) and 0-d operands.
  const at::Tensor cases[] = {x,
                              x.permute({2, 0, 1}),
                              x.slice(2, 1, 5, 2),
                              x.select(2, 0).unsqueeze(2).expand({3, 4, 7}),
                              x.select(0, 1).expand({6, 4, 5}),
                              x.select(0, 0).select(0, 0).select(0, 0)};
  for (const at::Tensor& t : cases) {
    const at::Tensor want = t.contiguous().reshape({-1});
    const int64_t n = want.numel();
    for (int64_t pos : {int64_t{0}, int64_t{1}, n / 3, n - 1}) {
      for (int64_t len : {int64_t{1}, int64_t{7}, n - pos}) {
        if (pos + len > n) continue;
        std::vector<float> got(static_cast<size_t>(len));
        read_logical(t, pos, len, got.data());
        for (int64_t i = 0; i < len; ++i) {
          ASSERT_EQ(got[static_cast<size_t>(i)], want[pos + i].item<float>()) << t.sizes() << " " << t.strides();
        }
      }
    }
  }
}

}  // namespace
}  // namespace torch_tpu::runtime::host
