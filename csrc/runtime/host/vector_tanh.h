// float32 tanh for the host runtime (fused clusters and the unfused kernel alike).
//
// Design: ATen's float tanh is MKL's vmsTanh (VML_HA, 0.51 ulp), which the clusters call so
// their bits equal ATen's kernels'. On Intel CPUs it takes ~0.3 ns per element; on AMD EPYC
// machines MKL runs a generic code path for it (1.7-2.7 ns per element, measured on the
// machines this project runs on), and GELU's tanh form puts four tanh passes over a GPT's MLP
// activations in every training step. So tanh_f32 calls MKL on Intel CPUs and elsewhere (AMD,
// no MKL, not x86) computes cephes_tanh_f32: Cephes' tanhf on 8 lanes with GCC's vector
// extensions, an odd polynomial below |x| = 0.625, else 1 - 2 / (e^2|x| + 1) with e^t from
// Cephes' expf (range reduction by ln 2 in two parts, degree-6 polynomial, exponent built in
// the integer lanes), |x| clamped to 10 where tanh rounds to 1. With fused multiply-adds where
// the CPU has AVX2 and FMA (~1.0 ns per element there, against MKL's generic 1.7-2.7), plain
// IEEE operations elsewhere: their last bits differ, but a machine always runs the same one,
// and a lane's bits do not depend on the call's length or offset. At most 1.33 ulp from the
// correctly rounded result (checked on every positive float; tests/cpp/test_vector_tanh.cpp
// samples them), within float32 test tolerances of ATen (OpInfo's rtol 1.3e-6 is ~11 ulp).
// NaN, +-0, +-inf and denormals keep tanh's values. Every choice here is fixed per machine, so
// fused, strict and compiled modes agree on one machine.
#pragma once

#include <cstdint>

namespace torch_tpu::runtime::host {

// d[i] = tanh(a[i]) for i < n (any n; d may be a): MKL's vmsTanh on Intel CPUs, else
// cephes_tanh_f32.
void tanh_f32(float* d, const float* a, int64_t n);

// The 8-lane Cephes tanh (any n; d may be a).
void cephes_tanh_f32(float* d, const float* a, int64_t n);

// Whether tanh_f32 calls MKL on this machine.
bool tanh_uses_mkl();

}  // namespace torch_tpu::runtime::host
