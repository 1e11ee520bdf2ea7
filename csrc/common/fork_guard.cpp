#include "common/fork_guard.h"

#include <c10/util/Exception.h>
#include <pthread.h>

namespace torch_tpu {

std::atomic<bool> g_in_bad_fork{false};

void note_runtime_thread_started() {
  static std::atomic<bool> registered{false};
  if (registered.exchange(true)) return;
  pthread_atfork(nullptr, nullptr, [] { g_in_bad_fork.store(true); });
}

void raise_bad_fork() {
  TORCH_CHECK(false,
              "torch_tpu: cannot use the 'tpu' device in a forked subprocess: the parent process had already "
              "started the device's threads (stream workers at first use; a PJRT plugin's client at import) or "
              "recorded pending (fused) work, and fork() copies only the calling thread. To use 'tpu' with "
              "multiprocessing, use the 'spawn' start method (torch.multiprocessing.set_start_method('spawn')), "
              "or fork before the parent first uses the device.");
}

}  // namespace torch_tpu
