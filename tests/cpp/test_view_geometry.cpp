// Fused mode's view geometry (exec/view_geometry.h): strided reads of a stored value as IR views.
#include <gtest/gtest.h>

#include <vector>

#include "exec/view_geometry.h"

namespace torch_tpu::exec::fusion {
namespace {

using ir::DType;
using ir::OpKind;

TEST(ViewGeometry, TransposedReadIsReshapesThenATranspose) {
  std::vector<ir::Node> out;
  // A [2, 3] value read as its transpose: sizes [3, 2], strides [1, 3].
  ASSERT_TRUE(express_view(0, {2, 3}, DType::kF32, 0, {3, 2}, {1, 3}, out));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].kind, OpKind::kReshape);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(out[3].kind, OpKind::kTranspose);
  EXPECT_EQ(out[3].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(out[3].iattrs, (std::vector<int64_t>{1, 0}));
  for (const ir::Node& n : out) EXPECT_EQ(n.operands, std::vector<int32_t>{-1});
}

TEST(ViewGeometry, BroadcastRowIsASliceThenABroadcast) {
  std::vector<ir::Node> out;
  // Row 1 of a [2, 3] value, expanded to [4, 3] (stride 0).
  ASSERT_TRUE(express_view(0, {2, 3}, DType::kF32, 3, {4, 3}, {0, 1}, out));
  ASSERT_FALSE(out.empty());
  bool sliced = false;
  for (const ir::Node& n : out) sliced |= n.kind == OpKind::kSlice;
  EXPECT_TRUE(sliced);
  EXPECT_EQ(out.back().kind, OpKind::kBroadcastInDim);
  EXPECT_EQ(out.back().shape, (std::vector<int64_t>{4, 3}));
  // A write through a broadcast is no update of the value; through a plain row it is.
  EXPECT_FALSE(can_update(0, {2, 3}, 3, {4, 3}, {0, 1}));
  EXPECT_TRUE(can_update(0, {2, 3}, 3, {3}, {1}));
}

TEST(ViewGeometry, ReadsNoChainExpresses) {
  std::vector<ir::Node> out;
  EXPECT_FALSE(express_view(0, {6}, DType::kF32, 5, {3}, {-1}, out));  // negative stride
  EXPECT_FALSE(express_view(0, {6}, DType::kF32, 4, {3}, {1}, out));   // past the end
}

TEST(ViewGeometry, DenseOrderOfATransposedLayout) {
  std::vector<int64_t> perm;
  EXPECT_TRUE(dense_order({2, 3}, {1, 2}, perm));  // [2, 3] stored column-major
  EXPECT_EQ(perm, (std::vector<int64_t>{1, 0}));
  EXPECT_FALSE(dense_order({2, 3}, {1, 3}, perm));  // a gap
  EXPECT_TRUE(is_contiguous({2, 1, 3}, {3, 7, 1}));  // size-1 dims carry any stride
}

}  // namespace
}  // namespace torch_tpu::exec::fusion
