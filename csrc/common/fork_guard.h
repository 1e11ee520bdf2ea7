// Fork safety of the device runtime.
//
// Design: fork() copies only the calling thread. The parent's stream workers and native-kernel
// compiler do not exist in the child, and a lock one of them held at the fork
// stays locked there, so a child that used the device would wait forever for work nobody runs.
// As torch.cuda does, a child forked after the runtime started its first thread is "in a bad
// fork": every device entry point (stream use, allocation) raises a RuntimeError that names the
// fix, memory the child frees is left alone, and exit handlers do nothing. A child forked
// before the device was used (a DataLoader worker forked early, say) starts threads of its own.
#pragma once

#include <atomic>

namespace torch_tpu {

// Called before the runtime starts a stream worker or the native-kernel compiler thread, and
// when fused mode first records work (a child must not run its parent's pending graph): from
// then on a fork's child is in a bad fork. (Kernel threads need not call it: a split in another
// process runs serially until it starts threads of its own, runtime/host/kernel_threads.cpp.)
void note_runtime_thread_started();

extern std::atomic<bool> g_in_bad_fork;

// True in a child forked after the runtime started threads (cheap: one relaxed load).
inline bool in_bad_fork() { return g_in_bad_fork.load(std::memory_order_relaxed); }

// Throws c10::Error (RuntimeError) in a bad fork, explaining what to do instead.
[[noreturn]] void raise_bad_fork();
inline void check_not_in_bad_fork() {
  if (in_bad_fork()) raise_bad_fork();
}

}  // namespace torch_tpu
