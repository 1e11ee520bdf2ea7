// MKL's vector math functions (VML), as ATen's float kernels call them.
//
// libtorch_cpu exports VML where PyTorch is built with MKL; ATen calls its float exp, log, sin,
// ... with these mode bits, so a function looked up here and called with kVmlMode gives ATen's
// bits (tile_math.cpp's cluster transcendentals, vector_tanh.h's tanh on Intel CPUs).
#pragma once

#include <dlfcn.h>

namespace torch_tpu::runtime::host {

using VmlUnary = void (*)(int n, const float* a, float* r, long long mode);
constexpr long long kVmlMode = 0x2 | 0x140000 | 0x100;  // VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE, as ATen

// The VML function `name` ("vmsTanh", "vmsExp", ...) of the loaded libraries, or null.
inline VmlUnary find_vml(const char* name) { return reinterpret_cast<VmlUnary>(dlsym(RTLD_DEFAULT, name)); }

}  // namespace torch_tpu::runtime::host
