// The host runtime's 8-lane float32 tanh (cephes_tanh_f32, runtime/host/vector_tanh.h, used
// where MKL's is slow or absent): accuracy against the correctly rounded result, special
// values, and lane independence (any length and offset, in place).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/host/mkl_vml.h"
#include "runtime/host/vector_tanh.h"

namespace torch_tpu::runtime::host {
namespace {

// |got - tanh(x)| in units of the float spacing at the correctly rounded result.
double ulp_error(float x, float got) {
  const double exact = std::tanh(static_cast<double>(x));
  const float rounded = std::fabs(static_cast<float>(exact));
  const float next = std::nextafter(rounded, std::numeric_limits<float>::infinity());
  return std::fabs(static_cast<double>(got) - exact) / (static_cast<double>(next) - rounded);
}

TEST(VectorTanh, WithinOneAndAThirdUlpOnSampledFloats) {
  // Every 509th bit pattern of the positive floats below infinity (4.2M values, every binade),
  // and their negatives; the header records 1.33 ulp as the maximum over every float.
  std::vector<float> x;
  for (uint32_t u = 0; u < 0x7f800000u; u += 509) x.push_back(std::bit_cast<float>(u));
  const size_t half = x.size();
  for (size_t i = 0; i < half; ++i) x.push_back(-x[i]);
  std::vector<float> y(x.size());
  cephes_tanh_f32(y.data(), x.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = ulp_error(x[i], y[i]);
    if (e > worst) {
      worst = e;
      worst_x = x[i];
    }
  }
  EXPECT_LE(worst, 1.34) << "at x = " << worst_x;
}

TEST(VectorTanh, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float denormal = std::numeric_limits<float>::denorm_min() * 77;
  std::vector<float> x = {0.f, -0.f, inf, -inf, std::nanf(""), denormal, -denormal, 9.1f, 10.f, 1e30f, -1e30f};
  std::vector<float> y(x.size());
  cephes_tanh_f32(y.data(), x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(std::bit_cast<uint32_t>(y[0]), 0u);
  EXPECT_EQ(std::bit_cast<uint32_t>(y[1]), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(y[2], 1.f);
  EXPECT_EQ(y[3], -1.f);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[5], denormal);  // tanh(x) rounds to x this close to 0
  EXPECT_EQ(y[6], -denormal);
  for (size_t i = 7; i < 10; ++i) EXPECT_EQ(y[i], 1.f) << x[i];  // tanh(9.1) rounds to 1 in float
  EXPECT_EQ(y[10], -1.f);
}

TEST(VectorTanh, LanesAreIndependentOfLengthOffsetAndAliasing) {
  std::vector<float> x(203);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.037f - 3.7f;
  std::vector<float> whole(x.size());
  cephes_tanh_f32(whole.data(), x.data(), static_cast<int64_t>(x.size()));
  for (int64_t offset : {0, 1, 5}) {
    for (int64_t n : {1, 7, 8, 9, 100}) {
      std::vector<float> part(x.begin() + offset, x.begin() + offset + n);
      cephes_tanh_f32(part.data(), part.data(), n);  // in place
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(std::bit_cast<uint32_t>(part[i]), std::bit_cast<uint32_t>(whole[offset + i]))
            << "offset " << offset << " n " << n << " i " << i;
      }
    }
  }
}

TEST(VectorTanh, MklOnIntelCpusElseCephes) {
  // tanh_f32 is MKL's VML_HA tanh (ATen's) where MKL runs its optimized code, else Cephes'.
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.013f - 6.5f;
  std::vector<float> got(x.size()), want(x.size());
  tanh_f32(got.data(), x.data(), static_cast<int64_t>(x.size()));
  if (tanh_uses_mkl()) {
    VmlUnary vml = find_vml("vmsTanh");
    ASSERT_NE(vml, nullptr);
    vml(static_cast<int>(x.size()), x.data(), want.data(), kVmlMode);
  } else {
    cephes_tanh_f32(want.data(), x.data(), static_cast<int64_t>(x.size()));
  }
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]));
}

}  // namespace
}  // namespace torch_tpu::runtime::host
