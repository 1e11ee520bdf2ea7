// Scatters into their own operand (`cache.index_put_(...)`, `index_copy_`): the host executor
// writes them in place when only the scatter reads the operand (host_plan.cpp,
// plan_in_place_scatters), and computes them aside otherwise.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "graph_helpers.h"
#include "host_helpers.h"
#include "runtime/host/scratch_allocator.h"
#include "runtime/runtime.h"

namespace torch_tpu::runtime {
namespace {

using ir::DType;
using ir::OpKind;
using ir::ScatterMode;
using torch_tpu::testing::compile_host;
using torch_tpu::testing::Program;
using torch_tpu::testing::tensor_binding;

// [64, 2048] f32 (512 KiB: scratch-sized) seen as [128, 1024] rows, as index_put's lowering sees
// a cache: x -> reshape -> scatter of whole rows (index broadcast along the row) -> reshape.
constexpr int64_t kRows = 128, kWidth = 1024;

struct RowScatter {
  Program p;
  int32_t x, scatter, out;
  int32_t twice = -1;  // x + x, placed before the scatter
};

RowScatter row_scatter(ScatterMode mode, int64_t n, bool read_twice = false) {
  RowScatter r;
  Program& p = r.p;
  r.x = p.param(0, DType::kF32, {64, 2048});
  if (read_twice) r.twice = p.add(OpKind::kAdd, DType::kF32, {64, 2048}, {r.x, r.x});
  const int32_t rows = p.add(OpKind::kReshape, DType::kF32, {kRows, kWidth}, {r.x});
  const int32_t idx = p.param(1, DType::kI64, {n});
  const int32_t idxb = p.add(OpKind::kBroadcastInDim, DType::kI64, {n, kWidth}, {idx}, {0});
  const int32_t upd = p.param(2, DType::kF32, {n, kWidth});
  r.scatter = p.add(OpKind::kScatter, DType::kF32, {kRows, kWidth}, {rows, idxb, upd}, {0, static_cast<int64_t>(mode)});
  r.out = p.add(OpKind::kReshape, DType::kF32, {64, 2048}, {r.scatter});
  return r;
}

uint64_t scratch_requests() {
  const host::ScratchStats s = host::scratch_stats();
  return s.hits + s.misses;
}

TEST(HostScatterInPlace, ScatterIntoItsOperandWritesOnlyTheIndexedRows) {
  for (bool fuse : {false, true}) {
    for (ScatterMode mode : {ScatterMode::kReplace, ScatterMode::kAdd}) {
      RowScatter r = row_scatter(mode, 4);
      auto exe = compile_host(r.p, {r.out}, fuse);
      at::Tensor cache = at::randn({64, 2048});
      // Row 5 twice: replace keeps one of its two rows (both equal here, as CPU's index_put_
      // leaves the winner unspecified), add sums both.
      at::Tensor idx = at::tensor({5, 17, 5, 127}, at::kLong);
      at::Tensor upd = at::randn({4, kWidth});
      upd[2].copy_(upd[0]);
      at::Tensor want = cache.view({kRows, kWidth}).clone();
      if (mode == ScatterMode::kReplace) {
        want.index_put_({idx}, upd);
      } else {
        want.index_add_(0, idx, upd);
      }
      const uint64_t before = scratch_requests();
      exe.run({tensor_binding(cache), tensor_binding(idx), tensor_binding(upd)}, {{r.out, tensor_binding(cache)}}, {});
      EXPECT_EQ(scratch_requests(), before) << "computed aside (fuse " << fuse << ")";
      EXPECT_TRUE(at::equal(cache.view({kRows, kWidth}), want)) << "fuse " << fuse;
    }
  }
}

TEST(HostScatterInPlace, AFreshDestinationTakesTheOperandThenTheRows) {
  RowScatter r = row_scatter(ScatterMode::kReplace, 2);
  auto exe = compile_host(r.p, {r.out}, true);
  at::Tensor cache = at::randn({64, 2048}), dest = at::zeros({64, 2048});
  at::Tensor idx = at::tensor({0, 9}, at::kLong), upd = at::randn({2, kWidth});
  at::Tensor want = cache.view({kRows, kWidth}).index_put({idx}, upd).view({64, 2048});
  const at::Tensor old = cache.clone();
  const uint64_t before = scratch_requests();
  exe.run({tensor_binding(cache), tensor_binding(idx), tensor_binding(upd)}, {{r.out, tensor_binding(dest)}}, {});
  EXPECT_EQ(scratch_requests(), before);  // written into the destination, not aside
  EXPECT_TRUE(at::equal(dest, want));
  EXPECT_TRUE(at::equal(cache, old));
}

TEST(HostScatterInPlace, AnOperandReadElsewhereIsComputedAside) {
  // The program also returns 2 * x, which needs the old contents. Placed before the scatter, it
  // is read first (a run shared with a waiting thread keeps that order only for a scatter
  // computed aside, hence not in place); placed after it, the caller binds the cache as a
  // snapshot (executor.h), which is no longer the destination's own memory.
  for (bool later : {false, true}) {
    RowScatter r = row_scatter(ScatterMode::kReplace, 2, !later);
    if (later) r.twice = r.p.add(OpKind::kAdd, DType::kF32, {64, 2048}, {r.x, r.x});
    for (bool fuse : {false, true}) {
      auto exe = compile_host(r.p, {r.out, r.twice}, fuse);
      at::Tensor cache = at::randn({64, 2048}), got_twice = at::empty({64, 2048});
      at::Tensor idx = at::tensor({3, 3}, at::kLong), upd = at::randn({2, kWidth});
      upd[1].copy_(upd[0]);
      const at::Tensor want_twice = cache + cache;
      const at::Tensor want = cache.view({kRows, kWidth}).index_put({idx}, upd).view({64, 2048});
      exe.run({tensor_binding(cache, /*snapshot=*/later), tensor_binding(idx), tensor_binding(upd)},
              {{r.out, tensor_binding(cache)}, {r.twice, tensor_binding(got_twice)}}, {});
      EXPECT_TRUE(at::equal(cache, want)) << "later " << later << " fuse " << fuse;
      EXPECT_TRUE(at::equal(got_twice, want_twice)) << "later " << later << " fuse " << fuse;
    }
  }
}

TEST(HostScatterInPlace, ADestinationThatIsNotExactlyTheOperandIsComputedAside) {
  // The operand binding is the cache, the destination its transpose (same memory, other
  // element order): in place would read rows already overwritten.
  RowScatter r = row_scatter(ScatterMode::kReplace, 1);
  auto exe = compile_host(r.p, {r.out}, false);
  at::Tensor base = at::randn({2048, 64});
  at::Tensor cache = base.t();  // [64, 2048], strides (1, 64)
  at::Tensor idx = at::tensor({1}, at::kLong), upd = at::randn({1, kWidth});
  at::Tensor want = cache.contiguous().view({kRows, kWidth}).index_put({idx}, upd).view({64, 2048});
  at::Tensor dest = base.view({64, 2048});  // the same bytes, row-major
  exe.run({tensor_binding(cache), tensor_binding(idx), tensor_binding(upd)}, {{r.out, tensor_binding(dest)}}, {});
  EXPECT_TRUE(at::equal(dest, want));
}

}  // namespace
}  // namespace torch_tpu::runtime
