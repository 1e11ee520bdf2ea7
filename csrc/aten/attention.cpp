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
#include "exec/call.h"

namespace torch_tpu::aten {
namespace {

// sdp::SDPBackend values (ATen/native/transformers/sdp_utils_cpp.h).
constexpr int64_t kMath = 0;
constexpr int64_t kFlashAttention = 1;
constexpr int64_t kEfficientAttention = 2;

int64_t choose_sdp(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                   double dropout_p, bool /*is_causal*/, std::optional<double> /*scale*/, bool enable_gqa) {
  const bool four_d = q.dim() == 4 && k.dim() == 4 && v.dim() == 4;
  // sym_size: under Dynamo the tensors are fake with symbolic sizes, and size() would turn every
  // size of q into a guard (a recompile per sequence length); comparing the heads guards only that.
  const bool same_heads =
      four_d && q.sym_size(1) == k.sym_size(1) && k.sym_size(1) == v.sym_size(1) && !enable_gqa;
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

namespace {

// [B, H, L, D] values laid out as [B, L, H, D] in memory (heads inside positions).
at::Tensor heads_inside(const at::Tensor& t) {
  if (!t.defined() || t.dim() != 4 || t.transpose(1, 2).is_contiguous()) return t;
  return t.transpose(1, 2).contiguous().transpose(1, 2);
}

}  // namespace

// The efficient-attention ops lay out the attention output and the q/k/v gradients with the
// heads inside the positions, as CUDA's kernels and PyTorch's meta functions do: DTensor plans
// `out.transpose(1, 2).view(B, L, -1)` on those strides, and the view must hold on the real
// tensor. The lowering gives dense results; the first `n` are copied into that layout.
template <size_t n>
void efficient_attention(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/, torch::jit::Stack* stack) {
  exec::run_lowered(op, stack);
  const size_t returns = op.schema().returns().size();
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[stack->size() - returns + i];
    if (v.isTensor()) v = heads_inside(v.toTensor());
  }
}
template void efficient_attention<1>(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack*);
template void efficient_attention<3>(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack*);

}  // namespace torch_tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::aten::choose_sdp)
}  // namespace at::native
