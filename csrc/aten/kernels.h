// Kernels the tpu device implements directly instead of through IR lowering: memory
// (allocation, resize, storage setters), views (metadata only), copies across devices, host
// reads, and ops whose output shape depends on data (they synchronize, then run lowered ops).
// Registered in register.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/Scalar.h>
#include <c10/core/Storage.h>

#include <optional>
#include <tuple>

namespace torch_tpu::aten {

// memory.cpp
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory);
bool nested_tensor_from_mask_left_aligned(const at::Tensor& t, const at::Tensor& mask);
at::Tensor nested_tensor_from_mask(const at::Tensor& t, const at::Tensor& mask, bool mask_check);
at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory);
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> format);
at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride);
at::Tensor& set_storage_whole(at::Tensor& self, c10::Storage source);
at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty(at::Tensor& self);
void record_stream(at::Tensor& self, c10::Stream stream);
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

// views.cpp
at::Tensor view(const at::Tensor& self, c10::IntArrayRef size);
at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset);
at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride);
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step);
at::Tensor view_as_real(const at::Tensor& self);
at::Tensor view_as_complex(const at::Tensor& self);

// copy.cpp
// A CPU tensor aliasing a tpu tensor's memory (the DataPtr is a host address on every
// runtime); the Residency hooks bring device copies back (read) or drop them (write) first.
// The caller orders the access after the work that writes (or reads) that memory.
enum class Access { kRead, kWrite };
at::Tensor host_view(const at::Tensor& t, Access access);
// A second TensorImpl over t's storage and geometry, without t's Python object or autograd
// metadata. Queued work holds this instead of t: the stream worker dropping the last C++
// reference of a tensor that has a Python object takes the GIL (common/blocking_wait.h).
at::Tensor detached_alias(const at::Tensor& t);
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking);
at::Tensor& zero_(at::Tensor& self);
// x's elements, row-major, then zeros, as a new 1-D tpu tensor of `total` elements. Copied on the
// host side of the device (no program, so no compile per size on PJRT) and queued behind the work
// that writes x, so the caller does not wait (compile/padded_buckets.py binds inputs with it).
at::Tensor padded_flat_copy(const at::Tensor& x, int64_t total);
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
c10::Scalar local_scalar_dense(const at::Tensor& self);

// attention.cpp: _scaled_dot_product_efficient_attention (n = 1) and its backward (n = 3)
template <size_t n>
void efficient_attention(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

// assertions.cpp
void assert_async(const at::Tensor& self);
void assert_async_msg(const at::Tensor& self, c10::string_view assert_msg);
at::Tensor functional_assert_async_msg(const at::Tensor& self, c10::string_view assert_msg,
                                       const at::Tensor& dep_token);
at::Tensor make_dep_token(std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                          std::optional<c10::Device> device, std::optional<bool> pin_memory,
                          std::optional<c10::MemoryFormat> memory_format);

// data_dependent.cpp
at::Tensor nonzero(const at::Tensor& self);
at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask);
bool equal(const at::Tensor& self, const at::Tensor& other);
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool sorted, bool return_inverse,
                                                       bool return_counts);
std::tuple<at::Tensor, at::Tensor> unique(const at::Tensor& self, bool sorted, bool return_inverse);
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self, bool return_inverse,
                                                                  bool return_counts, std::optional<int64_t> dim);
at::Tensor cholesky(const at::Tensor& self, bool upper);
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim, bool sorted,
                                                          bool return_inverse, bool return_counts);
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim_consecutive(const at::Tensor& self, int64_t dim,
                                                                      bool return_inverse, bool return_counts);
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength);
at::Tensor repeat_interleave(const at::Tensor& repeats, std::optional<c10::SymInt> output_size);
void index_with_masks(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);
void multinomial(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

// attention.cpp
void fused_sdp_choice(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

}  // namespace torch_tpu::aten
