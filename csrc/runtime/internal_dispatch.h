// The dispatch state a runtime's own ATen calls run under.
//
// A runtime computes with ATen CPU kernels on its own tensors (the host runtime's kernels, the
// JAX runtime's conversions and output copies). Those calls stay below autograd and away from
// Python dispatch: a user's TorchDispatchMode must see the TPU ops, never our CPU kernels.
#pragma once

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace torch_tpu::runtime {

struct InternalDispatchGuard {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  c10::impl::ExcludeDispatchKeyGuard no_python{c10::python_ks};
};

}  // namespace torch_tpu::runtime
