#include "runtime/pjrt/launched.h"

#include <c10/util/Exception.h>

#include <exception>

#include "common/check.h"

namespace torch_tpu::pjrt {

LaunchedPrograms::LaunchedPrograms(size_t devices) {
  for (size_t d = 0; d < devices; ++d) devices_.push_back(std::make_unique<PerDevice>());
}

int64_t LaunchedPrograms::pending() const {
  int64_t n = 0;
  for (const auto& d : devices_) {
    std::lock_guard<std::mutex> g(d->mu);
    n += static_cast<int64_t>(d->programs.size());
  }
  return n;
}

void LaunchedPrograms::inject_failure(std::string message) {
  std::lock_guard<std::mutex> g(inject_mu_);
  inject_ = std::move(message);
  has_inject_.store(!inject_.empty(), std::memory_order_relaxed);
}

void LaunchedPrograms::add(size_t device, LaunchedProgram program) {
  TPU_CHECK(device < devices_.size(), "PJRT runtime: no device ", device);
  if (has_inject_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> g(inject_mu_);
    program.injected_failure = std::exchange(inject_, {});
    has_inject_.store(false, std::memory_order_relaxed);
  }
  launched_.fetch_add(1, std::memory_order_relaxed);
  PerDevice& d = *devices_[device];
  std::deque<LaunchedProgram> oldest;
  {
    std::lock_guard<std::mutex> g(d.mu);
    d.programs.push_back(std::move(program));
    if (d.programs.size() > kMaxLaunched) {
      oldest.push_back(std::move(d.programs.front()));
      d.programs.pop_front();
    }
  }
  if (oldest.empty()) return;
  try {
    await_each(oldest);
  } catch (...) {
    std::lock_guard<std::mutex> g(d.mu);
    if (!d.failure) d.failure = std::current_exception();
  }
}

void LaunchedPrograms::await_all(size_t device) {
  if (device >= devices_.size()) return;
  PerDevice& d = *devices_[device];
  std::deque<LaunchedProgram> programs;
  std::exception_ptr earlier;
  {
    std::lock_guard<std::mutex> g(d.mu);
    programs.swap(d.programs);
    std::swap(earlier, d.failure);
  }
  if (earlier) {
    try {
      await_each(programs);
    } catch (...) {  // the earlier failure is the one reported
    }
    std::rethrow_exception(earlier);
  }
  await_each(programs);
}

void LaunchedPrograms::settle(size_t device) {
  if (device >= devices_.size()) return;
  PerDevice& d = *devices_[device];
  std::deque<LaunchedProgram> programs;
  {
    std::lock_guard<std::mutex> g(d.mu);
    programs.swap(d.programs);
  }
  try {
    await_each(programs);
  } catch (...) {
    std::lock_guard<std::mutex> g(d.mu);
    if (!d.failure) d.failure = std::current_exception();
  }
}

void LaunchedPrograms::await_each(std::deque<LaunchedProgram>& programs) {
  std::exception_ptr first;
  for (LaunchedProgram& p : programs) {
    try {
      p.done.await("LoadedExecutable_Execute (completion of a program launched asynchronously)");
      TPU_CHECK(p.injected_failure.empty(), p.injected_failure);
    } catch (...) {
      failed_.fetch_add(1, std::memory_order_relaxed);
      if (!first) first = std::current_exception();
    }
  }
  programs.clear();  // the held buffers go after their program finished
  if (first) std::rethrow_exception(first);
}

}  // namespace torch_tpu::pjrt
