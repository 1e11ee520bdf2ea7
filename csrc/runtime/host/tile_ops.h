// The operations of a cluster's tile program (tile_cluster.h): shared by the interpreter (tile_cluster_run.cpp)
// and the native kernel generator (native_codegen.cpp).
#pragma once

#include <cstdint>

namespace torch_tpu::runtime::host {

// Tile operations. Unary ops read a; binary a, b; select a ? b : c.
enum Op : uint8_t {
  kCopy,
  kNeg,
  kAbs,
  kSign,
  kFloor,
  kCeil,
  kRound,
  kTrunc,
  kExp,
  kExpm1,
  kLog,
  kLog1p,
  kSqrt,
  kRsqrt,
  kCbrt,
  kSin,
  kCos,
  kTan,
  kTanh,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kAsinh,
  kAcosh,
  kAtanh,
  kLogistic,
  kErf,
  kLgamma,
  kNotBool,
  kIsFinite,
  kToBool,
  kCube,              // x * x * x: pow(x, 3) (pow_as, tile_math.cpp)
  kReciprocal,        // 1 / x: pow(x, -1)
  kReciprocalSquare,  // 1 / (x * x): pow(x, -2)
  kAdd,
  kSub,
  kMul,
  kDiv,
  kRem,
  kPow,
  kMax,
  kMin,
  kAtan2,
  kAnd,
  kOr,
  kXor,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kSelect,
  kRowSum,  // row clusters: a's row reduced, broadcast over d's row
  kRowMax,
  kRowMin,
  kNoOp  // not an op: "not fusible"
};

}  // namespace torch_tpu::runtime::host
