#include "runtime/device_services.h"

#include "runtime/host/kernel_threads.h"
#include "runtime/host/scratch_allocator.h"

namespace torch_tpu::runtime {

void release_cached_memory() { host::release_scratch_cache(); }

bool help_while_waiting(const std::function<bool()>& done) { return host::help_while_waiting(done); }

}  // namespace torch_tpu::runtime
