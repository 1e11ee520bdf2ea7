// Asynchronous completion: programs a runtime launched on a device without waiting for them.
//
// Design: a runtime with a real device (PJRT) returns from Executable::run() once its program
// is launched and its outputs stay on the device, so the stream worker prepares the next
// program while the device still executes the last one. What a "done" ticket promises must
// still hold: a stream reports a piece of work complete only after the device finished it,
// whenever anyone could observe the difference. So the stream worker calls await_launched()
//   * before running work that is not a program launch (an event's timestamp, a cross-stream
//     wait, a host callback): everything queued before it is finished on the device;
//   * after the last queued work, before reporting it complete (synchronize, host reads and
//     event waits block on that).
// Between two queued programs nothing waits; PJRT orders a program after the programs whose
// buffers it reads. An error of a launched program (its completion event failed) is thrown by
// await_launched(), so it surfaces at the next synchronization, like any queued work's error.
// Host reads of device-resident bytes wait for those bytes' own readiness as well
// (runtime/residency.h), and get the same error if the program that wrote them failed.
//
// The host runtime installs nothing: await_launched() is then one pointer load.
// Thread safety: the hook may be called from any thread; it is installed once per process.
#pragma once

#include <c10/core/Device.h>

namespace torch_tpu::runtime {

// Blocks until every program launched on `device` so far has finished; throws the first
// failure among them (each is reported once). Never blocks on the host runtime.
using AwaitLaunchedHook = void (*)(c10::DeviceIndex device);
void install_await_launched(AwaitLaunchedHook hook);
void await_launched(c10::DeviceIndex device);

// Whether run() on the calling thread may return before its program finished: only on a stream
// worker (which calls await_launched as above), never for programs run inline on the host
// thread. The worker marks its thread once.
bool completion_deferred_here();
void defer_completion_on_this_thread();

}  // namespace torch_tpu::runtime
