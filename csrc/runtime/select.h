// Which runtime runs programs: TORCH_TPU_RUNTIME (host, pjrt, auto or jax), chosen once.
#pragma once

#include "runtime/runtime.h"

namespace torch_tpu::runtime {

// The runtime chosen by TORCH_TPU_RUNTIME (validated on first use; throws for an unknown or
// unavailable runtime). Lives forever.
Runtime& selected_runtime();

// The JAX runtime (runtime/jax/) calls into Python and is linked into the extension only; it
// registers itself here when the extension loads. Without it, TORCH_TPU_RUNTIME=jax throws.
void set_jax_runtime(Runtime& (*factory)());

}  // namespace torch_tpu::runtime
