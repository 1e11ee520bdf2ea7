// Shared runs: the steps of one run, claimed by the stream's worker and a thread waiting for
// the stream (see executor.h, "Shared runs", and kernel_threads.h, "Waiting threads").
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "runtime/host/executor.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/run_state.h"
#include "runtime/host/scratch_allocator.h"

namespace torch_tpu::runtime::host {

// A run whose independent steps a thread waiting for this stream may take (kernel_threads.h,
// "Waiting threads"). The worker and the waiting thread each claim the earliest ready step
// (one whose operands' steps have finished) within kLookahead of the earliest unclaimed one;
// with nobody waiting, that is the worker running the steps in order. A value is released
// when its last reading step finishes, whichever thread ran it.
class HostExecutable::SharedRun final : public HelpOffer {
 public:
  // How far past the earliest unclaimed step a step may start: enough to find the independent
  // branch of a backward pass (a weight gradient beside an input gradient), few enough that
  // running ahead keeps peak memory near a plain run's.
  static constexpr int32_t kLookahead = 128;

  SharedRun(const HostExecutable& exe, RunState& st, c10::ArrayRef<int32_t> barriers)
      : exe_(exe),
        st_(st),
        n_(static_cast<int32_t>(exe.steps_.size())),
        state_(new std::atomic<uint8_t>[static_cast<size_t>(n_)]),
        remaining_(new std::atomic<int32_t>[exe.value_readers_.size()]),
        device_(execution_device()),
        contained_(!st.tainted.empty()) {
    for (int32_t i = 0; i < n_; ++i) state_[i].store(kFree, std::memory_order_relaxed);
    if (!barriers.empty()) barrier_.assign(static_cast<size_t>(n_), 0);  // rare: no allocation otherwise
    for (int32_t b : barriers) barrier_[static_cast<size_t>(b)] = 1;
    for (size_t v = 0; v < exe.value_readers_.size(); ++v) {
      remaining_[v].store(exe.value_readers_[v], std::memory_order_relaxed);
    }
  }

  bool help() override {
    ScratchScope scratch;
    ExecutionDeviceGuard device(device_);
    bool ran = false;
    for (int32_t i; (i = claim_ready(/*worker=*/false)) >= 0; ran = true) {
      execute(i);
    }
    return ran;
  }

  // On the worker: runs ready steps, the earliest first, until every step is claimed; then
  // waits for those the waiting thread runs. A failed step taints what depends on it and the
  // rest runs on (run_contained); the caller rethrows the first error.
  void run_all() {
    {
      OfferScope offer(OfferScope::kProgramSteps, this);
      while (first_free() < n_) {
        if (const int32_t i = claim_ready(/*worker=*/true); i >= 0) {
          worker_running_.store(true, std::memory_order_relaxed);
          execute(i);
          worker_running_.store(false, std::memory_order_relaxed);
        } else {
          cpu_relax();  // the next steps wait for one the waiting thread runs
        }
      }
    }  // withdrawn: the waiting thread has left help(), so every claimed step has finished
  }

 private:
  enum : uint8_t { kFree, kClaimed, kDone };

  bool claim(int32_t i) {
    uint8_t free = kFree;
    return state_[i].compare_exchange_strong(free, kClaimed);
  }
  // The earliest step nobody has claimed (n_ when all are).
  int32_t first_free() {
    int32_t i = low_.load(std::memory_order_relaxed);
    while (i < n_ && state_[i].load(std::memory_order_relaxed) != kFree) ++i;
    low_.store(i, std::memory_order_relaxed);  // a hint: racing stores only make a scan longer
    return i;
  }
  // Claims the earliest ready step within kLookahead of the earliest free one; -1 if none.
  // The waiting thread leaves large steps to the worker, which splits them with its help (run
  // there, such a step would take the single thread a part gets), and, while the worker is
  // between steps, the earliest ready step too: the worker is about to take it, and splits it
  // if it is mid-sized. Taken by the waiting thread, the next step of a chain (most of an
  // inference or forward pass) ran on one thread while the worker spun waiting for it.
  int32_t claim_ready(bool worker) {
    const int32_t from = first_free(), to = std::min(n_, from + kLookahead);
    bool leave = !worker && !worker_running_.load(std::memory_order_relaxed);
    for (int32_t i = from; i < to; ++i) {
      if (state_[i].load(std::memory_order_relaxed) != kFree || !(worker || exe_.helper_may_run_[i]) || !ready(i)) {
        continue;
      }
      if (leave) {
        leave = false;
        continue;
      }
      if (claim(i)) return i;
    }
    return -1;
  }
  bool done(int32_t j) const { return state_[j].load(std::memory_order_acquire) == kDone; }
  // Every step this one reads from (a barrier: every earlier step) has finished.
  bool ready(int32_t i) {
    if (!barrier_.empty() && barrier_[static_cast<size_t>(i)]) {
      int32_t j = low_done_.load(std::memory_order_relaxed);
      while (j < i && done(j)) ++j;
      low_done_.store(j, std::memory_order_relaxed);  // a hint, like low_
      return j == i;
    }
    for (int32_t k = exe_.dep_begin_[i]; k < exe_.dep_begin_[i + 1]; ++k) {
      if (!done(exe_.deps_[k])) return false;
    }
    return true;
  }
  void execute(int32_t i) {
    if (!contained_.load(std::memory_order_acquire)) {
      // The common case: no failure so far. A step that throws records the error and taints
      // under the lock (allocating the taint vector once); steps that read its values start
      // after it is done, so they see contained_ and the taint.
      try {
        exe_.run_step(st_, exe_.steps_[static_cast<size_t>(i)]);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu_);
        exe_.fail_step(st_, i);
        contained_.store(true, std::memory_order_release);
      }
    } else {
      // Each node's taint is written by the one step that defines it, and read by steps that
      // start after it finished (done's acquire): only the error needs the lock.
      exe_.run_contained(st_, i, &error_mu_);
    }
    for (int32_t k = exe_.read_begin_[i]; k < exe_.read_begin_[i + 1]; ++k) {
      const int32_t v = exe_.reads_[k];
      if (remaining_[v].fetch_sub(1) == 1) st_.values[v].reset();
    }
    for (int32_t k = exe_.orphan_begin_[i]; k < exe_.orphan_begin_[i + 1]; ++k) st_.values[exe_.orphans_[k]].reset();
    state_[i].store(kDone, std::memory_order_release);
  }

  const HostExecutable& exe_;
  RunState& st_;
  const int32_t n_;
  std::unique_ptr<std::atomic<uint8_t>[]> state_;
  std::vector<uint8_t> barrier_;                       // per step: waits for all earlier steps (or empty)
  std::unique_ptr<std::atomic<int32_t>[]> remaining_;  // per value: reading steps not yet finished
  const c10::DeviceIndex device_;
  std::atomic<int32_t> low_{0};       // no step before it is free (a hint, see first_free)
  std::atomic<int32_t> low_done_{0};  // every step before it has finished (a hint, see ready)
  std::atomic<bool> worker_running_{false};  // the worker is inside a step (see claim_ready)
  std::mutex error_mu_;                      // guards st_'s error and taint once a step failed
  std::atomic<bool> contained_;              // st_.tainted is allocated (set under error_mu_)
};

void HostExecutable::run_shared(RunState& st, c10::ArrayRef<int32_t> barriers) const {
  SharedRun(*this, st, barriers).run_all();
}

}  // namespace torch_tpu::runtime::host
