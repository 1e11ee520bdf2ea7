#include "runtime/runtime.h"

namespace torch_tpu::runtime {

static thread_local c10::DeviceIndex t_execution_device = 0;

c10::DeviceIndex execution_device() { return t_execution_device; }

void set_execution_device(c10::DeviceIndex device) { t_execution_device = device; }

}  // namespace torch_tpu::runtime
