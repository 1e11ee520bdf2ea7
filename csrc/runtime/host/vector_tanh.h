// float32 tanh for the host runtime's fused clusters, computed in vector lanes.
//
// Design: ATen's float tanh is MKL's vmsTanh (VML_HA, 0.51 ulp), which fusion.cpp used to call
// so clusters matched ATen bit for bit. On the AMD EPYC machines this runs on, MKL takes a
// generic path for it (1.7-2.7 ns per element, more than a TinyGPT step's matrix products on
// the same data spend per element), and GELU's tanh form puts four tanh passes over the MLP's
// hidden activations in every training step. This one is Cephes' tanhf on 8 lanes with
// GCC's vector extensions: an odd polynomial below |x| = 0.625, else 1 - 2 / (e^2|x| + 1) with
// e^t from Cephes' expf (range reduction by ln 2 in two parts, degree-6 polynomial, exponent
// built in the integer lanes); |x| is clamped to 10, where tanh rounds to 1. Exact IEEE single
// operations only (no FMA contraction: tile_ops' rule), so every clone and lane gives the same
// bits. Accuracy, checked on every positive float (tests/cpp/test_host_fusion.cpp samples it):
// at most 1.33 ulp from the correctly rounded result, against VML's 0.51; within float32 test
// tolerances (OpInfo compares to CPU at rtol 1.3e-6, about 11 ulp). NaN, +-0, +-inf and
// denormals keep tanh's values (x, x, +-1, x).
#pragma once

#include <cstdint>

namespace torch_tpu::runtime::host {

// d[i] = tanh(a[i]) for i < n (any n; d may be a).
void tanh_f32(float* d, const float* a, int64_t n);

}  // namespace torch_tpu::runtime::host
