// Streams: in-order work queues, one worker thread each, per device.
//
// Design: strict mode's host thread only enqueues; a stream's worker runs its queue in order,
// so the user's Python keeps running ahead of the device like it does with CUDA. Stream 0 of
// each device is the default stream; the others come from a fixed pool (ids 1..kPoolSize).
// Every piece of work holds references to the tensors it touches, so freeing a tensor while its
// op is still queued is safe: memory returns to the allocator when the work finishes.
// An exception thrown by queued work is kept and re-raised on the host at the next enqueue or
// synchronization of that stream (like CUDA's asynchronous errors, but not sticky).
// Events mark a position in a stream's queue; waiting on one from another stream enqueues a
// wait, so cross-stream ordering is real.
//
// Thread safety: everything here is thread-safe. The current stream is per thread and device.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace torch_tpu::device {

constexpr int kStreamPoolSize = 8;

// A unit of queued work. run() executes on the stream's worker thread; the object (and the
// references it holds) is destroyed on that thread after run() returns or throws.
struct Work {
  virtual ~Work() = default;
  virtual void run() = 0;
  // True for a program launch that may return before the device finished it (runtime/
  // completion.h): the worker waits for launched programs only before other work and when its
  // queue is empty, not after each launch.
  virtual bool launch_only() const { return false; }
};

class StreamQueue;

// The queue behind a c10::Stream of type PrivateUse1. Throws for an invalid device or id.
StreamQueue& queue_of(const c10::Stream& stream);

// Enqueues work on a stream after re-raising any pending error of that stream.
// Returns the work's ticket (its position in the queue).
uint64_t enqueue(const c10::Stream& stream, std::unique_ptr<Work> work);
// Enqueues without flushing pending fused work first, never waits and never raises a pending
// error (the next synchronization does): the fused engine enqueues a graph under its own lock
// (so graphs reach the stream in the order they were taken), bounds its run-ahead itself after
// releasing it, and must not drop a graph whose ops already returned results.
uint64_t enqueue_unflushed(const c10::Stream& stream, std::unique_ptr<Work> work);
uint64_t enqueue_fn(const c10::Stream& stream, std::function<void()> fn);
// Blocks until the stream has run its work up to `ticket` (enqueue's return value); does not
// re-raise errors (the next enqueue or synchronization does).
void wait_for_ticket(const c10::Stream& stream, uint64_t ticket);
// Blocks until everything enqueued so far has run, then re-raises a pending error.
void synchronize_stream(const c10::Stream& stream);
// True if the stream has no unfinished work (lock-free; used on the per-op path).
bool query_stream(const c10::Stream& stream);
// Re-raises the stream's pending error, if any (one relaxed load when there is none): work run
// on the calling thread instead of being enqueued raises it as enqueue would.
void raise_pending_error(const c10::Stream& stream);
// True if no stream of the device has unfinished work or an unreported error (lock-free): no
// queued work can read or write the device's memory, so the calling thread may write a live
// tensor directly and still be in queue order (host -> device copies, aten/copy.cpp). Work
// another thread enqueues concurrently is unordered with the caller, as with CUDA streams.
// Throws for an invalid device index.
bool device_idle(c10::DeviceIndex index);
// Synchronizes every stream of a device (all devices if index < 0).
void synchronize_device(c10::DeviceIndex index);

c10::Stream default_stream(c10::DeviceIndex index);
c10::Stream current_stream(c10::DeviceIndex index);
// Sets the calling thread's current stream for the stream's device; returns the previous one.
c10::Stream exchange_stream(const c10::Stream& stream);
// A pool stream (round robin), as torch.tpu.Stream() gets.
c10::Stream pool_stream(c10::DeviceIndex index);

// Fused mode keeps recorded-but-unflushed work outside the queues. Anything that orders itself
// against a queue (synchronization, work enqueued by other kernels, events, host reads) first
// calls flush_pending, which hands the pending graph of that device (all devices if < 0) to its
// queue. The cause says why, for torch_tpu.metrics(); callers set it with a FlushCauseScope.
enum class FlushCause : uint8_t {
  kSynchronize,    // torch.tpu.synchronize(), torch_tpu.sync(), stream/device synchronize
  kHostRead,       // .item(), .cpu(), .tolist(), printing, torch.save
  kDataDependent,  // nonzero, masked_select, boolean indexing, unique: output size needs values
  kStreamEvent,    // event record/wait, work from another stream or kernel
  kCopy,           // a host->device or cross-device copy into memory a pending op touches
  kSizeCap,        // the pending graph reached TORCH_TPU_FUSED_MAX_OPS
  kMemory,         // an allocation failed: pending work may hold the memory
  kModeSwitch,     // torch_tpu.set_mode()
  kExit,           // interpreter exit
  kViewRead,       // a read of pending memory through a view the graph cannot express
  kResize,         // a tensor with pending writes is resized or re-pointed
  kSlowStart,      // fused mode's first graphs after the host waited are cut small
  kOptimizerStep,  // an optimizer's step() ended: the next step's graphs start at its first op
  kCount
};
const char* flush_cause_name(FlushCause cause);
using PendingFlushHook = void (*)(c10::DeviceIndex device, FlushCause cause);
void set_pending_flush_hook(PendingFlushHook hook);
// Flushes pending fused work (cheap no-op when nothing is pending). The cause is the innermost
// FlushCauseScope of this thread, else `fallback`.
void flush_pending(c10::DeviceIndex device, FlushCause fallback = FlushCause::kSynchronize);
// torch.tpu.set_sync_debug_mode, as torch.cuda's: 0 quiet, 1 warn, 2 raise at every operation
// that makes the host wait for device values (.item(), .cpu(), printing, data-dependent
// shapes). note_host_sync() applies the mode; callers are the host-read paths.
void set_sync_debug_mode(int mode);
int sync_debug_mode();
void note_host_sync();

struct FlushCauseScope {
  explicit FlushCauseScope(FlushCause cause);
  ~FlushCauseScope();
  FlushCauseScope(const FlushCauseScope&) = delete;
  FlushCauseScope& operator=(const FlushCauseScope&) = delete;
  int prev;
};

// Events (opaque pointers owned by PyTorch's c10::Event through the guard implementation).
void* event_create(bool enable_timing);
void event_record(void** event, const c10::Stream& stream, bool enable_timing);
void event_block(void* event, const c10::Stream& stream);
bool event_query(void* event);
void event_synchronize(void* event);
void event_destroy(void* event) noexcept;
double event_elapsed_ms(void* start, void* end);

}  // namespace torch_tpu::device
