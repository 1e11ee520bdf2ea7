// The arithmetic of a tile cluster's instructions (tile_cluster.h): the vectorized tile loops,
// row and total sums in one summation order, bf16/f16 rounding, and the SLEEF and MKL VML entry
// points libtorch_cpu exports. Internal to the host runtime: tile_cluster_run.cpp runs a
// cluster's program with these, and kernels outside a cluster (cluster_unary_f32,
// cluster_binary_f32, row_sums, total_sum in tile_cluster.h) reuse them so both give ATen's bits.
#pragma once

#include <c10/util/Half.h>

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

#include "runtime/host/clones.h"
#include "runtime/host/mkl_vml.h"
#include "runtime/host/tile_cluster.h"
#include "runtime/host/tile_ops.h"
#include "runtime/host/vector_tanh.h"

namespace torch_tpu::runtime::host::tile {

// The tile op of an IR elementwise op (kNoOp where the tile loops have none).
Op unary_op(ir::OpKind k);
Op binary_op(ir::OpKind k);

// One op over n elements (a multiple of 8) of float tile buffers; ma, mb, mc: operand masks
// (~0 streams the operand, 0 reads its first group every time: a tile-invariant operand).
void exec_op(uint8_t op, float* __restrict d, const float* __restrict a, const float* __restrict b,
             const float* __restrict c, int64_t n, int64_t ma, int64_t mb, int64_t mc);
#if defined(__x86_64__)
void exec_op_avx512(uint8_t op, float* __restrict d, const float* __restrict a, const float* __restrict b,
                    const float* __restrict c, int64_t n, int64_t ma, int64_t mb, int64_t mc);
#endif

// The summation order of every float32 row sum (tile_cluster.h, row_sums): 32 lanes, lane j adding
// elements j, j + 32, j + 64, ... in sequence (the last partial group of 32 zero-padded: +0.0
// leaves a lane unchanged, and a lane that starts at +0.0 never holds -0.0), then the lanes
// pairwise (lane j += lane j + 16, then + 8, + 4, + 2, + 1). Each lane is an independent chain
// of IEEE additions, so the AVX2 clone, the default (SSE) clone and a scalar build give the
// same bits. Four 8-wide accumulators in registers hide the add latency (an array of 32
// floats stayed on the stack: a store-to-load chain per add, half ATen's speed), and each
// lane adds at most kMaxRow / 32 terms, so the rounding error stays near ATen's cascade sum.
typedef float RowVec __attribute__((vector_size(32)));
typedef int32_t RowMask __attribute__((vector_size(32)));

// row_sum_one's lanes as state, so a sum can be fed in pieces (a total sum's tiles, below):
// pieces whose lengths are multiples of 32, then one of any length, add in the same order as
// one call over the whole.
struct LaneSums {
  RowVec a0 = {}, a1 = {}, a2 = {}, a3 = {};
};

[[gnu::always_inline]] inline void lane_sums_add(LaneSums& s, const float* __restrict x, int64_t m) {
  RowVec v0, v1, v2, v3;
  int64_t i = 0;
  for (; i + 32 <= m; i += 32) {
    std::memcpy(&v0, x + i, sizeof(RowVec));
    std::memcpy(&v1, x + i + 8, sizeof(RowVec));
    std::memcpy(&v2, x + i + 16, sizeof(RowVec));
    std::memcpy(&v3, x + i + 24, sizeof(RowVec));
    s.a0 += v0;
    s.a1 += v1;
    s.a2 += v2;
    s.a3 += v3;
  }
  if (i < m && (m - i) % 8 == 0) {
    // The usual short rows (8, 16, 24 elements left): the zero-padded groups below without the
    // detour through a stack buffer (a store-to-load stall per row: rows of 16 took 25 ns each).
    const RowVec zero = {};
    std::memcpy(&v0, x + i, sizeof(RowVec));
    v1 = zero;
    v2 = zero;
    if (m - i >= 16) std::memcpy(&v1, x + i + 8, sizeof(RowVec));
    if (m - i >= 24) std::memcpy(&v2, x + i + 16, sizeof(RowVec));
    s.a0 += v0;
    s.a1 += v1;
    s.a2 += v2;
    s.a3 += zero;
  } else if (i < m) {
    float tail[32] = {};
    std::memcpy(tail, x + i, static_cast<size_t>(m - i) * sizeof(float));
    std::memcpy(&v0, tail, sizeof(RowVec));
    std::memcpy(&v1, tail + 8, sizeof(RowVec));
    std::memcpy(&v2, tail + 16, sizeof(RowVec));
    std::memcpy(&v3, tail + 24, sizeof(RowVec));
    s.a0 += v0;
    s.a1 += v1;
    s.a2 += v2;
    s.a3 += v3;
  }
}

[[gnu::always_inline]] inline float lane_sums_finish(const LaneSums& s) {
  RowVec a0 = s.a0 + s.a2, a1 = s.a1 + s.a3;  // lanes 0-15 += lanes 16-31
  a0 += a1;                                   // lanes 0-7 += lanes 8-15
  float l[8];
  std::memcpy(l, &a0, sizeof l);
  for (int j = 0; j < 4; ++j) l[j] += l[j + 4];
  l[0] += l[2];
  l[1] += l[3];
  return l[0] + l[1];
}

float row_sum_one(const float* __restrict x, int64_t m);
// One tile of a total sum's block (a multiple of 32 elements, or the tensor's last tile).
void lane_sums_add_tile(LaneSums& s, const float* __restrict x, int64_t m);
// A reduction over each row of m elements of a (n is a multiple of m): d[r] gets row r's
// result (per-row values are held compactly, tile_cluster.h). Sums add in row_sum_one's order
// (the order of the sum kernel too); max and min propagate NaN like amax/amin and are exact.
void exec_row(uint8_t op, float* __restrict d, const float* __restrict a, int64_t n, int64_t m);

// Round-to-nearest-even to bf16 and back (c10::BFloat16's rounding, NaN -> 0x7fc0).
inline uint16_t bf16_bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  return x != x ? uint16_t{0x7fc0} : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
void round_bf16(float* __restrict d, int64_t n);
void round_f16(float* d, int64_t n);

// SLEEF's 8-wide (and, where ATen runs AVX512 kernels, 16-wide) 1-ulp functions, looked up in
// libtorch_cpu at run time. True when they were found (AVX2 and FMA machines).
bool sleef_available();
// Runs `op` with SLEEF if it has the op; false otherwise. n is a multiple of 8.
bool exec_sleef(uint8_t op, float* __restrict d, const float* __restrict a, const float* __restrict b, int64_t n,
                int64_t ma, int64_t mb);

// MKL VML's float functions for the ops ATen computes with them (null where absent).
const std::array<VmlUnary, kNoOp>& vml();
// VML's exp without its slow underflow path (lanes below -110 are +0 under any rounding).
void vml_exp(VmlUnary f, int64_t n, const float* a, float* d);
// pow with a tile-invariant exponent as ATen's CPU kernel computes it: the op to run instead.
uint8_t pow_as(float exponent, int16_t& b, int16_t a);
void pow_bf16_products(uint8_t op, float* __restrict d, const float* __restrict a, int64_t n, int64_t ma);


// One elementwise instruction over n elements (n8: n rounded up to 8, the lanes computed).
template <typename SlotFn>
void exec_instr(const Cluster::Instr& instr, SlotFn slot, int64_t n, int64_t n8, bool use_sleef) {
  Cluster::Instr in = instr;
  if (in.pow_scalar) {
    in.op = pow_as(slot(in.b)[0], in.b, in.a);
    if (in.b == in.a) in.fixed = static_cast<uint8_t>((in.fixed & ~2) | ((in.fixed & 1) << 1));  // x * x
  }
  float* d = slot(in.dst);
  const int64_t ma = in.fixed & 1 ? 0 : -1, mb = in.fixed & 2 ? 0 : -1, mc = in.fixed & 4 ? 0 : -1;
  if (in.round == 1 && (in.op == kCube || in.op == kReciprocalSquare)) {
    pow_bf16_products(in.op, d, slot(in.a), n8, ma);
  } else if (in.op == kTanh) {
    tanh_f32(d, slot(in.a), n8);
  } else if (VmlUnary f = vml()[in.op]) {  // n8 <= a tile buffer, or an in-place operand's length
    if (in.op == kExp) {
      vml_exp(f, n8, slot(in.a), d);
    } else {
      f(static_cast<int>(n8), slot(in.a), d, kVmlMode);
    }
  } else if (!(use_sleef && exec_sleef(in.op, d, slot(in.a), slot(in.b), n8, ma, mb))) {
#if defined(__x86_64__)
    if (avx512_lanes())
      exec_op_avx512(in.op, d, slot(in.a), slot(in.b), slot(in.c), n8, ma, mb, mc);
    else
#endif
      exec_op(in.op, d, slot(in.a), slot(in.b), slot(in.c), n8, ma, mb, mc);
  }
  if (in.round == 1) round_bf16(d, n8);
  if (in.round == 2) round_f16(d, n);
}

}  // namespace torch_tpu::runtime::host::tile
