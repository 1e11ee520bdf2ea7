// Strided copies without ATen's dispatch: the data movement inside a program's run.
//
// Design: a host program's copies (a reshape of a transposed value, a concatenate's operands
// into their slices, gathered rows) are small, and in a run each ATen copy_ / index_select /
// index_add cost several times its warm-loop time (dispatch, TensorIterator set-up and their
// code evicted by the kernels between them; TinyGPT's 16K-element copies took 20-30 µs in a
// training step). These loops touch only the data: dims that are contiguous in both tensors
// merge, an innermost run contiguous in both is one memcpy, anything else an element loop.
// Any dtype (copied by element size); the caller guarantees same sizes and no overlap.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>

namespace torch_tpu::runtime::host {

// dst[i] = src[i] over `sizes` (strides in elements, of either sign or zero in src).
void strided_copy(void* dst, c10::IntArrayRef dst_strides, const void* src, c10::IntArrayRef src_strides,
                  c10::IntArrayRef sizes, size_t element_size);

// dst (any strides) = src (same sizes and dtype, any strides): strided_copy on the tensors.
void copy_into(const at::Tensor& dst, const at::Tensor& src);

// Row-major strides of `sizes` (in elements).
c10::SmallVector<int64_t, 8> row_major_strides(c10::IntArrayRef sizes);

// A new contiguous tensor of `shape` (src's element count) holding src's values in row-major
// order: a reshape that cannot view src.
at::Tensor reshaped_copy(const at::Tensor& src, c10::IntArrayRef shape);

// Copies elements [pos, pos + n) of t (float32, any strides, pos + n <= numel) in logical
// (row-major) order into dst. Sums over a strided operand read it in pieces through this
// instead of making it contiguous: a broadcast (stride-0) view, `x.expand(2**29).sum()`, would
// otherwise be materialized at its full size (2 GiB), outside the device memory cap.
void read_logical(const at::Tensor& t, int64_t pos, int64_t n, float* dst);

}  // namespace torch_tpu::runtime::host
