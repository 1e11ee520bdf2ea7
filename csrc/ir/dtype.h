// IR element types.
//
// Design: the enum values are the c10::ScalarType codes, so the wire format, the IR and ATen
// share one encoding and conversions are casts (the runtime static_asserts this). Only the ten
// dtypes of builder.py's DTYPES are valid IR types.
#pragma once

#include <cstdint>

namespace torch_tpu::ir {

enum class DType : int8_t {
  kU8 = 0,
  kI8 = 1,
  kI16 = 2,
  kI32 = 3,
  kI64 = 4,
  kF16 = 5,
  kF32 = 6,
  kF64 = 7,
  kBool = 11,
  kBF16 = 15,
};

// True for the ten codes above (the wire format carries raw integers).
constexpr bool is_valid_dtype(int code) {
  return (code >= 0 && code <= 7) || code == 11 || code == 15;
}
constexpr bool is_float(DType t) {
  return t == DType::kF16 || t == DType::kF32 || t == DType::kF64 || t == DType::kBF16;
}
constexpr bool is_integer(DType t) {  // bool excluded
  return t == DType::kU8 || t == DType::kI8 || t == DType::kI16 || t == DType::kI32 ||
         t == DType::kI64;
}

// Short StableHLO-style name: "f32", "bf16", "i64", "u8", "i1" is spelled "bool".
const char* dtype_name(DType t);
// Bytes per element (0 for an invalid value).
int itemsize(DType t);

}  // namespace torch_tpu::ir
