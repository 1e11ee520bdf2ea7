#include "runtime/completion.h"

#include <atomic>

namespace torch_tpu::runtime {

namespace {
std::atomic<AwaitLaunchedHook> g_hook{nullptr};
thread_local bool t_deferred = false;
}  // namespace

bool completion_deferred_here() { return t_deferred; }
void defer_completion_on_this_thread() { t_deferred = true; }

void install_await_launched(AwaitLaunchedHook hook) { g_hook.store(hook, std::memory_order_release); }

void await_launched(c10::DeviceIndex device) {
  if (AwaitLaunchedHook hook = g_hook.load(std::memory_order_acquire)) hook(device);
}

}  // namespace torch_tpu::runtime
