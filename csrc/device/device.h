// The tpu devices of this process: how many there are and which one is current.
//
// On the host runtime the devices are emulated (TORCH_TPU_NUM_DEVICES, default 1); each has its
// own memory capacity, allocator, streams and generator. The current device is per thread, like
// CUDA's. Functions here never touch the runtime and are cheap (used on the per-op path).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace torch_tpu::device {

// Validates the device and memory variables (TORCH_TPU_NUM_DEVICES: 1 to 64 when set;
// TORCH_TPU_HOST_MEMORY: at least one byte; TORCH_TPU_CACHE_MAX_BYTES and
// TORCH_TPU_HOST_SCRATCH_CACHE: sizes below 2^64 bytes). Throws c10::ValueError naming the
// variable and the accepted range; called at import, so count() and capacity() never meet a bad
// value. Reads only the environment.
void check_config();

// Number of devices (>= 1). Read once from the environment; never throws after the first call.
c10::DeviceIndex count();

// Throws c10::Error ("Invalid device ...") unless 0 <= index < count().
void check_index(c10::DeviceIndex index);

// The calling thread's current device (0 by default).
c10::DeviceIndex current();
// Sets the current device after checking the index.
void set_current(c10::DeviceIndex index);

// Whether this process has used a device yet (torch.tpu.is_initialized()): false at import,
// true from the first allocation, explicit set_device, synchronize or current_device(), as
// torch.cuda's lazy initialization. DeviceMesh reads it to decide whether to pick each rank's
// device from LOCAL_RANK; torch.utils.checkpoint to decide whether to stash the device RNG state.
bool initialized();
void mark_initialized();

// Bytes of memory a device may hold (TORCH_TPU_HOST_MEMORY or the default).
uint64_t capacity(c10::DeviceIndex index);

std::string name(c10::DeviceIndex index);

}  // namespace torch_tpu::device
