#include "ir/ops.h"

#include <iterator>

namespace torch_tpu::ir {
namespace {

// Same order as OpKind and builder.py's OPS.
// clang-format off
constexpr const char* kOpNames[] = {
    "parameter", "constant", "iota", "rng_uniform", "rng_normal",
    "neg", "abs", "sign", "floor", "ceil", "round_even", "trunc",
    "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "cbrt",
    "sin", "cos", "tan", "tanh", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "logistic", "erf", "erfinv", "lgamma", "digamma", "not", "is_finite",
    "add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2",
    "and", "or", "xor", "shl", "shr_arith", "shr_logical",
    "compare", "select", "convert",
    "broadcast_in_dim", "reshape", "transpose", "slice", "dynamic_slice", "dynamic_update_slice",
    "concatenate", "pad", "reverse", "gather", "scatter",
    "reduce", "reduce_window", "scan",
    "dot_general", "convolution",
    "sort",
    "cholesky", "triangular_solve",
};
// clang-format on
static_assert(std::size(kOpNames) == static_cast<size_t>(OpKind::kNumOps),
              "op name table out of sync with OpKind");

}  // namespace

const char* op_name(OpKind kind) {
  auto i = static_cast<size_t>(kind);
  return i < std::size(kOpNames) ? kOpNames[i] : "<invalid>";
}

}  // namespace torch_tpu::ir
