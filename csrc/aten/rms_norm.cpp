// rms_norm on tpu as one program: aten::_fused_rms_norm and its lowering (lowering/nn_norm.py).
//
// Both `rms_norm` and `_fused_rms_norm` are CompositeImplicitAutograd, and the dispatcher prefers
// such a kernel to a backend fallback: without kernels of our own, `F.rms_norm` on tpu (every
// RMSNorm of an LLM, vLLM's included) decomposed before reaching PrivateUse1 and ran as 7
// per-op programs (pow, mean, add, rsqrt, mul, ...) that never met the lowering.
//  * `_fused_rms_norm` gets a direct PrivateUse1 kernel: the lowering path. Its autograd is
//    PyTorch's own (its Autograd kernel records `_fused_rms_norm_backward`, lowered too).
//  * `rms_norm` has no autograd formula of its own, so its kernel sits on AutogradPrivateUse1
//    and calls `_fused_rms_norm` through the dispatcher from the top: autograd then records
//    `_fused_rms_norm`'s node, as on CUDA. The same kernel on PrivateUse1 serves calls that skip
//    the autograd keys (inference mode, which vLLM runs under).
// Registered only where the running torch has `_fused_rms_norm` with the schema the lowering
// takes and an autograd kernel (the extension also builds against torch 2.11); elsewhere
// rms_norm keeps its composite.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/StringUtil.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "exec/call.h"

namespace torch_tpu::aten {
namespace {

constexpr const char* kFusedSchema =
    "aten::_fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, Tensor)";

const c10::OperatorHandle& fused_rms_norm_op() {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_fused_rms_norm", "");
  return op;
}

// rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor,
// boxed: the same arguments go to _fused_rms_norm (int[] normalized_shape), whose rstd is dropped.
void rms_norm_fused(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  c10::IValue& shape = (*stack)[stack->size() - 3];
  if (!shape.isIntList()) {  // symbolic sizes (tracing): _fused_rms_norm takes concrete ones
    std::vector<int64_t> sizes;
    for (const c10::SymInt& s : shape.toSymIntVector()) sizes.push_back(s.guard_int(__FILE__, __LINE__));
    shape = c10::IValue(sizes);
  }
  fused_rms_norm_op().callBoxed(stack);  // (output, rstd)
  stack->pop_back();
}

bool fused_rms_norm_available() {
  const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({"aten::_fused_rms_norm", ""});
  return op && c10::str(op->schema()) == kFusedSchema && op->hasKernelForDispatchKey(c10::DispatchKey::Autograd);
}

bool register_rms_norm() {
  if (!fused_rms_norm_available()) return false;
  // Registrations live as long as the process.
  static auto* backend =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static auto* autograd =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  backend->impl("_fused_rms_norm", torch::CppFunction::makeFromBoxedFunction<&exec::lowered_op_kernel>());
  backend->impl("rms_norm", torch::CppFunction::makeFromBoxedFunction<&rms_norm_fused>());
  autograd->impl("rms_norm", torch::CppFunction::makeFromBoxedFunction<&rms_norm_fused>());
  return true;
}

// At load time, after libtorch registered its ops (the extension links against it).
[[maybe_unused]] const bool kRmsNormRegistered = register_rms_norm();

}  // namespace
}  // namespace torch_tpu::aten
