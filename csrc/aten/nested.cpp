// nn.TransformerEncoder's nested-tensor step on tpu tensors (the device has no nested tensors).
//
// In inference with a src_key_padding_mask, the encoder asks `_nested_tensor_from_mask_left_aligned`
// whether to convert its input to a nested tensor. The answer here is always "no" (after CPU's
// argument checks): the encoder then takes the dense path CPU itself takes for masks that are
// not left aligned, and under torch.compile; every layer gets the padding mask, and every
// unpadded position computes CPU's values. Padded positions hold the dense layer's output where
// CPU's nested path writes zeros; PyTorch gives them no meaning (its dense paths differ there
// too). A truthful answer would need a host read, only to fail at the conversion. Called with
// mask_check=False the encoder converts unconditionally: that raises, naming the way out.
#include "aten/kernels.h"
#include "common/check.h"

namespace torch_tpu::aten {

bool nested_tensor_from_mask_left_aligned(const at::Tensor& t, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Expected mask to be of ScalarType Bool, but got ", mask.scalar_type(),
              " instead.");
  TORCH_CHECK(mask.dim() == 2, "Padding mask should be 2D");
  TORCH_CHECK(t.dim() >= 2 && t.size(0) == mask.size(0) && t.size(1) == mask.size(1),
              "Mask size should match input size");
  return false;
}

at::Tensor nested_tensor_from_mask(const at::Tensor& /*t*/, const at::Tensor& /*mask*/, bool /*mask_check*/) {
  C10_THROW_ERROR(NotImplementedError,
                  "torch_tpu: nested tensors are not supported on the tpu device (aten::_nested_tensor_from_mask). "
                  "nn.TransformerEncoder converts its input to one in inference when given src_key_padding_mask "
                  "with mask_check=False; build it with enable_nested_tensor=False (or set "
                  "encoder.use_nested_tensor = False) to keep it on the dense path.");
}

}  // namespace torch_tpu::aten
