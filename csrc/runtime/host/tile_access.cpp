// Loads and stores of tile_access.h, per dtype.
#include "runtime/host/tile_access.h"

namespace torch_tpu::runtime::host::tile {

#define TPU_TILE_DTYPES(_)                                                                                    \
  _(at::kFloat, float)                                                                                        \
  _(at::kBFloat16, at::BFloat16)                                                                              \
  _(at::kHalf, at::Half)                                                                                      \
  _(at::kBool, bool) _(at::kDouble, double) _(at::kByte, uint8_t) _(at::kChar, int8_t) _(at::kShort, int16_t) \
      _(at::kInt, int32_t) _(at::kLong, int64_t)

void load(const Access& a, int64_t start, int64_t n, float* out) {
  switch (a.dtype) {
#define CASE(ST, T) \
  case ST:          \
    return gather<T>(a, start, n, out);
    TPU_TILE_DTYPES(CASE)
#undef CASE
    default:
      TPU_CHECK(false, "host fusion: cannot load dtype ", a.dtype);
  }
}

void store(const Access& a, int64_t start, int64_t n, const float* in) {
  switch (a.dtype) {
    case at::kFloat:
      return scatter<float>(a, start, n, in);
    case at::kBFloat16:
      return scatter<at::BFloat16>(a, start, n, in);
    case at::kHalf:
      return scatter<at::Half>(a, start, n, in);
    case at::kBool:
      return scatter<bool>(a, start, n, in);
    default:
      TPU_CHECK(false, "host fusion: cannot store dtype ", a.dtype);
  }
}

}  // namespace torch_tpu::runtime::host::tile
