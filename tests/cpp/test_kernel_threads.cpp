// Kernel threads (runtime/host/kernel_threads.h): run_split runs every part once and rethrows a
// helper's exception; large elementwise nodes and contractions run split on a single-threaded
// caller (as on a stream worker) and give ATen's results.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "graph_helpers.h"
#include "host_helpers.h"
#include "ir/ops.h"
#include "runtime/host/kernel_threads.h"

namespace torch_tpu::runtime {
namespace {

using host::HostExecutable;
using namespace torch_tpu::testing;  // Program, DType, OpKind, tensor_binding, ... (*_helpers.h)

// Runs fn on a fresh thread with one OpenMP thread, like a stream worker.
template <typename F>
void on_single_threaded_worker(F fn) {
  std::exception_ptr err;
  std::thread t([&] {
    torch_tpu::testing::use_one_openmp_thread();
    try {
      fn();
    } catch (...) {
      err = std::current_exception();
    }
  });
  t.join();
  if (err) std::rethrow_exception(err);
}

TEST(KernelThreads, RunSplitRunsEveryPartOnce) {
  std::atomic<int> mask{0};
  std::atomic<int> calls{0};
  host::run_split(2, [&](int part) {
    mask |= 1 << part;
    calls++;
  });
  EXPECT_EQ(mask.load(), 3);
  EXPECT_EQ(calls.load(), 2);
}

// Parts are claimed by whichever thread is free: more parts than threads run once each, on
// no more threads than TORCH_TPU_HOST_KERNEL_THREADS (2 by default), the caller included.
TEST(KernelThreads, PartsAreClaimedByTheThreadsThereAre) {
  constexpr int kParts = 16;
  std::vector<std::thread::id> ran_on(kParts);
  std::atomic<int> calls{0};
  host::run_split(kParts, [&](int part) {
    ran_on[static_cast<size_t>(part)] = std::this_thread::get_id();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    calls++;
  });
  EXPECT_EQ(calls.load(), kParts);
  std::set<std::thread::id> threads(ran_on.begin(), ran_on.end());
  EXPECT_LE(threads.size(), 2u);
  EXPECT_TRUE(threads.count(std::this_thread::get_id()));  // the caller took parts too
  EXPECT_FALSE(threads.count(std::thread::id()));          // every part ran
}

TEST(KernelThreads, RunSplitRethrowsAHelpersException) {
  EXPECT_THROW(host::run_split(2,
                               [](int part) {
                                 if (part == 1) throw std::runtime_error("part 1 failed");
                               }),
               std::runtime_error);
  // The pool is usable afterwards.
  std::atomic<int> calls{0};
  host::run_split(2, [&](int) { calls++; });
  EXPECT_EQ(calls.load(), 2);
}

TEST(KernelThreads, SmallOrMultiThreadedCallersDoNotSplit) {
  EXPECT_EQ(host::split_parts(host::kSplitMinElements - 1), 1);
  on_single_threaded_worker([] {
    if (std::thread::hardware_concurrency() >= 2) {
      EXPECT_EQ(host::split_parts(host::kSplitMinElements), 2);
    }
  });
}

TEST(KernelThreads, LargeElementwiseNodesSplitAndMatchAten) {
  // 513 rows: the blocks are uneven; 153,900 elements is above the split threshold.
  const std::vector<int64_t> shape{513, 300};
  Program p;
  int32_t x = p.param(0, DType::kF32, shape);
  int32_t y = p.param(1, DType::kF32, shape);
  int32_t sum = p.add(OpKind::kAdd, DType::kF32, shape, {x, y});
  int32_t prod = p.add(OpKind::kMul, DType::kF32, shape, {sum, y});
  int32_t ex = p.add(OpKind::kExp, DType::kF32, shape, {x});
  int32_t lt = p.add(OpKind::kCompare, DType::kBool, shape, {x, y}, {static_cast<int64_t>(ir::CompareDir::kLt)});
  int32_t sel = p.add(OpKind::kSelect, DType::kF32, shape, {lt, x, prod});
  int32_t half = p.add(OpKind::kConvert, DType::kBF16, shape, {sel});
  const std::vector<int32_t> outputs{sum, prod, ex, lt, sel, half};
  HostExecutable exe = compile_host(p, outputs, /*fuse=*/false);  // every node is its own kernel step
  at::Tensor xv = at::randn(shape), yv = at::randn(shape);
  std::vector<at::Tensor> got;
  const std::vector<OutputTarget> targets = fresh_targets(p, outputs, &got);
  const uint64_t before = host::splits_with_helpers();
  on_single_threaded_worker([&] { exe.run({tensor_binding(xv), tensor_binding(yv)}, targets, {}); });
  if (std::thread::hardware_concurrency() >= 2) {
    EXPECT_GE(host::splits_with_helpers() - before, outputs.size());
  }
  at::Tensor want_sum = xv + yv, want_prod = want_sum * yv, want_lt = xv < yv;
  at::Tensor want_sel = at::where(want_lt, xv, want_prod);
  EXPECT_TRUE(at::equal(got[0], want_sum));
  EXPECT_TRUE(at::equal(got[1], want_prod));
  EXPECT_TRUE(at::equal(got[2], at::exp(xv)));
  EXPECT_TRUE(at::equal(got[3], want_lt));
  EXPECT_TRUE(at::equal(got[4], want_sel));
  EXPECT_TRUE(at::equal(got[5], want_sel.to(at::kBFloat16)));
}

// A fused cluster with enough work splits its tiles across the kernel threads on a
// single-threaded caller, and gives the same bits as run whole (plain and row clusters).
TEST(KernelThreads, LargeClustersSplitTheirTiles) {
  const std::vector<int64_t> shape{1001, 97}, lead{1001};  // uneven tile ranges per part
  Program p;
  int32_t x = p.param(0, DType::kF32, shape);
  int32_t y = p.param(1, DType::kF32, shape);
  int32_t t = p.add(OpKind::kTanh, DType::kF32, shape, {x});
  int32_t prod = p.add(OpKind::kMul, DType::kF32, shape, {t, y});
  int32_t sum = p.add(OpKind::kAdd, DType::kF32, shape, {prod, x});
  int32_t rowmax = p.add(OpKind::kReduce, DType::kF32, lead, {sum}, {static_cast<int64_t>(ir::ReduceKind::kMax), 1});
  int32_t bm = p.add(OpKind::kBroadcastInDim, DType::kF32, shape, {rowmax}, {0});
  int32_t centered = p.add(OpKind::kSub, DType::kF32, shape, {sum, bm});
  const std::vector<int32_t> outputs{centered, rowmax};
  HostExecutable exe = compile_host(p, outputs, /*fuse=*/true);
  ASSERT_GE(exe.stats().clusters, 1) << exe.describe();
  at::Tensor xv = at::randn(shape), yv = at::randn(shape);
  std::vector<at::Tensor> split, whole;
  const std::vector<OutputTarget> split_targets = fresh_targets(p, outputs, &split);
  const std::vector<OutputTarget> whole_targets = fresh_targets(p, outputs, &whole);
  const uint64_t before = host::splits_with_helpers();
  on_single_threaded_worker([&] { exe.run({tensor_binding(xv), tensor_binding(yv)}, split_targets, {}); });
  if (std::thread::hardware_concurrency() >= 2) {
    EXPECT_GE(host::splits_with_helpers() - before, 1u);
  }
  exe.run({tensor_binding(xv), tensor_binding(yv)}, whole_targets, {});  // this thread: ATen's threads, no split
  EXPECT_TRUE(at::equal(split[0], whole[0]));
  EXPECT_TRUE(at::equal(split[1], whole[1]));
  // Against ATen (tanh may differ from ATen's kernel in the last bit; max and sub are exact).
  at::Tensor want_sum = at::tanh(xv) * yv + xv, want_max = std::get<0>(want_sum.max(1));
  EXPECT_TRUE(at::allclose(split[1], want_max, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(split[0], want_sum - want_max.unsqueeze(1), 1e-5, 1e-6));
}

// Large contractions split by rows (one matrix) or by batch on a single-threaded caller.
TEST(KernelThreads, LargeContractionsSplitAndMatchAten) {
  Program p;
  int32_t x = p.param(0, DType::kF32, {301, 700});  // 301 rows: uneven blocks
  int32_t w = p.param(1, DType::kF32, {700, 157});
  int32_t mm = p.add(OpKind::kDotGeneral, DType::kF32, {301, 157}, {x, w}, {0, 1, 1, 0});
  int32_t bx = p.param(2, DType::kF32, {5, 100, 300});
  int32_t bw = p.param(3, DType::kF32, {5, 300, 90});
  int32_t bmm = p.add(OpKind::kDotGeneral, DType::kF32, {5, 100, 90}, {bx, bw}, {1, 0, 0, 1, 2, 1});
  const std::vector<int32_t> outputs{mm, bmm};
  HostExecutable exe = compile_host(p, outputs, /*fuse=*/true);
  at::Tensor xv = at::randn({301, 700}), wv = at::randn({700, 157});
  at::Tensor bxv = at::randn({5, 100, 300}), bwv = at::randn({5, 300, 90});
  std::vector<at::Tensor> got;
  const std::vector<OutputTarget> targets = fresh_targets(p, outputs, &got);
  const uint64_t before = host::splits_with_helpers();
  on_single_threaded_worker([&] {
    exe.run({tensor_binding(xv), tensor_binding(wv), tensor_binding(bxv), tensor_binding(bwv)}, targets, {});
  });
  if (std::thread::hardware_concurrency() >= 2) {
    EXPECT_GE(host::splits_with_helpers() - before, 2u);
  }
  // Each block is its own BLAS call, which may order a dot product's sums differently from
  // ATen's call on the whole matrix: float rounding only.
  EXPECT_TRUE(at::allclose(got[0], at::mm(xv, wv), 1e-4, 1e-4));
  EXPECT_TRUE(at::allclose(got[1], at::bmm(bxv, bwv), 1e-4, 1e-4));
}

TEST(KernelThreads, ErrorInAHelpersBlockReachesTheCaller) {
  // Integer division by zero only in the last row: the helper's block raises.
  const std::vector<int64_t> shape{512, 512};
  Program p;
  int32_t x = p.param(0, DType::kI32, shape);
  int32_t y = p.param(1, DType::kI32, shape);
  int32_t q = p.add(OpKind::kDiv, DType::kI32, shape, {x, y});
  HostExecutable exe = compile_host(p, {q}, /*fuse=*/false);
  at::Tensor xv = at::ones(shape, at::kInt), yv = at::ones(shape, at::kInt);
  yv[511][7] = 0;
  at::Tensor got = at::empty(shape, at::kInt);
  std::vector<OutputTarget> targets{{q, tensor_binding(got)}};
  EXPECT_THROW(on_single_threaded_worker([&] {
                 exe.run({tensor_binding(xv), tensor_binding(yv)}, targets, {});
               }),
               c10::Error);
}

}  // namespace
}  // namespace torch_tpu::runtime
