// IR operation kinds.
//
// Design: `OpKind` mirrors the `OPS` tuple of torch_tpu/ir/builder.py one to one (the op id
// on the wire is the enum value), so the order is append-only and must match Python exactly;
// tests/ir/test_host_vs_reference.py compares the two name lists. Op semantics and attribute
// layouts are documented in docs/ir.md.
#pragma once

#include <cstdint>

namespace torch_tpu::ir {

// Grouped like builder.py's OPS.
// clang-format off
enum class OpKind : uint8_t {
  // leaves
  kParameter, kConstant, kIota, kRngUniform, kRngNormal,
  // unary elementwise
  kNeg, kAbs, kSign, kFloor, kCeil, kRoundEven, kTrunc,
  kExp, kExpm1, kLog, kLog1p, kSqrt, kRsqrt, kCbrt,
  kSin, kCos, kTan, kTanh, kAsin, kAcos, kAtan, kSinh, kCosh, kAsinh, kAcosh, kAtanh,
  kLogistic, kErf, kErfinv, kLgamma, kDigamma, kNot, kIsFinite,
  // binary elementwise
  kAdd, kSub, kMul, kDiv, kRem, kPow, kMax, kMin, kAtan2,
  kAnd, kOr, kXor, kShl, kShrArith, kShrLogical,
  // other elementwise
  kCompare, kSelect, kConvert,
  // data movement
  kBroadcastInDim, kReshape, kTranspose, kSlice, kDynamicSlice, kDynamicUpdateSlice,
  kConcatenate, kPad, kReverse, kGather, kScatter,
  // reductions and scans
  kReduce, kReduceWindow, kScan,
  // contractions
  kDotGeneral, kConvolution,
  // sorting
  kSort,
  // linear algebra
  kCholesky, kTriangularSolve,
  kNumOps  // not an op: the count
};
// clang-format on

inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kNumOps);

// The builder.py name of `kind` ("add", "dot_general", ...); "<invalid>" out of range.
const char* op_name(OpKind kind);

// Op classes (the ranges follow the enum's grouping).
constexpr bool is_unary_elementwise(OpKind k) {
  return k >= OpKind::kNeg && k <= OpKind::kIsFinite;
}
constexpr bool is_binary_elementwise(OpKind k) {
  return k >= OpKind::kAdd && k <= OpKind::kShrLogical;
}
// Every output element depends only on the operands' elements at the same index.
constexpr bool is_elementwise(OpKind k) {
  return is_unary_elementwise(k) || is_binary_elementwise(k) || k == OpKind::kCompare || k == OpKind::kSelect ||
         k == OpKind::kConvert;
}

// Attribute enums (the integer encodings in iattrs).
enum class CompareDir : int64_t { kEq, kNe, kLt, kLe, kGt, kGe };
enum class ReduceKind : int64_t { kSum, kProd, kMax, kMin, kAnd, kOr, kArgmax, kArgmin };
enum class WindowKind : int64_t { kSum, kMax, kMin };
enum class ScanKind : int64_t { kSum, kProd, kMax, kMin };
enum class ScatterMode : int64_t { kReplace, kAdd, kMul, kMax, kMin };

// pow's optional attribute [1]: the exponent is a Python number (ATen's pow.Tensor_Scalar), so
// a runtime may compute x^2 as x*x, x^-1 as 1/x, ... as ATen's scalar-exponent kernel does (CPU's
// bits for that overload). Without it (a tensor exponent, pow.Tensor_Tensor) pow is the general
// function even where the exponent is one broadcast value, as in ATen.
inline constexpr int64_t kPowScalarExponent = 1;

// Reserved parameter bindings for the RNG state (binding >= 0 are runtime binding slots).
inline constexpr int64_t kRngSeedBinding = -1;
inline constexpr int64_t kRngOffsetBinding = -2;

}  // namespace torch_tpu::ir
