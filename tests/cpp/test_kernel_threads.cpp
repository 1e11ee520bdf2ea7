// Kernel threads (runtime/host/kernel_threads.h): run_split runs every part once and rethrows a
// helper's exception; large elementwise nodes run split on a single-threaded caller (as on a
// stream worker) and give exactly ATen's results.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "graph_helpers.h"
#include "host_helpers.h"
#include "ir/ops.h"
#include "runtime/host/kernel_threads.h"

namespace torch_tpu::runtime {
namespace {

using torch_tpu::testing::compile_host;
using torch_tpu::testing::fresh_targets;
using torch_tpu::testing::Program;
using torch_tpu::testing::tensor_binding;
using host::HostExecutable;
using ir::DType;
using ir::OpKind;

// Runs fn on a fresh thread with one OpenMP thread, like a stream worker.
template <typename F>
void on_single_threaded_worker(F fn) {
  std::exception_ptr err;
  std::thread t([&] {
    // libgomp's per-thread setting (loaded through libtorch_cpu, not linked by this binary).
    auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    ASSERT_NE(set_threads, nullptr);
    set_threads(1);
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
  EXPECT_THROW(on_single_threaded_worker([&] { exe.run({tensor_binding(xv), tensor_binding(yv)}, targets, {}); }),
               c10::Error);
}

}  // namespace
}  // namespace torch_tpu::runtime
