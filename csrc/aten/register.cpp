// The registration table: which ATen ops have a dedicated tpu kernel. Every other op reaches
// the lowering path (exec/dispatch.cpp's boxed fallback).
#include <torch/library.h>

#include "aten/kernels.h"
#include "exec/call.h"

namespace torch_tpu::aten {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // memory
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_storage_whole));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  // views
  m.impl("view", TORCH_FN(view));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  // copies and host reads
  m.impl("copy_", TORCH_FN(copy_));
  m.impl("zero_", TORCH_FN(zero_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  // assertions on device values (aten/assertions.cpp)
  m.impl("_assert_async", TORCH_FN(assert_async));
  m.impl("_assert_async.msg", TORCH_FN(assert_async_msg));
  m.impl("_functional_assert_async.msg", TORCH_FN(functional_assert_async_msg));
  m.impl("_make_dep_token", TORCH_FN(make_dep_token));
  // data-dependent shapes
  m.impl("nonzero", TORCH_FN(nonzero));
  m.impl("masked_select", TORCH_FN(masked_select));
  m.impl("equal", TORCH_FN(equal));
  m.impl("_unique2", TORCH_FN(unique2));
  m.impl("_unique", TORCH_FN(unique));
  m.impl("unique_consecutive", TORCH_FN(unique_consecutive));
  m.impl("repeat_interleave.Tensor", TORCH_FN(repeat_interleave));
  m.impl("bincount", TORCH_FN(bincount));
  m.impl("cholesky", TORCH_FN(cholesky));
  m.impl("multinomial", torch::CppFunction::makeFromBoxedFunction<&multinomial>());
  m.impl("multinomial.out", torch::CppFunction::makeFromBoxedFunction<&multinomial>());
  m.impl("unique_dim", TORCH_FN(unique_dim));
  m.impl("unique_dim_consecutive", TORCH_FN(unique_dim_consecutive));
  m.impl("index.Tensor", torch::CppFunction::makeFromBoxedFunction<&index_with_masks>());
  m.impl("_index_put_impl_", torch::CppFunction::makeFromBoxedFunction<&index_with_masks>());
  m.impl("index_put", torch::CppFunction::makeFromBoxedFunction<&index_with_masks>());
  // Ops with a throwing default kernel for non-CPU/CUDA backends: send them to the lowering path.
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&exec::lowered_op_kernel>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&exec::lowered_op_kernel>());
  // Norms: PyTorch's composite fallbacks for other backends route layer/group norm through
  // batch norm; lowering them directly gives one program per call (and CPU's numerics).
  for (const char* name : {"native_layer_norm", "native_layer_norm_backward", "native_group_norm",
                           "native_group_norm_backward"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&exec::lowered_op_kernel>());
  }
  // attention backend choice; nn.TransformerEncoder's nested-tensor step (aten/nested.cpp)
  m.impl("_fused_sdp_choice", torch::CppFunction::makeFromBoxedFunction<&fused_sdp_choice>());
  m.impl("_scaled_dot_product_efficient_attention",
         torch::CppFunction::makeFromBoxedFunction<&efficient_attention<1>>());
  m.impl("_scaled_dot_product_efficient_attention_backward",
         torch::CppFunction::makeFromBoxedFunction<&efficient_attention<3>>());
  m.impl("_nested_tensor_from_mask_left_aligned", TORCH_FN(nested_tensor_from_mask_left_aligned));
  m.impl("_nested_tensor_from_mask", TORCH_FN(nested_tensor_from_mask));
}

}  // namespace torch_tpu::aten
