#include "runtime/host/strided_copy.h"

#include <ATen/ops/empty.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace torch_tpu::runtime::host {
namespace {

constexpr int kMaxRank = 64;  // ATen's limit on tensor dims

template <typename T>
void copy_dims(char* dst, const int64_t* ds, const char* src, const int64_t* ss, const int64_t* sizes, int rank) {
  const int64_t n = sizes[rank - 1], di = ds[rank - 1], si = ss[rank - 1];
  // Outer dims walked with a counter (rank - 1 of them, innermost fastest).
  int64_t index[kMaxRank] = {};
  for (;;) {
    if (di == 1 && si == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
    } else {
      T* d = reinterpret_cast<T*>(dst);
      const T* s = reinterpret_cast<const T*>(src);
      for (int64_t i = 0; i < n; ++i) d[i * di] = s[i * si];
    }
    int k = rank - 2;
    for (; k >= 0; --k) {
      dst += ds[k] * static_cast<int64_t>(sizeof(T));
      src += ss[k] * static_cast<int64_t>(sizeof(T));
      if (++index[k] < sizes[k]) break;
      dst -= ds[k] * sizes[k] * static_cast<int64_t>(sizeof(T));
      src -= ss[k] * sizes[k] * static_cast<int64_t>(sizeof(T));
      index[k] = 0;
    }
    if (k < 0) return;
  }
}

}  // namespace

void strided_copy(void* dst, c10::IntArrayRef dst_strides, const void* src, c10::IntArrayRef src_strides,
                  c10::IntArrayRef sizes, size_t element_size) {
  // Drop size-1 dims, then merge a dim into the next inner one where both tensors step over
  // it as one run (stride == inner stride * inner size in each).
  c10::SmallVector<int64_t, 8> n, ds, ss;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return;
    if (sizes[d] == 1) continue;
    if (!n.empty() && ds.back() == dst_strides[d] * sizes[d] && ss.back() == src_strides[d] * sizes[d]) {
      n.back() *= sizes[d];
      ds.back() = dst_strides[d];
      ss.back() = src_strides[d];
      continue;
    }
    n.push_back(sizes[d]);
    ds.push_back(dst_strides[d]);
    ss.push_back(src_strides[d]);
  }
  if (n.empty()) {  // one element
    n.push_back(1);
    ds.push_back(1);
    ss.push_back(1);
  }
  const int rank = static_cast<int>(n.size());
  TPU_CHECK(rank < kMaxRank, "strided_copy: ", rank, " dims");
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  switch (element_size) {
    case 1:
      return copy_dims<uint8_t>(d, ds.data(), s, ss.data(), n.data(), rank);
    case 2:
      return copy_dims<uint16_t>(d, ds.data(), s, ss.data(), n.data(), rank);
    case 4:
      return copy_dims<uint32_t>(d, ds.data(), s, ss.data(), n.data(), rank);
    case 8:
      return copy_dims<uint64_t>(d, ds.data(), s, ss.data(), n.data(), rank);
    case 16: {  // complex double: two 8-byte halves
      c10::SmallVector<int64_t, 9> n2(n.begin(), n.end()), ds2, ss2;
      for (int64_t x : ds) ds2.push_back(2 * x);
      for (int64_t x : ss) ss2.push_back(2 * x);
      n2.push_back(2);
      ds2.push_back(1);
      ss2.push_back(1);
      return copy_dims<uint64_t>(d, ds2.data(), s, ss2.data(), n2.data(), rank + 1);
    }
    default:
      TPU_CHECK(false, "strided_copy: element size ", element_size);
  }
}

void copy_into(const at::Tensor& dst, const at::Tensor& src) {
  TPU_CHECK(dst.sizes().equals(src.sizes()) && dst.scalar_type() == src.scalar_type(),
            "copy_into: sizes or dtypes differ");
  if (dst.numel() == 0) return;
  strided_copy(dst.mutable_data_ptr(), dst.strides(), src.const_data_ptr(), src.strides(), src.sizes(),
               src.element_size());
}

c10::SmallVector<int64_t, 8> row_major_strides(c10::IntArrayRef sizes) {
  c10::SmallVector<int64_t, 8> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d > 1; --d) strides[d - 2] = strides[d - 1] * std::max<int64_t>(sizes[d - 1], 1);
  return strides;
}

at::Tensor reshaped_copy(const at::Tensor& src, c10::IntArrayRef shape) {
  at::Tensor out = at::empty(shape, src.options().memory_format(at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  // out's memory seen in src's sizes: row-major strides of those sizes.
  strided_copy(out.mutable_data_ptr(), row_major_strides(src.sizes()), src.const_data_ptr(), src.strides(), src.sizes(),
               src.element_size());
  return out;
}

void read_logical(const at::Tensor& t, int64_t pos, int64_t n, float* dst) {
  const float* base = t.const_data_ptr<float>();
  const int64_t rank = t.dim();
  if (rank == 0) {
    std::fill_n(dst, n, base[0]);
    return;
  }
  const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
  c10::SmallVector<int64_t, 8> idx(static_cast<size_t>(rank));
  int64_t off = 0;
  for (int64_t d = rank - 1, p = pos; d >= 0; --d) {
    idx[d] = p % sizes[d];
    p /= sizes[d];
    off += idx[d] * strides[d];
  }
  const int64_t last = sizes[rank - 1], step = strides[rank - 1];
  while (n > 0) {
    const int64_t run = std::min(n, last - idx[rank - 1]);
    const float* src = base + off;
    if (step == 1) {
      std::memcpy(dst, src, static_cast<size_t>(run) * sizeof(float));
    } else if (step == 0) {
      std::fill_n(dst, run, src[0]);
    } else {
      for (int64_t i = 0; i < run; ++i) dst[i] = src[i * step];
    }
    dst += run;
    n -= run;
    idx[rank - 1] += run;
    off += run * step;
    for (int64_t d = rank - 1; d > 0 && idx[d] == sizes[d]; --d) {  // carry into the outer dims
      off += strides[d - 1] - sizes[d] * strides[d];
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

}  // namespace torch_tpu::runtime::host
