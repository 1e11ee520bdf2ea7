// Blocking waits and Python's GIL.
//
// Design: threads of the host runtime (stream workers, kernel helpers) sometimes need the GIL.
// A TensorImpl or StorageImpl with a Python wrapper increfs or decrefs that wrapper (under the
// GIL) when its C++ reference count crosses 1 <-> 2, so a worker dropping a queued op's tensor
// references can block on the GIL; so can a helper copying Python mode stacks in ATen's
// thread-local state. A host thread that waits for such a thread while holding the GIL (PyTorch
// calls some hooks with it held: storage.resize_ reaches the allocator's resize under the GIL)
// deadlocks. So every blocking wait of the runtime opens a BlockingWait, which releases the
// GIL for the duration of the wait when the calling thread holds it.
// The C++ layers stay free of Python: the bindings install the two functions once
// (python/device_bindings.cpp); without them (the C++ tests) a BlockingWait does nothing.
//
// Thread safety: the hooks are set once at import; a BlockingWait is per thread.
#pragma once

#include <atomic>

namespace torch_tpu {

struct BlockingWaitHooks {
  void* (*release)();              // releases the GIL if this thread holds it; nullptr if not
  void (*reacquire)(void* token);  // takes it back (token: release's non-null result)
};

inline std::atomic<const BlockingWaitHooks*> g_blocking_wait_hooks{nullptr};

inline void set_blocking_wait_hooks(const BlockingWaitHooks* hooks) {
  g_blocking_wait_hooks.store(hooks, std::memory_order_release);
}

// Open around a wait that another runtime thread ends; construct it before taking the lock
// the wait sleeps on, so the GIL is taken back only after that lock was released.
class BlockingWait {
 public:
  BlockingWait() : hooks_(g_blocking_wait_hooks.load(std::memory_order_acquire)) {
    if (hooks_ != nullptr) token_ = hooks_->release();
  }
  ~BlockingWait() {
    if (token_ != nullptr) hooks_->reacquire(token_);
  }
  BlockingWait(const BlockingWait&) = delete;
  BlockingWait& operator=(const BlockingWait&) = delete;

 private:
  const BlockingWaitHooks* hooks_;
  void* token_ = nullptr;
};

}  // namespace torch_tpu
