// Ops whose output shape depends on tensor values. Each synchronizes once to learn the size,
// then runs lowered ops with static shapes (nonzero -> count + nonzero_static).
#include <ATen/Functions.h>

#include "aten/kernels.h"
#include "common/check.h"
#include "device/stream.h"
#include "exec/call.h"

namespace torch_tpu::aten {

at::Tensor nonzero(const at::Tensor& self) {
  device::FlushCauseScope cause(device::FlushCause::kDataDependent);
  int64_t n = at::count_nonzero(self).item<int64_t>();
  return at::nonzero_static(self, n, -1);
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_select: expected BoolTensor for mask");
  auto shape = at::infer_size(self.sizes(), mask.sizes());
  at::Tensor flat_mask = mask.expand(shape).reshape({-1});
  at::Tensor flat = self.expand(shape).reshape({-1});
  return at::index_select(flat, 0, torch_tpu::aten::nonzero(flat_mask).reshape({-1}));
}

bool equal(const at::Tensor& self, const at::Tensor& other) {
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

// index.Tensor / index_put_ with boolean masks: replace each k-dim mask by the k index tensors
// of its nonzero positions (the sync), then lower the integer-indexed op as usual.
void index_with_masks(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/, torch::jit::Stack* stack) {
  const size_t nargs = op.schema().arguments().size();
  c10::IValue& list_iv = (*stack)[stack->size() - nargs + 1];
  auto list = list_iv.toOptionalTensorList();
  bool has_mask = false;
  for (size_t i = 0; i < list.size(); ++i) {
    std::optional<at::Tensor> t = list.get(i);
    if (t.has_value() && t->defined() && (t->scalar_type() == c10::kBool || t->scalar_type() == c10::kByte)) has_mask = true;
  }
  if (has_mask) {
    c10::List<std::optional<at::Tensor>> converted;
    for (size_t i = 0; i < list.size(); ++i) {
      std::optional<at::Tensor> t = list.get(i);
      if (t.has_value() && t->defined() && (t->scalar_type() == c10::kBool || t->scalar_type() == c10::kByte)) {
        at::Tensor mask = t->scalar_type() == c10::kByte ? t->to(c10::kBool) : *t;
        at::Tensor idx = torch_tpu::aten::nonzero(mask);  // [n, k]
        for (int64_t d = 0; d < mask.dim(); ++d) converted.push_back(idx.select(1, d));
        if (mask.dim() == 0) converted.push_back(idx.reshape({-1}));  // a 0-d mask adds a dim
      } else {
        converted.push_back(t);
      }
    }
    list_iv = c10::IValue(converted);
  }
  exec::run_lowered(op, stack);
}

}  // namespace torch_tpu::aten
