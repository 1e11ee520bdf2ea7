// Which kernel F.scaled_dot_product_attention uses on tpu tensors.
//
// PyTorch asks the device's `_fused_sdp_choice_stub` (a DispatchStub, registered here for
// PrivateUse1) and otherwise takes the math path: q @ k^T, a mask built from `tril`, the
// decomposed `_safe_softmax` (isneginf, all, where) and their autograd graph, about twice the
// ops and memory of the attention itself. We answer "efficient attention" for float32/16 and
// bfloat16: SDPA then calls `_scaled_dot_product_efficient_attention` (on any device), whose
// forward and backward (from the saved log-sum-exp) lower as a few products and row clusters
// (torch_tpu/lowering/nn.py), and which DTensor knows how to shard (batch and heads), so tensor
// parallel attention runs. ("Flash" would call `_scaled_dot_product_flash_attention_for_cpu`
// on a non-CUDA device, which DTensor has no strategy for; float64, which CUDA's efficient kernel
// does not take, still goes there.) The answer is math where the lowering cannot follow:
// dropout (the CPU kernel's random stream), grouped-query attention (fewer key/value heads),
// ranks other than 4, a mask that needs its own gradient, or mixed dtypes.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>

#include "aten/kernels.h"

namespace torch_tpu::aten {
namespace {

// sdp::SDPBackend values (ATen/native/transformers/sdp_utils_cpp.h).
constexpr int64_t kMath = 0;
constexpr int64_t kFlashAttention = 1;
constexpr int64_t kEfficientAttention = 2;

int64_t choose_sdp(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                   double dropout_p, bool /*is_causal*/, std::optional<double> /*scale*/, bool enable_gqa) {
  const bool four_d = q.dim() == 4 && k.dim() == 4 && v.dim() == 4;
  const bool same_heads = four_d && q.size(1) == k.size(1) && k.size(1) == v.size(1) && !enable_gqa;
  const bool same_dtype =
      q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type() && at::isFloatingType(q.scalar_type());
  const bool mask_ok = !mask.has_value() || !mask->defined() || !mask->requires_grad();
  const bool flash = dropout_p == 0.0 && same_heads && same_dtype && mask_ok && !q.is_nested();
  if (!flash) return kMath;
  return q.scalar_type() == c10::kDouble ? kFlashAttention : kEfficientAttention;
}

}  // namespace

// The same answer through the `_fused_sdp_choice` op (torch._fused_sdp_choice).
void fused_sdp_choice(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, op.schema().arguments().size());
  const int64_t choice =
      choose_sdp(args[0].toTensor(), args[1].toTensor(), args[2].toTensor(), args[3].toOptional<at::Tensor>(),
                 args[4].toDouble(), args[5].toBool(), args[6].toOptional<double>(), args[7].toBool());
  torch::jit::drop(*stack, op.schema().arguments().size());
  torch::jit::push(*stack, choice);
}

}  // namespace torch_tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::aten::choose_sdp)
}  // namespace at::native
