// Kernel threads: splitting large kernels across the host runtime's own threads.
//
// Design: a stream worker runs ATen with one OpenMP thread (device/stream.cpp: a second
// OpenMP team spin-waits between parallel regions and steals the core the Python thread
// dispatches on). Large elementwise kernels are memory-bound loops that still run faster on
// two cores than on one, so the host runtime splits them itself: the calling thread runs
// part 0 and hands the other parts to helper threads, which sleep on a condition variable
// when idle (they never spin, so they cost nothing between kernels). Only kernels of at least
// kSplitMinElements elements split: below that the hand-off (a futex wake-up of a sleeping
// thread, several µs on a VM) costs about what the second thread saves. Fused clusters
// (tile_cluster.h) split their tiles too, passing elements x half their instruction count as the
// size, since each element costs several operations there; contractions (kernels_contract.cpp)
// split by batch or rows, passing multiply-adds / 64. Callers that already
// have ATen intra-op threads (the Python thread running a program inline) never split.
// Threads per kernel, the caller included: TORCH_TPU_HOST_KERNEL_THREADS (default 2, at most
// the number of CPUs; 1 turns splitting off).
//
// Waiting threads: a thread blocked in a stream wait (the Python thread at `.item()`, a host
// read or a synchronize) has an idle core while the stream's worker runs the work it waits
// for. help_while_waiting() lends that core: the thread spins instead of sleeping and runs work
// the worker offers (HelpOffer): whole steps of a program that do not depend on each other
// (HostExecutable::run) and the parts of split kernels: run_split hands them to a waiting thread
// rather than to a sleeping helper, which would compete with the spinning one for the cores,
// and while a thread waits, split_parts cuts kernels from kSharedSplitMinElements (mid-sized
// clusters, contractions, elementwise kernels) as well. Spinning hands work over with a
// cache-line transfer (~0.1 us)
// where waking a sleeping helper is a futex call (several us on a VM), so much smaller work is
// worth sharing; and it only uses a core whose thread would otherwise sleep, never the one the
// Python thread dispatches on (spinning helpers that competed with it made a TinyGPT step 1.3x
// slower). A waiter that finds nothing offered for TORCH_TPU_HOST_HELP_SPIN_US sleeps as
// before; 0 turns helping off. Parts and steps compute the same values on either thread.
//
// Thread safety: run_split may be called from any thread. One split runs at a time; a caller
// that finds the helpers busy (another stream's worker) runs every part itself. Helpers run
// each part under the caller's ATen thread-local state (dispatch key exclusions, grad mode).
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <functional>

namespace torch_tpu::runtime::host {

// The smallest kernel (output elements) worth splitting: 128K elements (512 KiB of float).
constexpr int64_t kSplitMinElements = int64_t{128} << 10;
// What one output element of an elementwise kernel weighs in BLAS / oneDNN multiply-adds, for
// contractions' sizes (kernels_contract.cpp): products split from 8M multiply-adds. Measured:
// GPT-2-width products (12M-450M) ran 1.35x faster split; TinyGPT's (1M-4M) 7% slower when
// split from 1M, and no slower from 8M.
constexpr int64_t kMultiplyAddsPerElement = 64;
// The smallest kernel that splits while a thread waits for the stream (see "Waiting threads"):
// 8K elements (512K multiply-adds), since the hand-off to a spinning thread costs ~0.1 us.
constexpr int64_t kSharedSplitMinElements = int64_t{8} << 10;

// How many parts the calling thread should split a kernel of `numel` output elements into:
// 1 when the kernel is small (below kSplitMinElements, or kSharedSplitMinElements while a
// thread waits for the stream), the caller runs ATen with several OpenMP threads, or splitting
// is off.
int split_parts(int64_t numel);
// The same, for a kernel whose parts are blocks of `rows` rows: never more parts than rows.
int split_parts(int64_t numel, int64_t rows);

// Runs fn(0), ..., fn(parts - 1) and returns when all have finished. Parts are claimed by
// whichever thread is free: the caller and up to split_parts(...) - 1 helper or waiting
// threads (all on the caller when the helpers are busy). Rethrows the first exception a part
// threw.
void run_split(int parts, const std::function<void(int part)>& fn);
// run_split over rows [0, rows) cut into `parts` contiguous blocks: fn(lo, hi) per block.
void run_split_rows(int parts, int64_t rows, const std::function<void(int64_t lo, int64_t hi)>& fn);
// fn(lo, hi) over units [0, units) of `unit_elements` elements each, for a kernel of `work`
// elements (split_parts' measure): on the kernel threads when split_parts(work, units) cuts
// it (a stream worker), else through at::parallel_for (ATen's intra-op threads: the Python
// thread; serial on a stream worker). Sums whose blocks must stay on one thread pass blocks.
// A template: the unsplit path calls fn without wrapping it in a std::function (an allocation).
template <typename Fn>
void parallel_units(int64_t work, int64_t units, int64_t unit_elements, const Fn& fn) {
  if (const int parts = split_parts(work, units); parts > 1) return run_split_rows(parts, units, fn);
  at::parallel_for(0, units, std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(unit_elements, 1)), fn);
}

// Kernels split into parts for helper or waiting threads since the process started (tests).
uint64_t splits_with_helpers();

// One iteration of a spin-wait: tells the core to ease off (x86 `pause`).
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// Work a thread blocked in a stream wait may run (see "Waiting threads" above).
class HelpOffer {
 public:
  virtual ~HelpOffer() = default;
  // Runs some of the offered work on the calling (waiting) thread; true if it ran any. Must
  // not throw: errors are kept for the offering thread.
  virtual bool help() = 0;
};

// Publishes `offer` to waiting threads for the scope's lifetime, if the slot is free (one
// offer per slot: the stream workers of other devices run without). The destructor withdraws
// it and returns once no waiting thread is inside offer->help().
class OfferScope {
 public:
  enum Slot { kKernelParts, kProgramSteps, kNumSlots };
  OfferScope(Slot slot, HelpOffer* offer);
  ~OfferScope();
  OfferScope(const OfferScope&) = delete;
  OfferScope& operator=(const OfferScope&) = delete;
  bool published() const { return published_; }

 private:
  Slot slot_;
  bool published_ = false;
};

// Threads now waiting and willing to help (a hint; it changes at any time).
int waiting_helpers();
// Whether waiting threads help at all (TORCH_TPU_HOST_HELP_SPIN_US > 0).
bool help_while_waiting_enabled();

// For a thread about to block until done() holds: spins, running offered work, until done()
// holds (returns true) or nothing was offered for the spin limit (returns false: block as
// before). Offered work runs with a fresh thread's dispatch state, one OpenMP/MKL thread and
// no further splitting. done() must be cheap and thread-safe.
bool help_while_waiting(const std::function<bool()>& done);

// Work items waiting threads ran since the process started (tests, metrics).
uint64_t work_run_by_waiting_threads();

}  // namespace torch_tpu::runtime::host
