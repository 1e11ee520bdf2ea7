// rng_uniform / rng_normal: Philox4x32-10 counters turned into floats with builder.py's exact
// bit recipes. Uniform values are exact in their dtype, so they are produced directly; the
// normal transform calls the same ATen ops (log, sqrt, cos in float64) on the same contiguous
// layout as the reference, so even the vectorized math library's rounding matches.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "common/check.h"
#include "runtime/host/kernels.h"
#include "runtime/host/philox.h"

namespace torch_tpu::runtime::host {
namespace {

uint64_t scalar_u64(const at::Tensor& t) { return static_cast<uint64_t>(t.item<int64_t>()); }

template <typename T, typename F>
void fill_uniform(T* out, int64_t n, uint64_t seed, uint64_t offset, F from_words) {
  at::parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[i] = from_words(philox4x32_10(offset + static_cast<uint64_t>(i), seed));
    }
  });
}

at::Tensor uniform(at::ScalarType dtype, c10::IntArrayRef shape, uint64_t seed, uint64_t offset) {
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(dtype));
  const int64_t n = out.numel();
  switch (dtype) {
    case at::kFloat:
      fill_uniform(out.mutable_data_ptr<float>(), n, seed, offset,
                   [](auto w) { return static_cast<float>(w[0] >> 8) * 0x1p-24f; });
      break;
    case at::kHalf:
      fill_uniform(out.mutable_data_ptr<at::Half>(), n, seed, offset,
                   [](auto w) { return at::Half(static_cast<float>(w[0] >> 21) * 0x1p-11f); });
      break;
    case at::kBFloat16:
      fill_uniform(out.mutable_data_ptr<at::BFloat16>(), n, seed, offset,
                   [](auto w) { return at::BFloat16(static_cast<float>(w[0] >> 24) * 0x1p-8f); });
      break;
    case at::kDouble:
      fill_uniform(out.mutable_data_ptr<double>(), n, seed, offset, [](auto w) {
        uint64_t bits53 = (static_cast<uint64_t>(w[0]) << 21) + (w[1] >> 11);
        return static_cast<double>(bits53) * 0x1p-53;
      });
      break;
    default:
      TPU_CHECK(false, "rng_uniform: unsupported dtype ", dtype);
  }
  return out;
}

at::Tensor normal(at::ScalarType dtype, c10::IntArrayRef shape, uint64_t seed, uint64_t offset) {
  at::Tensor u1 = at::empty(shape, at::kDouble), u2 = at::empty(shape, at::kDouble);
  double* p1 = u1.mutable_data_ptr<double>();
  double* p2 = u2.mutable_data_ptr<double>();
  at::parallel_for(0, u1.numel(), 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      auto w = philox4x32_10(offset + static_cast<uint64_t>(i), seed);
      p1[i] = (static_cast<double>(w[0]) + 1.0) * 0x1p-32;
      p2[i] = static_cast<double>(w[1]) * 0x1p-32;
    }
  });
  // Same op sequence as builder.py: sqrt(-2 * log(u1)) * cos((2 * pi) * u2).
  at::Tensor z = at::sqrt(at::log(u1).mul_(-2.0)) * at::cos(u2.mul_(2.0 * M_PI));
  return dtype == at::kDouble ? z : z.to(dtype);
}

}  // namespace

Kernel make_rng_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.kind != ir::OpKind::kRngUniform && n.kind != ir::OpKind::kRngNormal) return {};
  int32_t seed = n.operands[0], offset = n.operands[1];
  at::ScalarType dtype = to_aten(n.dtype);
  std::vector<int64_t> shape = n.shape;
  if (n.kind == ir::OpKind::kRngUniform) {
    return [=](const Values& v, at::Tensor*) {
      return uniform(dtype, shape, scalar_u64(v[seed]), scalar_u64(v[offset]));
    };
  }
  return [=](const Values& v, at::Tensor*) {
    return normal(dtype, shape, scalar_u64(v[seed]), scalar_u64(v[offset]));
  };
}

}  // namespace torch_tpu::runtime::host
