#include "runtime/host/kernel_threads.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "common/blocking_wait.h"
#include "common/config.h"

namespace torch_tpu::runtime::host {
namespace {

// omp_set_num_threads of the OpenMP runtime PyTorch loads (libgomp; a per-thread setting),
// looked up at run time: binaries that link the runtime without libgomp (tpu_cpp_tests) still
// load it through libtorch_cpu.
void set_omp_threads_of_this_thread(int n) {
  using Fn = void (*)(int);
  static const auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (fn != nullptr) fn(n);
}

// Threads per split kernel, the caller included (TORCH_TPU_HOST_KERNEL_THREADS, clamped).
int configured_threads() {
  static const int n = [] {
    const int64_t want = config::get_int("TORCH_TPU_HOST_KERNEL_THREADS");
    const int64_t cpus = std::max<int64_t>(1, std::thread::hardware_concurrency());
    return static_cast<int>(std::clamp<int64_t>(want, 1, cpus));
  }();
  return n;
}

// The helpers and the one split they may be working on (all fields under `mu`).
struct Pool {
  std::mutex busy;  // held by the caller of the split in progress
  std::mutex mu;
  std::condition_variable cv_start, cv_done;
  uint64_t generation = 0;  // bumped per split; a helper runs each generation at most once
  int parts = 0;
  int pending = 0;  // helper parts of this generation not yet finished
  const std::function<void(int)>* fn = nullptr;
  const at::ThreadLocalState* state = nullptr;
  std::exception_ptr error;
  int helpers = 0;         // started helper threads
  pid_t started_in = 0;    // helpers do not survive fork(): a child process runs splits serially
};

Pool& pool() {
  static auto* p = new Pool();  // leaked, like the helpers, which run until process exit
  return *p;
}

thread_local bool t_in_split = false;  // a part never splits again

void helper_loop(Pool& p, int part) {
  t_in_split = true;
  set_omp_threads_of_this_thread(1);  // its ATen kernels stay on this thread (see kernel_threads.h)
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lk(p.mu);
  for (;;) {
    p.cv_start.wait(lk, [&] { return p.generation != seen; });
    seen = p.generation;
    if (part >= p.parts) continue;  // this split has fewer parts
    const auto* fn = p.fn;
    const auto* state = p.state;
    lk.unlock();
    std::exception_ptr err;
    try {
      at::ThreadLocalStateGuard guard(*state);
      (*fn)(part);
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    if (err && !p.error) p.error = err;
    if (--p.pending == 0) p.cv_done.notify_one();
  }
}

std::atomic<uint64_t> g_splits{0};

void run_serially(int parts, const std::function<void(int)>& fn) {
  for (int i = 0; i < parts; ++i) fn(i);
}

}  // namespace

int split_parts(int64_t numel) {
  if (numel < kSplitMinElements || t_in_split) return 1;
  // The Python thread (programs run inline, debug mode) has ATen's own intra-op threads.
  if (at::get_num_threads() > 1 || at::in_parallel_region()) return 1;
  return configured_threads();
}

int split_parts(int64_t numel, int64_t rows) {
  return static_cast<int>(std::min<int64_t>(split_parts(numel), std::max<int64_t>(rows, 1)));
}

void run_split_rows(int parts, int64_t rows, const std::function<void(int64_t lo, int64_t hi)>& fn) {
  run_split(parts, [&](int part) { fn(rows * part / parts, rows * (part + 1) / parts); });
}

void run_split(int parts, const std::function<void(int part)>& fn) {
  Pool& p = pool();
  std::unique_lock<std::mutex> busy(p.busy, std::try_to_lock);
  if (parts <= 1 || t_in_split || !busy.owns_lock()) return run_serially(parts, fn);
  const pid_t pid = getpid();
  {
    std::lock_guard<std::mutex> g(p.mu);
    if (p.helpers == 0) p.started_in = pid;
    if (p.started_in != pid) return run_serially(parts, fn);
    for (; p.helpers < parts - 1; ++p.helpers) {
      std::thread([&p, part = p.helpers + 1] { helper_loop(p, part); }).detach();
    }
  }
  const at::ThreadLocalState state;
  {
    std::lock_guard<std::mutex> g(p.mu);
    p.parts = parts;
    p.pending = parts - 1;
    p.fn = &fn;
    p.state = &state;
    p.error = nullptr;
    ++p.generation;
  }
  p.cv_start.notify_all();
  g_splits++;
  std::exception_ptr err;
  t_in_split = true;
  try {
    fn(0);
  } catch (...) {
    err = std::current_exception();
  }
  t_in_split = false;
  {
    BlockingWait unblock_python;  // a helper copying Python modes of `state` needs the GIL
    std::unique_lock<std::mutex> lk(p.mu);
    p.cv_done.wait(lk, [&] { return p.pending == 0; });
    if (!err) err = p.error;
    p.fn = nullptr;
    p.state = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

uint64_t splits_with_helpers() { return g_splits.load(); }

}  // namespace torch_tpu::runtime::host
