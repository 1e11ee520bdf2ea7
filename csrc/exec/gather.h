// Gathering an ATen call: the program-cache key and the runtime bindings, in one walk.
//
// Design (docs/architecture.md, "The per-op path"): the boxed kernel (dispatch.cpp) walks a
// call's arguments once, appending key words (op identity; per argument: dtype, rank and sizes
// of tensors, values of ints, bools, strings and lists, the kind of each Scalar) and building
// the bindings (tensor memory with sizes and strides, scalar values); mixed devices are
// rejected here with PyTorch's wording. What an op's schema means for that walk (OpInfo) is
// computed once per op. This is the hot half of the per-op path, separate from what happens
// with the key (cache lookup, compile, launch) so each reads on its own.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include "exec/call.h"

namespace torch_tpu::exec {

// The op's OpInfo, built on first use from its schema; lives as long as the registration.
OpInfo& op_info(const c10::OperatorHandle& op);

// Whether some tensor argument (or element of a tensor list) is complex.
bool has_complex_tensor(c10::ArrayRef<c10::IValue> args);

// Walks the arguments: key + bindings. Throws for mixed devices and unsupported values.
void gather(CallState& st, const OpInfo& info, c10::ArrayRef<c10::IValue> args);

}  // namespace torch_tpu::exec
