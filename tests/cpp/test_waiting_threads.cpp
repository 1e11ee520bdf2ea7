// Waiting threads (runtime/host/kernel_threads.h, "Waiting threads"): a thread blocked until a
// stream worker finishes runs kernel parts and independent program steps the worker offers.
// Each test runs the work on a single-threaded worker thread while the test's own thread waits
// in help_while_waiting, as the Python thread does at `.item()`, and checks the values against
// ATen, that the waiting thread really ran some of the work, and that errors and program order
// survive the sharing.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>

#include "graph_helpers.h"
#include "host_helpers.h"
#include "ir/ops.h"
#include "runtime/host/kernel_threads.h"

namespace torch_tpu::runtime {
namespace {

using host::HostExecutable;
using namespace torch_tpu::testing;  // Program, DType, OpKind, tensor_binding, ... (*_helpers.h)

// Runs `work` on a fresh thread with one OpenMP thread (a stream worker) that starts once this
// thread is waiting for it; this thread helps until the work is done. Returns how many work
// items the waiting threads ran meanwhile; rethrows the work's exception.
uint64_t run_while_this_thread_waits(const std::function<void()>& work) {
  const uint64_t before = host::work_run_by_waiting_threads();
  std::atomic<bool> finished{false};
  std::exception_ptr err;
  std::thread worker([&] {
    torch_tpu::testing::use_one_openmp_thread();
    while (host::waiting_helpers() == 0) std::this_thread::yield();
    try {
      work();
    } catch (...) {
      err = std::current_exception();
    }
    finished = true;
  });
  // help_while_waiting gives up after the spin limit without offers; wait again, as a stream does.
  while (!host::help_while_waiting([&] { return finished.load(); })) {
  }
  worker.join();
  if (err) std::rethrow_exception(err);
  return host::work_run_by_waiting_threads() - before;
}

TEST(WaitingThreads, TakeTheOtherPartOfAKernel) {
  ASSERT_TRUE(host::help_while_waiting_enabled()) << "TORCH_TPU_HOST_HELP_SPIN_US=0 turns helping off";
  const auto waiter = std::this_thread::get_id();
  std::thread::id ran_on[2];
  const uint64_t helped = run_while_this_thread_waits([&] {
    // Mid-sized work splits only while a thread waits (and never otherwise).
    const int parts = host::split_parts(host::kSplitMinElements / 2, 64);
    ASSERT_EQ(parts, 2);
    host::run_split_rows(parts, 64, [&](int64_t lo, int64_t) {
      ran_on[lo == 0 ? 0 : 1] = std::this_thread::get_id();
      // Long enough that the waiting thread claims the second part while the first runs.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
  });
  EXPECT_NE(ran_on[0], waiter);
  EXPECT_EQ(ran_on[1], waiter);
  EXPECT_GE(helped, 1u);
  EXPECT_EQ(host::split_parts(host::kSplitMinElements / 2, 64), 1);  // nobody waits now
}

TEST(WaitingThreads, KernelPartErrorsReachTheWorker) {
  EXPECT_THROW(run_while_this_thread_waits([] {
                 host::run_split_rows(2, 2, [](int64_t lo, int64_t) {
                   std::this_thread::sleep_for(std::chrono::milliseconds(5));
                   if (lo == 1) throw std::runtime_error("part 1 failed");
                 });
               }),
               std::runtime_error);
}

// Two independent chains of unfused elementwise steps over `shape`, joined at the end.
struct TwoChains {
  Program p;
  int32_t a, b, joined;
  TwoChains(const std::vector<int64_t>& shape, int steps) {
    const int32_t x = p.param(0, DType::kF32, shape);
    const int32_t y = p.param(1, DType::kF32, shape);
    a = x;
    b = y;
    for (int i = 0; i < steps; ++i) {
      a = p.add(OpKind::kAdd, DType::kF32, shape, {p.add(OpKind::kMul, DType::kF32, shape, {a, x}), x});
      b = p.add(OpKind::kAdd, DType::kF32, shape, {p.add(OpKind::kMul, DType::kF32, shape, {b, y}), y});
    }
    joined = p.add(OpKind::kAdd, DType::kF32, shape, {a, b});
  }
};

TEST(WaitingThreads, RunIndependentStepsOfAProgram) {
  const std::vector<int64_t> shape{64, 64};  // small steps: the waiting thread may take them
  const int steps = 100;
  TwoChains c(shape, steps);
  HostExecutable exe = compile_host(c.p, {c.a, c.joined}, /*fuse=*/false);
  const at::Tensor x = at::rand(shape), y = at::rand(shape);
  at::Tensor ea = x, eb = y;
  for (int i = 0; i < steps; ++i) {
    ea = ea * x + x;
    eb = eb * y + y;
  }
  // The waiting thread needs a core of its own while the worker runs the program: on a loaded
  // machine (a build beside the tests) many rounds may find none, so one round in 200 suffices
  // (a round is well under a millisecond; 20 rounds still failed under a load of 5).
  int rounds_helped = 0;
  for (int round = 0; round < 200 && (round < 3 || rounds_helped == 0); ++round) {
    std::vector<at::Tensor> got;
    const auto targets = fresh_targets(c.p, {c.a, c.joined}, &got);
    const uint64_t helped = run_while_this_thread_waits([&] {
      exe.run({tensor_binding(x), tensor_binding(y)}, targets, {});
    });
    rounds_helped += helped >= 1 ? 1 : 0;
    EXPECT_TRUE(at::equal(got[0], ea)) << "round " << round;
    EXPECT_TRUE(at::equal(got[1], ea + eb)) << "round " << round;
  }
  EXPECT_GE(rounds_helped, 1);
}

TEST(WaitingThreads, AnOutputOverwritingAnInputWaitsForItsEarlierReaders) {
  // A chain reading x at every step, then an output into x's own memory. The output's step is
  // ready at once; taken early, it would change what the chain reads.
  const std::vector<int64_t> shape{64, 64};
  Program p;
  const int32_t x = p.param(0, DType::kF32, shape);
  int32_t w = x;
  for (int i = 0; i < 60; ++i) w = p.add(OpKind::kAdd, DType::kF32, shape, {w, x});
  const int32_t twice = p.add(OpKind::kMul, DType::kF32, shape, {x, p.splat(DType::kF32, 2, shape)});
  HostExecutable exe = compile_host(p, {w, twice}, /*fuse=*/false);
  for (int round = 0; round < 5; ++round) {
    const at::Tensor start = at::rand(shape);
    at::Tensor xv = start.clone();
    at::Tensor sum = start.clone();
    for (int i = 0; i < 60; ++i) sum = sum + start;
    at::Tensor got = at::full(shape, 7.f);
    const std::vector<OutputTarget> targets{{w, tensor_binding(got)}, {twice, tensor_binding(xv)}};
    run_while_this_thread_waits([&] { exe.run({tensor_binding(xv)}, targets, {}); });
    EXPECT_TRUE(at::equal(got, sum)) << "round " << round;
    EXPECT_TRUE(at::equal(xv, start * 2)) << "round " << round;
  }
}

TEST(WaitingThreads, AStepFailingOnEitherThreadRaisesOnTheWorker) {
  // A bad gather index in one chain: whichever thread runs the gather, run() raises its error
  // with the node, and the executable runs again afterwards.
  const std::vector<int64_t> shape{64, 64};
  TwoChains c(shape, 40);
  const int32_t table = c.p.param(2, DType::kF32, {3});
  const int32_t index = c.p.param(3, DType::kI64, {2});
  const int32_t g = c.p.add(OpKind::kGather, DType::kF32, {2}, {table, index}, {0});
  HostExecutable exe = compile_host(c.p, {c.joined, g}, /*fuse=*/false);
  const at::Tensor x = at::rand(shape), y = at::rand(shape), t = at::tensor({1.f, 2.f, 3.f});
  for (int round = 0; round < 5; ++round) {
    const at::Tensor bad = at::tensor({int64_t{0}, int64_t{3}});
    std::vector<at::Tensor> got;
    const auto targets = fresh_targets(c.p, {c.joined, g}, &got);
    EXPECT_THROW(
        run_while_this_thread_waits([&] {
          try {
            exe.run({tensor_binding(x), tensor_binding(y), tensor_binding(t), tensor_binding(bad)}, targets, {});
          } catch (...) {
            EXPECT_EQ(last_failed_node(), g);
            throw;
          }
        }),
        c10::IndexError);
  }
  const at::Tensor ok = at::tensor({int64_t{2}, int64_t{0}});
  std::vector<at::Tensor> got;
  const auto targets = fresh_targets(c.p, {c.joined, g}, &got);
  run_while_this_thread_waits([&] {
    exe.run({tensor_binding(x), tensor_binding(y), tensor_binding(t), tensor_binding(ok)}, targets, {});
  });
  EXPECT_TRUE(at::equal(got[1], at::tensor({3.f, 1.f})));
}

}  // namespace
}  // namespace torch_tpu::runtime
