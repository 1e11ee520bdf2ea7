// Caching allocator for the CPU tensors a host program creates while it runs.
//
// Design: a program's intermediates (a cluster's stored members, the results ATen allocates
// inside a kernel) are CPU tensors that die before HostExecutable::run returns. Through the
// system allocator each of them is fresh memory: glibc maps blocks above its mmap threshold
// and trims the worker threads' heaps, so the same buffers are faulted in again every step (a
// GPT-2-width training step in fused mode took 32k page faults, 80 ms of kernel time, where
// strict mode, whose tensors come from the caching device allocator, took none).
//  * Installed once as c10's CPU allocator, wrapping the one it replaces. On a thread inside a
//    ScratchScope (HostExecutable::run), a request of at least kMinScratchBytes is served from
//    exact-size free lists (sizes rounded up to 64 KiB) and returns there when freed, from any
//    thread. Every other request, and every request outside a scope, goes to the wrapped
//    allocator unchanged: user CPU tensors keep the system allocator.
//  * The free lists hold at most TORCH_TPU_HOST_SCRATCH_CACHE bytes; a block freed beyond that
//    goes back to the system. release_scratch_cache() empties them (torch.tpu.empty_cache and the
//    device allocator's out-of-memory retry call it).
//  * Every block's context is its data pointer (ATen's raw_allocate requires it); a registry of
//    live scratch blocks tells a raw free which allocator owns a pointer.
// Thread safety: all functions are thread-safe (one mutex).
#pragma once

#include <cstddef>
#include <cstdint>

namespace torch_tpu::runtime::host {

// Requests below this stay with the system allocator (its per-thread caches serve them).
inline constexpr size_t kMinScratchBytes = size_t{256} << 10;

// Marks the calling thread as running a host program for its lifetime (nestable).
class ScratchScope {
 public:
  ScratchScope();
  ~ScratchScope();
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  bool outer_;
};

struct ScratchStats {
  uint64_t live_bytes = 0;    // in scratch blocks now in use
  uint64_t cached_bytes = 0;  // in free lists
  uint64_t hits = 0;          // requests served from the free lists
  uint64_t misses = 0;        // requests that took new memory
};

// Returns every cached block to the system.
void release_scratch_cache();
ScratchStats scratch_stats();

}  // namespace torch_tpu::runtime::host
