// float32 tanh (vector_tanh.h).
#include "runtime/host/vector_tanh.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <climits>
#include <cstring>

#include "runtime/host/mkl_vml.h"

namespace torch_tpu::runtime::host {
namespace {

typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

#define SPLAT(c) (F8{} + (c))
// d[0..8) = tanh(src[0..8)), with MADD(a, b, c) for a * b + c. The below-0.625 branch is
// Cephes' odd polynomial, the other 1 - 2 / (e^2|x| + 1); both are computed for every lane and
// selected, so there are no branches. A macro rather than a function taking vectors: it is
// instantiated once with fused multiply-adds (an avx2+fma function) and once without (the
// portable one), and a vector argument would change the ABI of the portable build.
#define TANH8(d, src)                                                                            \
  do {                                                                                           \
    F8 x;                                                                                        \
    std::memcpy(&x, (src), sizeof x);                                                            \
    const F8 a = (F8)((I8)x & 0x7fffffff);                                                       \
    const F8 z = a * a;                                                                          \
    F8 p = MADD(SPLAT(-5.70498872745e-3f), z, SPLAT(2.06390887954e-2f));                         \
    p = MADD(p, z, SPLAT(-5.37397155531e-2f));                                                   \
    p = MADD(p, z, SPLAT(1.33314422036e-1f));                                                    \
    p = MADD(p, z, SPLAT(-3.33332819422e-1f));                                                   \
    const F8 small = MADD(a * z, p, a);                                                          \
    /* NaN lanes take 10 here: replaced at the end. */                                           \
    F8 t = a < SPLAT(10.f) ? a : SPLAT(10.f);                                                    \
    t = t + t;                                                                                   \
    /* e^t = 2^n e^r, n = round(t / ln 2) (t > 0: truncating t / ln 2 + 0.5 rounds). */          \
    const I8 n = __builtin_convertvector(MADD(t, SPLAT(1.44269504088896341f), SPLAT(0.5f)), I8); \
    const F8 fn = __builtin_convertvector(n, F8);                                                \
    F8 r = MADD(-fn, SPLAT(0.693359375f), t);                                                    \
    r = MADD(-fn, SPLAT(-2.12194440e-4f), r);                                                    \
    F8 q = MADD(SPLAT(1.9875691500e-4f), r, SPLAT(1.3981999507e-3f));                            \
    q = MADD(q, r, SPLAT(8.3334519073e-3f));                                                     \
    q = MADD(q, r, SPLAT(4.1665795894e-2f));                                                     \
    q = MADD(q, r, SPLAT(1.6666665459e-1f));                                                     \
    q = MADD(q, r, SPLAT(5.0000001201e-1f));                                                     \
    F8 e = MADD(q, r * r, r) + SPLAT(1.f);                                                       \
    e = (F8)((I8)e + (n << 23)); /* n <= 29: the exponent stays in range */                      \
    const F8 large = SPLAT(1.f) - SPLAT(2.f) / (e + SPLAT(1.f));                                 \
    F8 y = a < SPLAT(0.625f) ? small : large;                                                    \
    y = (F8)((I8)y | ((I8)x & static_cast<int32_t>(0x80000000u))); /* tanh is odd */             \
    y = x != x ? x : y;                                                                          \
    std::memcpy((d), &y, sizeof y);                                                              \
  } while (false)

// Over any n: 8 lanes at a time, the tail through one padded vector (lanes are independent, so
// a lane's bits do not depend on where a call starts or ends).
#define TANH_LOOP(d, a, n)                                                    \
  do {                                                                        \
    int64_t i = 0;                                                            \
    for (; i + 8 <= (n); i += 8) TANH8((d) + i, (a) + i);                     \
    if (i < (n)) {                                                            \
      float xs[8] = {}, ys[8];                                                \
      std::memcpy(xs, (a) + i, static_cast<size_t>((n) - i) * sizeof(float)); \
      TANH8(ys, xs);                                                          \
      std::memcpy((d) + i, ys, static_cast<size_t>((n) - i) * sizeof(float)); \
    }                                                                         \
  } while (false)

#define MADD(a, b, c) ((a) * (b) + (c))
void cephes_tanh_portable(float* d, const float* a, int64_t n) { TANH_LOOP(d, a, n); }
#undef MADD

#if defined(__x86_64__)
// With fused multiply-adds: ~1.4x faster, and each MADD rounds once (the accuracy bound holds
// for both variants; their last bits differ, but a machine always runs the same one).
#define MADD(a, b, c) ((F8)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
[[gnu::target("avx2,fma")]] void cephes_tanh_fma(float* d, const float* a, int64_t n) { TANH_LOOP(d, a, n); }
#undef MADD
#endif

#undef TANH_LOOP
#undef TANH8
#undef SPLAT

// MKL's tanh where it runs its optimized code (Intel CPUs) and libtorch_cpu exports it.
VmlUnary mkl_tanh() {
  static const VmlUnary f = [] {
#if defined(__x86_64__)
    if (__builtin_cpu_is("intel")) return find_vml("vmsTanh");
#endif
    return VmlUnary{nullptr};
  }();
  return f;
}

}  // namespace

bool tanh_uses_mkl() { return mkl_tanh() != nullptr; }

void tanh_f32(float* d, const float* a, int64_t n) {
  if (VmlUnary f = mkl_tanh()) {
    for (int64_t i = 0; i < n; i += INT_MAX) {
      const int64_t m = std::min<int64_t>(INT_MAX, n - i);
      f(static_cast<int>(m), a + i, d + i, kVmlMode);
    }
    return;
  }
  cephes_tanh_f32(d, a, n);
}

void cephes_tanh_f32(float* d, const float* a, int64_t n) {
#if defined(__x86_64__)
  static const bool fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (fma) return cephes_tanh_fma(d, a, n);
#endif
  cephes_tanh_portable(d, a, n);
}

}  // namespace torch_tpu::runtime::host
