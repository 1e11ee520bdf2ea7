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
// (fusion.h) split their tiles too, passing elements x half their instruction count as the
// size, since each element costs several operations there; contractions (kernels_contract.cpp)
// split by batch or rows, passing multiply-adds / 64. Callers that already
// have ATen intra-op threads (the Python thread running a program inline) never split.
// Threads per kernel, the caller included: TORCH_TPU_HOST_KERNEL_THREADS (default 2, at most
// the number of CPUs; 1 turns splitting off).
//
// Thread safety: run_split may be called from any thread. One split runs at a time; a caller
// that finds the helpers busy (another stream's worker) runs every part itself. Helpers run
// each part under the caller's ATen thread-local state (dispatch key exclusions, grad mode).
#pragma once

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

// How many parts the calling thread should split a kernel of `numel` output elements into:
// 1 when the kernel is small, the caller runs ATen with several OpenMP threads, or splitting
// is off.
int split_parts(int64_t numel);
// The same, for a kernel whose parts are blocks of `rows` rows: never more parts than rows.
int split_parts(int64_t numel, int64_t rows);

// Runs fn(0), ..., fn(parts - 1) and returns when all have finished: part 0 on the calling
// thread, the others on helper threads (or all on the caller when the helpers are busy).
// Rethrows the first exception a part threw.
void run_split(int parts, const std::function<void(int part)>& fn);
// run_split over rows [0, rows) cut into `parts` contiguous blocks: fn(lo, hi) per block.
void run_split_rows(int parts, int64_t rows, const std::function<void(int64_t lo, int64_t hi)>& fn);

// Splits that ran with helper threads since the process started (tests).
uint64_t splits_with_helpers();

}  // namespace torch_tpu::runtime::host
