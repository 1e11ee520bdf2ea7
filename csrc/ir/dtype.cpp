#include "ir/dtype.h"

namespace torch_tpu::ir {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kU8:
      return "u8";
    case DType::kI8:
      return "i8";
    case DType::kI16:
      return "i16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kF16:
      return "f16";
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBool:
      return "bool";
    case DType::kBF16:
      return "bf16";
  }
  return "<invalid>";
}

int itemsize(DType t) {
  switch (t) {
    case DType::kU8:
    case DType::kI8:
    case DType::kBool:
      return 1;
    case DType::kI16:
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI32:
    case DType::kF32:
      return 4;
    case DType::kI64:
    case DType::kF64:
      return 8;
  }
  return 0;
}

}  // namespace torch_tpu::ir
