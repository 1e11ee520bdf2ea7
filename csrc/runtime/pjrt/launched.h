// Programs launched on PJRT devices whose completion nobody has waited for yet.
//
// Design (runtime/completion.h has the contract): PjrtExecutable::run() returns once its
// program is launched when every output stays on the device (nothing to download into host
// memory) and it runs on a stream worker. Its completion event, with the device buffers the
// launch reads (resident arguments, shared scalars, uploads nobody keeps), goes here, per
// device; await_all() is the stream worker's await_launched hook: it waits for every event of
// the device and throws the first failure (the others of that batch are awaited quietly, so
// each failure is reported once). Holding the argument buffers until completion keeps their
// device memory alive whatever the resident table does meanwhile. At most kMaxLaunched
// programs wait per device; a launch beyond that awaits the oldest first (bounded memory
// and bounded error latency), and await_all() throws its failure then, at the launch.
// TORCH_TPU_PJRT_ASYNC=0 (or set_enabled(false)) waits for each program in run(), as before.
//
// Thread safety: all members are thread-safe; events are awaited outside the lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/pjrt/client.h"

namespace torch_tpu::pjrt {

struct LaunchedProgram {
  Event done;
  std::vector<std::shared_ptr<Buffer>> held;  // argument buffers the program reads
  std::vector<Buffer> owned;                  // uploads dropped after the launch
  std::string injected_failure;               // tests: reported as the program's failure
};

class LaunchedPrograms {
 public:
  static constexpr size_t kMaxLaunched = 64;
  explicit LaunchedPrograms(size_t devices);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Off: run() waits for each program (the caller synchronizes the devices first).
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  // Records a launched program on `device`; awaits the oldest one first when kMaxLaunched wait
  // already (its failure is kept for the next await_all). Never throws for an earlier program.
  void add(size_t device, LaunchedProgram program);
  // Waits for every program launched on `device` so far; throws the first failure.
  void await_all(size_t device);
  // Waits for every program launched on `device` so far without throwing: a failure is kept
  // for the next await_all (out of device memory: their held buffers go now).
  void settle(size_t device);
  // Programs launched on any device and not yet awaited.
  int64_t pending() const;
  // Programs recorded since the process started, and how many were found failed.
  int64_t launched() const { return launched_.load(std::memory_order_relaxed); }
  int64_t failed() const { return failed_.load(std::memory_order_relaxed); }
  // Tests only: the next program recorded on any device is reported failed with `message` when
  // awaited (XLA's CPU plugin has no program that fails at run time). Empty: none.
  void inject_failure(std::string message);

 private:
  struct PerDevice {
    mutable std::mutex mu;
    std::deque<LaunchedProgram> programs;
    std::exception_ptr failure;  // of a program awaited by add(), for the next await_all
  };
  // Awaits each program in order; throws the first failure after awaiting all of them.
  void await_each(std::deque<LaunchedProgram>& programs);
  std::vector<std::unique_ptr<PerDevice>> devices_;
  std::atomic<bool> enabled_{true};
  std::atomic<int64_t> launched_{0}, failed_{0};
  std::mutex inject_mu_;
  std::string inject_;  // guarded by inject_mu_
  std::atomic<bool> has_inject_{false};
};

}  // namespace torch_tpu::pjrt
