// How a tile cluster reads its external operands and writes its destinations: a tensor seen in
// the cluster's row-major element order (coalesced dims), read into and written from float tile
// buffers with ATen's conversions. Internal to the host runtime (tile_cluster_run.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdint>

#include "common/check.h"
#include "runtime/host/tile_math.h"

namespace torch_tpu::runtime::host::tile {

// A tensor seen as the cluster's row-major element order: coalesced dims (size-1 dims dropped,
// mergeable neighbours merged), innermost last.
struct Access {
  char* base = nullptr;
  at::ScalarType dtype = at::kFloat;
  c10::SmallVector<int64_t, 6> sizes, strides;
  bool contiguous() const { return sizes.size() == 1 && strides[0] == 1; }
  bool uniform() const {
    return std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 0; });
  }
};

inline Access make_access(void* base, at::ScalarType dtype, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  Access a;
  a.base = static_cast<char*>(base);
  a.dtype = dtype;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!a.sizes.empty() && a.strides.back() == strides[d] * sizes[d]) {
      a.sizes.back() *= sizes[d];
      a.strides.back() = strides[d];
    } else {
      a.sizes.push_back(sizes[d]);
      a.strides.push_back(strides[d]);
    }
  }
  if (a.sizes.empty()) {  // one element
    a.sizes.push_back(1);
    a.strides.push_back(1);
  }
  return a;
}

template <typename T>
inline float load_one(const T* p) {
  if constexpr (std::is_same_v<T, bool>) {
    return *reinterpret_cast<const uint8_t*>(p) != 0 ? 1.f : 0.f;
  } else if constexpr (std::is_same_v<T, at::BFloat16>) {
    return bf16_value(reinterpret_cast<const uint16_t*>(p)[0]);
  } else {
    return static_cast<float>(*p);  // static_cast<float>: ATen's conversion
  }
}

template <typename T>
inline void store_one(T* p, float x) {
  if constexpr (std::is_same_v<T, bool>) {
    *reinterpret_cast<uint8_t*>(p) = x != 0.f;
  } else if constexpr (std::is_same_v<T, at::BFloat16>) {
    *reinterpret_cast<uint16_t*>(p) = bf16_bits(x);
  } else {
    *p = static_cast<T>(x);
  }
}

// Visits elements [start, start + n) of `a` in row-major order as runs along the innermost
// dim: fn(element offset of the run's first element, inner stride, run length, tile position).
template <typename Fn>
void for_runs(const Access& a, int64_t start, int64_t n, Fn fn) {
  const int64_t r = static_cast<int64_t>(a.sizes.size());
  if (r == 1) {
    fn(start * a.strides[0], a.strides[0], n, int64_t{0});
    return;
  }
  int64_t idx[16];
  TPU_CHECK(r <= 16, "host fusion: rank ", r, " after coalescing exceeds 16");
  int64_t off = 0, rest = start;
  for (int64_t d = r - 1; d >= 0; --d) {
    idx[d] = rest % a.sizes[d];
    rest /= a.sizes[d];
    off += idx[d] * a.strides[d];
  }
  const int64_t inner = a.sizes[r - 1], st = a.strides[r - 1];
  for (int64_t k = 0; k < n;) {
    int64_t run = std::min(inner - idx[r - 1], n - k);
    fn(off, st, run, k);
    k += run;
    idx[r - 1] += run;
    off += run * st;
    if (idx[r - 1] < inner) continue;
    off -= inner * st;
    idx[r - 1] = 0;
    for (int64_t d = r - 2; d >= 0; --d) {
      off += a.strides[d];
      if (++idx[d] < a.sizes[d]) break;
      off -= a.sizes[d] * a.strides[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
void gather(const Access& a, int64_t start, int64_t n, float* __restrict out) {
  const T* base = reinterpret_cast<const T*>(a.base);
  for_runs(a, start, n, [&](int64_t off, int64_t st, int64_t len, int64_t pos) {
    const T* p = base + off;
    float* o = out + pos;
    if (st == 1) {
      for (int64_t i = 0; i < len; ++i) o[i] = load_one(p + i);
    } else if (st == 0) {
      float v = load_one(p);
      for (int64_t i = 0; i < len; ++i) o[i] = v;
    } else {
      for (int64_t i = 0; i < len; ++i) o[i] = load_one(p + i * st);
    }
  });
}

template <typename T>
void scatter(const Access& a, int64_t start, int64_t n, const float* __restrict in) {
  T* base = reinterpret_cast<T*>(a.base);
  for_runs(a, start, n, [&](int64_t off, int64_t st, int64_t len, int64_t pos) {
    T* p = base + off;
    const float* s = in + pos;
    if (st == 1) {
      for (int64_t i = 0; i < len; ++i) store_one(p + i, s[i]);
    } else {
      for (int64_t i = 0; i < len; ++i) store_one(p + i * st, s[i]);
    }
  });
}


// Elements [start, start + n) of `a` into (out of) a float tile buffer.
void load(const Access& a, int64_t start, int64_t n, float* out);
void store(const Access& a, int64_t start, int64_t n, const float* in);

}  // namespace torch_tpu::runtime::host::tile
