// Residency: keeping tpu memory coherent when a runtime holds storages away from host RAM.
//
// Design: a tpu tensor's DataPtr is always a host address from the device allocator, and on
// the host runtime those bytes are the only copy, so nothing is installed here and every hook
// is one pointer load. A runtime with real device memory (PJRT) installs a Residency: program
// outputs stay on the device and the host bytes under them go stale until the host needs them.
// Every piece of code that touches tpu memory directly on the host calls a hook first:
//   * before_host_read: the bytes must be current in host memory (copies to the host, .item(),
//     the old bytes of a storage resize);
//   * before_host_write: the host is about to write; any device copy overlapping the range is
//     dropped (downloaded first unless the write replaces every byte of it);
//   * released: the allocator got the memory back; device copies are dropped unread.
// Programs themselves never go through these hooks: the runtime that installed the Residency
// resolves its own inputs and outputs.
//
// Thread safety: hooks may be called from any thread; an installed Residency lives for the
// process.
#pragma once

#include <c10/util/ArrayRef.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace torch_tpu::runtime {

class Residency {
 public:
  virtual ~Residency() = default;
  // Makes [data, data + nbytes) current in host memory. Throws the device's error.
  virtual void sync_to_host(const void* data, size_t nbytes) = 0;
  // The host is about to write into [data, data + nbytes); `every_byte`: the write covers every
  // byte of the range (so device copies inside it need no download). Throws the device's error.
  virtual void before_host_write(const void* data, size_t nbytes, bool every_byte) = 0;
  // The memory was freed: forget its device copies. Never throws.
  virtual void released(const void* data, size_t nbytes) noexcept = 0;
};

// The installed Residency, or null (host runtime). Never throws.
Residency* residency();
// Installs `r` for the process (once, by the runtime that owns device memory).
void install_residency(Residency* r);

// The bytes a strided view spans: from element [0,...,0] (strides are never negative in
// PyTorch) to one past its last element. 0 for an empty view.
inline size_t span_bytes(c10::IntArrayRef sizes, c10::IntArrayRef strides, size_t itemsize) {
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return static_cast<size_t>(last + 1) * itemsize;
}

inline void before_host_read(const void* data, size_t nbytes) {
  if (Residency* r = residency(); r != nullptr && nbytes > 0) r->sync_to_host(data, nbytes);
}
inline void before_host_write(const void* data, size_t nbytes, bool every_byte) {
  if (Residency* r = residency(); r != nullptr && nbytes > 0) r->before_host_write(data, nbytes, every_byte);
}
inline void released(const void* data, size_t nbytes) noexcept {
  if (Residency* r = residency(); r != nullptr && nbytes > 0) r->released(data, nbytes);
}

}  // namespace torch_tpu::runtime
