// What the device layer (csrc/device/: allocator, streams) asks of the runtimes, without reaching
// into one (runtime/host/ is the host runtime's own business). See also residency.h and
// completion.h, which the device layer uses directly.
#pragma once

#include <functional>

namespace torch_tpu::runtime {

// Returns memory the runtimes cache between programs to the system (the host runtime's scratch
// blocks live in the same RAM as device memory): torch.tpu.empty_cache and out-of-memory retries.
void release_cached_memory();

// For a thread about to block until done() holds: runs work the runtimes offer (the host
// runtime's kernel threads) until done() holds (true) or nothing was offered for the spin
// limit (false: block as before). done() must be cheap and thread-safe.
bool help_while_waiting(const std::function<bool()>& done);

}  // namespace torch_tpu::runtime
