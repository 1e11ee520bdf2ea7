// Allocation history of the tpu caching allocator, behind torch.tpu.memory._record_memory_history
// and torch.tpu.memory._snapshot() (the dict torch/cuda/_memory_viz.py reads; docs/diagnostics.md).
//
// Design: a process-wide switch (recording(), one relaxed load on allocate and free; off by
// default, so the allocator's hot path is unchanged). On, each allocation and free appends a
// trace entry (action, address, size, device, time) to a bounded buffer (the oldest entries drop
// first, like CUDA's max_entries), and each allocation keeps the Python stack that made it, from
// a hook the extension installs. The hook is called only on threads that have a Python thread
// state (never on stream workers, which must not take the GIL: common/blocking_wait.h) and
// never under an allocator lock.
//
// Thread safety: every function is thread-safe (one mutex).
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_tpu::device::memory_history {

struct Frame {
  std::string filename;
  int line = 0;
  std::string name;
};
// A stack, innermost frame first. The hook interns frames (they live as long as the process) and
// whole stacks, so a loop that allocates from the same few places shares a few stacks.
using Frames = std::shared_ptr<const std::vector<const Frame*>>;
// Installed by the Python extension: the calling thread's Python stack, or null when the thread
// has no Python frames. Must not throw.
using StackHook = Frames (*)();
void set_stack_hook(StackHook hook);

extern std::atomic<bool> g_recording;
inline bool recording() { return g_recording.load(std::memory_order_relaxed); }
// Starts (max_entries > 0: the trace keeps that many entries) or stops recording. Stopping keeps
// the records until clear().
void set_recording(bool on, size_t max_entries, bool stacks);
void clear();

struct Entry {
  const char* action = "";  // "alloc" or "free_completed" (_memory_viz's names)
  uint64_t addr = 0;
  uint64_t size = 0;
  int device = 0;
  int64_t time_us = 0;  // Unix epoch
  Frames frames;        // alloc only; may be null
};
// Called by the allocator outside its locks, only when recording().
void record_alloc(c10::DeviceIndex device, const void* ptr, uint64_t size);
void record_free(c10::DeviceIndex device, const void* ptr, uint64_t size);

// The trace so far (oldest first) and the stack of each live block allocated while recording.
std::vector<Entry> trace();
Frames frames_of(const void* ptr);

}  // namespace torch_tpu::device::memory_history
