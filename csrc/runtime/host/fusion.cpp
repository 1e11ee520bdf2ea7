// Fused elementwise clusters (fusion.h): building the tile program and running it.
#include "runtime/host/fusion.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <c10/util/Half.h>
#include <dlfcn.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "common/check.h"
#include "runtime/host/clones.h"
#include "runtime/host/column_sums.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/kernels.h"
#include "runtime/host/mkl_vml.h"
#include "runtime/host/native_kernels.h"
#include "runtime/host/tile_ops.h"
#include "runtime/host/vector_tanh.h"

namespace torch_tpu::runtime::host {

bool avx512_lanes() {
#if defined(__x86_64__)
  static const bool yes = __builtin_cpu_supports("avx512f") && at::get_cpu_capability() == "AVX512";
  return yes;
#else
  return false;
#endif
}

namespace {

using ir::DType;
using ir::OpKind;

// Dtypes whose values the float tile buffers hold exactly.
bool exact(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kBool; }
bool exact_float(DType t) { return t != DType::kBool && exact(t); }

Op unary_op(OpKind k) {
  switch (k) {
    // clang-format off
    case OpKind::kNeg: return kNeg;        case OpKind::kAbs: return kAbs;
    case OpKind::kSign: return kSign;      case OpKind::kFloor: return kFloor;
    case OpKind::kCeil: return kCeil;      case OpKind::kRoundEven: return kRound;
    case OpKind::kTrunc: return kTrunc;    case OpKind::kExp: return kExp;
    case OpKind::kExpm1: return kExpm1;    case OpKind::kLog: return kLog;
    case OpKind::kLog1p: return kLog1p;    case OpKind::kSqrt: return kSqrt;
    case OpKind::kRsqrt: return kRsqrt;    case OpKind::kCbrt: return kCbrt;
    case OpKind::kSin: return kSin;        case OpKind::kCos: return kCos;
    case OpKind::kTan: return kTan;        case OpKind::kTanh: return kTanh;
    case OpKind::kAsin: return kAsin;      case OpKind::kAcos: return kAcos;
    case OpKind::kAtan: return kAtan;      case OpKind::kSinh: return kSinh;
    case OpKind::kCosh: return kCosh;      case OpKind::kAsinh: return kAsinh;
    case OpKind::kAcosh: return kAcosh;    case OpKind::kAtanh: return kAtanh;
    case OpKind::kLogistic: return kLogistic; case OpKind::kErf: return kErf;
    case OpKind::kLgamma: return kLgamma;  case OpKind::kNot: return kNotBool;
    case OpKind::kIsFinite: return kIsFinite;
    default: return kNoOp;  // erfinv, digamma: no accurate std:: function
      // clang-format on
  }
}

Op binary_op(OpKind k) {
  switch (k) {
    // clang-format off
    case OpKind::kAdd: return kAdd;  case OpKind::kSub: return kSub;  case OpKind::kMul: return kMul;
    case OpKind::kDiv: return kDiv;  case OpKind::kRem: return kRem;  case OpKind::kPow: return kPow;
    case OpKind::kMax: return kMax;  case OpKind::kMin: return kMin;  case OpKind::kAtan2: return kAtan2;
    case OpKind::kAnd: return kAnd;  case OpKind::kOr: return kOr;    case OpKind::kXor: return kXor;
    default: return kNoOp;  // shifts: integers only
      // clang-format on
  }
}

// The tile op of a fusible node (kNoOp for broadcast_in_dim, which is a load).
Op node_op(const ir::Node& n, const ir::Graph& g) {
  if (ir::is_unary_elementwise(n.kind)) return unary_op(n.kind);
  if (ir::is_binary_elementwise(n.kind)) return binary_op(n.kind);
  switch (n.kind) {
    case OpKind::kCompare:
      return static_cast<Op>(kEq + n.iattrs.at(0));
    case OpKind::kSelect:
      return kSelect;
    case OpKind::kConvert:
      return n.dtype == DType::kBool ? kToBool : kCopy;
    default:
      return kNoOp;
  }
}

// ---- tile loops: fixed groups of 8 or 16 so GCC vectorizes them at -O2 (n is a multiple of 8) ----

// x, y, z: the operands' elements, loaded unconditionally so selects become vector blends.
// G elements per group: 8 (one AVX2 vector) or 16 (one AVX512 vector); n is a multiple of G.
// Operand masks (ma, mb, mc): ~0 reads the operand's group at i0; 0 reads its first group every
// time (a tile-invariant operand: the same value in every lane, kept in L1 instead of streamed).
#define TILE_LOOP(OPERANDS, BODY)         \
  for (int64_t i0 = 0; i0 < n; i0 += G) { \
    OPERANDS                              \
    for (int64_t i = 0; i < G; ++i) {     \
      BODY                                \
    }                                     \
  }                                       \
  break;
#define EW1(EXPR)                                                                        \
  TILE_LOOP(const float* pa = a + (i0 & ma); float* pd = d + i0;, const float x = pa[i]; \
            pd[i] = static_cast<float>(EXPR);)
#define EW2(EXPR)                                                                                 \
  TILE_LOOP(const float* pa = a + (i0 & ma); const float* pb = b + (i0 & mb); float* pd = d + i0; \
            , const float x = pa[i]; const float y = pb[i]; pd[i] = static_cast<float>(EXPR);)
#define EW3(EXPR)                                                                                              \
  TILE_LOOP(const float* pa = a + (i0 & ma); const float* pb = b + (i0 & mb); const float* pc = c + (i0 & mc); \
            float* pd = d + i0;, const float x = pa[i]; const float y = pb[i]; const float z = pc[i];          \
            pd[i] = static_cast<float>(EXPR);)

// Inlined into each target's entry point below, which decides the vector width.
template <int64_t G>
[[gnu::always_inline]] inline void exec_op_groups(uint8_t op, float* __restrict d, const float* __restrict a,
                                                  const float* __restrict b, const float* __restrict c, int64_t n,
                                                  int64_t ma, int64_t mb, int64_t mc) {
  constexpr float kThird = static_cast<float>(1.0 / 3.0);  // ATen casts the double exponent
  switch (op) {
    // clang-format off
    case kCopy: EW1(x)
    case kNeg: EW1(-x)
    case kAbs: EW1(std::fabs(x))
    case kSign: EW1((x > 0.f ? 1.f : 0.f) - (x < 0.f ? 1.f : 0.f))  // NaN -> 0 like ATen
    case kFloor: EW1(std::floor(x))
    case kCeil: EW1(std::ceil(x))
    case kRound: EW1(std::nearbyint(x))  // half to even (default rounding mode)
    case kTrunc: EW1(std::trunc(x))
    case kExp: EW1(std::exp(x))
    case kExpm1: EW1(std::expm1(x))
    case kLog: EW1(std::log(x))
    case kLog1p: EW1(std::log1p(x))
    case kSqrt: EW1(std::sqrt(x))
    case kRsqrt: EW1(1.f / std::sqrt(x))
    // sign(a) * |a|^(1/3): the reference's recipe (keeps -0 and NaN like it does).
    case kCbrt: EW1(((x > 0.f ? 1.f : 0.f) - (x < 0.f ? 1.f : 0.f)) * std::pow(std::fabs(x), kThird))
    case kSin: EW1(std::sin(x))
    case kCos: EW1(std::cos(x))
    case kTan: EW1(std::tan(x))
    case kTanh: EW1(std::tanh(x))
    case kAsin: EW1(std::asin(x))
    case kAcos: EW1(std::acos(x))
    case kAtan: EW1(std::atan(x))
    case kSinh: EW1(std::sinh(x))
    case kCosh: EW1(std::cosh(x))
    case kAsinh: EW1(std::asinh(x))
    case kAcosh: EW1(std::acosh(x))
    case kAtanh: EW1(std::atanh(x))
    case kLogistic: EW1(1.f / (1.f + std::exp(-x)))  // ATen's sigmoid formula
    case kErf: EW1(std::erf(x))
    case kLgamma: EW1(std::lgamma(x))
    case kNotBool: EW1(x == 0.f ? 1.f : 0.f)
    case kIsFinite: EW1(std::fabs(x) <= std::numeric_limits<float>::max() ? 1.f : 0.f)
    case kToBool: EW1(x != 0.f ? 1.f : 0.f)  // NaN -> true, like ATen
    case kCube: EW1(x * x * x)
    case kReciprocal: EW1(1.f / x)
    case kReciprocalSquare: EW1(1.f / (x * x))
    case kAdd: EW2(x + y)
    case kSub: EW2(x - y)
    case kMul: EW2(x * y)
    case kDiv: EW2(x / y)
    case kRem: EW2(std::fmod(x, y))
    case kPow: EW2(std::pow(x, y))
    // torch.maximum/minimum: NaN if either is NaN; otherwise like _mm256_max_ps (b on ties).
    case kMax: EW2(x != x ? x : y != y ? y : (x > y ? x : y))
    case kMin: EW2(x != x ? x : y != y ? y : (x < y ? x : y))
    case kAtan2: EW2(std::atan2(x, y))
    case kAnd: EW2(x != 0.f && y != 0.f ? 1.f : 0.f)
    case kOr: EW2(x != 0.f || y != 0.f ? 1.f : 0.f)
    case kXor: EW2((x != 0.f ? 1.f : 0.f) != (y != 0.f ? 1.f : 0.f) ? 1.f : 0.f)
    case kEq: EW2(x == y ? 1.f : 0.f)
    case kNe: EW2(x != y ? 1.f : 0.f)
    case kLt: EW2(x < y ? 1.f : 0.f)
    case kLe: EW2(x <= y ? 1.f : 0.f)
    case kGt: EW2(x > y ? 1.f : 0.f)
    case kGe: EW2(x >= y ? 1.f : 0.f)
    case kSelect: EW3(x != 0.f ? y : z)
    default: break;
      // clang-format on
  }
}
#undef EW1
#undef EW2
#undef EW3
#undef TILE_LOOP

// The operand masks as constants for the usual cases (every operand streamed, or one of two
// tile-invariant): the loops then index plainly, and an invariant operand's loads leave the
// loop. Measured: a strict GELU (tanh) on [8, 32, 256], one cluster of 8 tile instructions and
// a tanh, 50-54 us against 57 us with the masks at run time (three alternated processes).
template <int64_t G>
[[gnu::always_inline]] inline void exec_op_masks(uint8_t op, float* __restrict d, const float* __restrict a,
                                                 const float* __restrict b, const float* __restrict c, int64_t n,
                                                 int64_t ma, int64_t mb, int64_t mc) {
  if (ma != 0 && mb != 0 && mc != 0) {
    exec_op_groups<G>(op, d, a, b, c, n, -1, -1, -1);
  } else if (ma == 0 && mb != 0 && mc != 0) {
    exec_op_groups<G>(op, d, a, b, c, n, 0, -1, -1);
  } else if (ma != 0 && mb == 0 && mc != 0) {
    exec_op_groups<G>(op, d, a, b, c, n, -1, 0, -1);
  } else {
    exec_op_groups<G>(op, d, a, b, c, n, ma, mb, mc);
  }
}

TPU_AVX2_CLONES void exec_op(uint8_t op, float* __restrict d, const float* __restrict a, const float* __restrict b,
                             const float* __restrict c, int64_t n, int64_t ma, int64_t mb, int64_t mc) {
  exec_op_masks<8>(op, d, a, b, c, n, ma, mb, mc);
}

#if defined(__x86_64__)
// The tile loops 16 lanes at a time: the ops here are IEEE-exact or scalar library calls, so
// the bits are those of the 8-lane loops.
[[gnu::target("avx512f")]] void exec_op_avx512(uint8_t op, float* __restrict d, const float* __restrict a,
                                               const float* __restrict b, const float* __restrict c, int64_t n,
                                               int64_t ma, int64_t mb, int64_t mc) {
  const int64_t n16 = n / 16 * 16;
  exec_op_masks<16>(op, d, a, b, c, n16, ma, mb, mc);
  if (n16 == n) return;
  auto at = [n16](const float* p, int64_t m) { return p == nullptr ? p : p + (n16 & m); };
  exec_op_groups<8>(op, d + n16, at(a, ma), at(b, mb), at(c, mc), n - n16, ma, mb, mc);
}
#endif

// The summation order of every float32 row sum (fusion.h, row_sums): 32 lanes, lane j adding
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

TPU_AVX2_CLONES float row_sum_one(const float* __restrict x, int64_t m) {
  LaneSums s;
  lane_sums_add(s, x, m);
  return lane_sums_finish(s);
}

// One tile of a total sum's block (a multiple of 32 elements, or the tensor's last tile).
TPU_AVX2_CLONES void lane_sums_add_tile(LaneSums& s, const float* __restrict x, int64_t m) { lane_sums_add(s, x, m); }

// A reduction over each row of m elements of a (n is a multiple of m): d[r] gets row r's
// result (per-row values are held compactly, fusion.h). Sums add in row_sum_one's order (the
// order of the sum kernel too); max and min propagate NaN like amax/amin and are exact.
TPU_AVX2_CLONES void exec_row(uint8_t op, float* __restrict d, const float* __restrict a, int64_t n, int64_t m) {
  for (int64_t r0 = 0, r = 0; r0 < n; r0 += m, ++r) {
    const float* x = a + r0;
    if (op == kRowSum) {  // row_sum_one's order, inlined (a call per row went through the clone's resolver)
      LaneSums s;
      lane_sums_add(s, x, m);
      d[r] = lane_sums_finish(s);
      continue;
    }
    const float init = op == kRowMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    const bool mx = op == kRowMax;
    auto pick = [mx](float u, float v) { return u != u ? u : v != v ? v : (mx ? (u > v ? u : v) : (u < v ? u : v)); };
    // Eight lanes in a vector register (lane j takes elements j, j + 8, ...; ties keep the later
    // element), NaNs only noted: a row with one yields its first NaN. The scalar form with the
    // NaN test in every step did not vectorize (3x slower than ATen's amax on rows of 32).
    RowVec va, v;
    for (int j = 0; j < 8; ++j) va[j] = init;
    RowMask nan = {};
    int64_t i = 0;
    if (mx) {
      for (; i + 8 <= m; i += 8) {
        std::memcpy(&v, x + i, sizeof(RowVec));
        va = va > v ? va : v;
        nan |= v != v;
      }
    } else {
      for (; i + 8 <= m; i += 8) {
        std::memcpy(&v, x + i, sizeof(RowVec));
        va = va < v ? va : v;
        nan |= v != v;
      }
    }
    uint64_t words[4];
    std::memcpy(words, &nan, sizeof words);
    if ((words[0] | words[1] | words[2] | words[3]) != 0) {
      d[r] = *std::find_if(x, x + m, [](float e) { return e != e; });
      continue;
    }
    float acc[8];
    std::memcpy(acc, &va, sizeof acc);
    if (i == m) {  // rows of a multiple of 8 (the usual): no NaN is left to test for
      // Lane j with lane j + 4, then j + 2, then j + 1, as pick() does below (ties: the later).
      for (int w = 4; w >= 1; w /= 2) {
        for (int j = 0; j < w; ++j) {
          const float u = acc[j], t = acc[j + w];
          acc[j] = mx ? (u > t ? u : t) : (u < t ? u : t);
        }
      }
      d[r] = acc[0];
      continue;
    }
    for (int j = 0; i < m; ++i, ++j) acc[j] = pick(acc[j], x[i]);
    for (int j = 0; j < 4; ++j) acc[j] = pick(acc[j], acc[j + 4]);
    for (int j = 0; j < 2; ++j) acc[j] = pick(acc[j], acc[j + 2]);
    acc[0] = pick(acc[0], acc[1]);
    d[r] = acc[0];
  }
}

// Round-to-nearest-even to bf16 and back (c10::BFloat16's rounding, NaN -> 0x7fc0).
inline uint16_t bf16_bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  return x != x ? uint16_t{0x7fc0} : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

TPU_AVX2_CLONES void round_bf16(float* __restrict d, int64_t n) {
  for (int64_t i0 = 0; i0 < n; i0 += 8) {
    for (int64_t i = i0; i < i0 + 8; ++i) d[i] = bf16_value(bf16_bits(d[i]));
  }
}
void round_f16(float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(c10::Half(d[i]));
}

// ---- vectorized float math: SLEEF from libtorch_cpu ----
// libtorch_cpu ships and exports SLEEF's 8-wide, 1-ulp functions (ATen's AVX2 Vectorized<float>
// calls them). They are looked up at run time (never linked), so a libtorch without them, or a
// CPU without AVX2/FMA, falls back to the std:: loops above, which are ~10x slower per element.
// ATen's kernels for some of these ops use MKL VML or their own erf, so results may differ
// from the unfused path in the last bit: within float32 test tolerances, never more.
#if defined(__x86_64__)
using Sleef1 = __m256 (*)(__m256);
using Sleef2 = __m256 (*)(__m256, __m256);

using Sleef1x16 = __m512 (*)(__m512);
using Sleef2x16 = __m512 (*)(__m512, __m512);

// The 8-wide functions (AVX2), and on machines where ATen runs its AVX512 kernels the 16-wide
// ones too: SLEEF's u10 algorithms give the same bits at either width (ATen's tanh, exp, log,
// sin, cos, erf, expm1, log1p, atan and sigmoid agreed on 2.3M inputs under
// ATEN_CPU_CAPABILITY=avx2 and avx512), and the wider ones take half the instructions.
struct SleefTable {
  Sleef1 unary[kNoOp] = {};
  Sleef2 binary[kNoOp] = {};
  Sleef1x16 unary16[kNoOp] = {};
  Sleef2x16 binary16[kNoOp] = {};
};

const SleefTable& sleef() {
  static const SleefTable table = [] {
    SleefTable t;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return t;
    auto find = [](const char* name) { return dlsym(RTLD_DEFAULT, name); };
    const std::pair<Op, const char*> unary[] = {
        {kExp, "Sleef_expf8_u10"},       {kExpm1, "Sleef_expm1f8_u10"}, {kLog, "Sleef_logf8_u10"},
        {kLog1p, "Sleef_log1pf8_u10"},   {kSin, "Sleef_sinf8_u10"},     {kCos, "Sleef_cosf8_u10"},
        {kTan, "Sleef_tanf8_u10"},       {kAsin, "Sleef_asinf8_u10"},   {kAcos, "Sleef_acosf8_u10"},
        {kAtan, "Sleef_atanf8_u10"},     {kSinh, "Sleef_sinhf8_u10"},   {kCosh, "Sleef_coshf8_u10"},
        {kAsinh, "Sleef_asinhf8_u10"},   {kAcosh, "Sleef_acoshf8_u10"}, {kAtanh, "Sleef_atanhf8_u10"},
        {kLgamma, "Sleef_lgammaf8_u10"}, {kErf, "Sleef_erff8_u10"}};
    const std::pair<Op, const char*> binary[] = {
        {kAtan2, "Sleef_atan2f8_u10"}, {kPow, "Sleef_powf8_u10"}, {kRem, "Sleef_fmodf8"}};
    for (auto [op, name] : unary) t.unary[op] = reinterpret_cast<Sleef1>(find(name));
    for (auto [op, name] : binary) t.binary[op] = reinterpret_cast<Sleef2>(find(name));
    // Logistic and cbrt are built from exp and pow, like ATen's kernels.
    t.unary[kLogistic] = t.unary[kExp];
    t.binary[kCbrt] = t.binary[kPow];
    if (avx512_lanes()) {
      auto wide = [](std::string name) { return name.replace(name.find("f8"), 2, "f16"); };
      for (auto [op, name] : unary) t.unary16[op] = reinterpret_cast<Sleef1x16>(find(wide(name).c_str()));
      for (auto [op, name] : binary) t.binary16[op] = reinterpret_cast<Sleef2x16>(find(wide(name).c_str()));
    }
    return t;
  }();
  return table;
}

// The 16-wide part of a plain unary or binary SLEEF op: elements [0, returned) of n, a multiple
// of 16 (never past n: operands may be external memory read in place). ma, mb: operand masks as
// in TILE_LOOP (a unary op's operand is never tile-invariant: the op would be invariant too).
[[gnu::target("avx512f")]] int64_t exec_sleef16(const SleefTable& t, uint8_t op, float* __restrict d,
                                                const float* __restrict a, const float* __restrict b, int64_t n,
                                                int64_t ma, int64_t mb) {
  const int64_t n16 = n / 16 * 16;
  if (op == kLogistic && t.unary16[kExp]) {  // 1 / (1 + exp(-x)), as the 8-wide loop does
    const __m512 one = _mm512_set1_ps(1.f), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < n16; i += 16) {
      __m512 e = t.unary16[kExp](_mm512_sub_ps(zero, _mm512_loadu_ps(a + i)));
      _mm512_storeu_ps(d + i, _mm512_div_ps(one, _mm512_add_ps(one, e)));
    }
    return n16;
  }
  if (t.unary16[op]) {
    for (int64_t i = 0; i < n16; i += 16) _mm512_storeu_ps(d + i, t.unary16[op](_mm512_loadu_ps(a + i)));
    return n16;
  }
  if (t.binary16[op]) {
    for (int64_t i = 0; i < n16; i += 16) {
      _mm512_storeu_ps(d + i, t.binary16[op](_mm512_loadu_ps(a + (i & ma)), _mm512_loadu_ps(b + (i & mb))));
    }
    return n16;
  }
  return 0;
}

// Runs `op` with SLEEF if the table has it; false otherwise. n is a multiple of 8.
[[gnu::target("avx2,fma")]] bool exec_sleef(uint8_t op, float* __restrict d, const float* __restrict a,
                                            const float* __restrict b, int64_t n, int64_t ma, int64_t mb) {
  const SleefTable& t = sleef();
  if (op == kLogistic && t.unary[kExp]) {  // 1 / (1 + exp(-x))
    const __m256 one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
    for (int64_t i = exec_sleef16(t, op, d, a, b, n, ma, mb); i < n; i += 8) {
      __m256 e = t.unary[kExp](_mm256_sub_ps(zero, _mm256_loadu_ps(a + i)));
      _mm256_storeu_ps(d + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
    }
    return true;
  }
  if (op == kCbrt && t.binary[kPow]) {  // sign(x) * |x|^(1/3), the reference's recipe
    const __m256 third = _mm256_set1_ps(static_cast<float>(1.0 / 3.0)), one = _mm256_set1_ps(1.f);
    const __m256 zero = _mm256_setzero_ps(), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < n; i += 8) {
      __m256 x = _mm256_loadu_ps(a + i);
      __m256 sign = _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_GT_OQ), one),
                                  _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_LT_OQ), one));
      _mm256_storeu_ps(d + i, _mm256_mul_ps(sign, t.binary[kPow](_mm256_and_ps(x, abs_mask), third)));
    }
    return true;
  }
  if (op < kNoOp && t.unary[op]) {
    for (int64_t i = exec_sleef16(t, op, d, a, b, n, ma, mb); i < n; i += 8) {
      _mm256_storeu_ps(d + i, t.unary[op](_mm256_loadu_ps(a + i)));
    }
    return true;
  }
  if (op < kNoOp && t.binary[op]) {
    for (int64_t i = exec_sleef16(t, op, d, a, b, n, ma, mb); i < n; i += 8) {
      _mm256_storeu_ps(d + i, t.binary[op](_mm256_loadu_ps(a + (i & ma)), _mm256_loadu_ps(b + (i & mb))));
    }
    return true;
  }
  return false;
}
#else
struct SleefTable {
  void* unary[kNoOp] = {};
};
const SleefTable& sleef() {
  static const SleefTable table;
  return table;
}
bool exec_sleef(uint8_t, float*, const float*, const float*, int64_t, int64_t, int64_t) { return false; }
#endif

// ---- strided access to external operands and destinations ----

// A tensor seen as the cluster's row-major element order: coalesced dims (size-1 dims dropped,
// mergeable neighbours merged), innermost last.
struct Access {
  char* base = nullptr;
  at::ScalarType dtype = at::kFloat;
  c10::SmallVector<int64_t, 6> sizes, strides;
  bool contiguous() const { return sizes.size() == 1 && strides[0] == 1; }
  bool uniform() const {
    return std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 0; });
  }
};

Access make_access(void* base, at::ScalarType dtype, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  Access a;
  a.base = static_cast<char*>(base);
  a.dtype = dtype;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!a.sizes.empty() && a.strides.back() == strides[d] * sizes[d]) {
      a.sizes.back() *= sizes[d];
      a.strides.back() = strides[d];
    } else {
      a.sizes.push_back(sizes[d]);
      a.strides.push_back(strides[d]);
    }
  }
  if (a.sizes.empty()) {  // one element
    a.sizes.push_back(1);
    a.strides.push_back(1);
  }
  return a;
}

template <typename T>
inline float load_one(const T* p) {
  if constexpr (std::is_same_v<T, bool>) {
    return *reinterpret_cast<const uint8_t*>(p) != 0 ? 1.f : 0.f;
  } else if constexpr (std::is_same_v<T, at::BFloat16>) {
    return bf16_value(reinterpret_cast<const uint16_t*>(p)[0]);
  } else {
    return static_cast<float>(*p);  // static_cast<float>: ATen's conversion
  }
}

template <typename T>
inline void store_one(T* p, float x) {
  if constexpr (std::is_same_v<T, bool>) {
    *reinterpret_cast<uint8_t*>(p) = x != 0.f;
  } else if constexpr (std::is_same_v<T, at::BFloat16>) {
    *reinterpret_cast<uint16_t*>(p) = bf16_bits(x);
  } else {
    *p = static_cast<T>(x);
  }
}

// Visits elements [start, start + n) of `a` in row-major order as runs along the innermost
// dim: fn(element offset of the run's first element, inner stride, run length, tile position).
template <typename Fn>
void for_runs(const Access& a, int64_t start, int64_t n, Fn fn) {
  const int64_t r = static_cast<int64_t>(a.sizes.size());
  if (r == 1) {
    fn(start * a.strides[0], a.strides[0], n, int64_t{0});
    return;
  }
  int64_t idx[16];
  TPU_CHECK(r <= 16, "host fusion: rank ", r, " after coalescing exceeds 16");
  int64_t off = 0, rest = start;
  for (int64_t d = r - 1; d >= 0; --d) {
    idx[d] = rest % a.sizes[d];
    rest /= a.sizes[d];
    off += idx[d] * a.strides[d];
  }
  const int64_t inner = a.sizes[r - 1], st = a.strides[r - 1];
  for (int64_t k = 0; k < n;) {
    int64_t run = std::min(inner - idx[r - 1], n - k);
    fn(off, st, run, k);
    k += run;
    idx[r - 1] += run;
    off += run * st;
    if (idx[r - 1] < inner) continue;
    off -= inner * st;
    idx[r - 1] = 0;
    for (int64_t d = r - 2; d >= 0; --d) {
      off += a.strides[d];
      if (++idx[d] < a.sizes[d]) break;
      off -= a.sizes[d] * a.strides[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
void gather(const Access& a, int64_t start, int64_t n, float* __restrict out) {
  const T* base = reinterpret_cast<const T*>(a.base);
  for_runs(a, start, n, [&](int64_t off, int64_t st, int64_t len, int64_t pos) {
    const T* p = base + off;
    float* o = out + pos;
    if (st == 1) {
      for (int64_t i = 0; i < len; ++i) o[i] = load_one(p + i);
    } else if (st == 0) {
      float v = load_one(p);
      for (int64_t i = 0; i < len; ++i) o[i] = v;
    } else {
      for (int64_t i = 0; i < len; ++i) o[i] = load_one(p + i * st);
    }
  });
}

template <typename T>
void scatter(const Access& a, int64_t start, int64_t n, const float* __restrict in) {
  T* base = reinterpret_cast<T*>(a.base);
  for_runs(a, start, n, [&](int64_t off, int64_t st, int64_t len, int64_t pos) {
    T* p = base + off;
    const float* s = in + pos;
    if (st == 1) {
      for (int64_t i = 0; i < len; ++i) store_one(p + i, s[i]);
    } else {
      for (int64_t i = 0; i < len; ++i) store_one(p + i * st, s[i]);
    }
  });
}

#define TPU_FUSION_DTYPES(_)                                                                                  \
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
    TPU_FUSION_DTYPES(CASE)
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

// ATen's float kernels for these ops call MKL's vector math library (at::vml, VML_HA) wherever
// PyTorch is built with MKL, and libtorch_cpu exports it: a tile computed by the same function
// has ATen's bits (checked bit for bit on 500k inputs, any call length) and costs less than
// SLEEF's u10 functions. Null where absent. tanh is vector_tanh.h's (MKL's on Intel CPUs only).
const std::array<VmlUnary, kNoOp>& vml() {
  static const std::array<VmlUnary, kNoOp> table = [] {
    std::array<VmlUnary, kNoOp> t{};
    const std::pair<Op, const char*> ops[] = {{kExp, "vmsExp"},   {kLog, "vmsLn"},    {kSin, "vmsSin"},
                                              {kCos, "vmsCos"},   {kTan, "vmsTan"},   {kAsin, "vmsAsin"},
                                              {kAcos, "vmsAcos"}, {kAtan, "vmsAtan"}, {kErf, "vmsErf"}};
    for (auto [op, name] : ops) t[op] = find_vml(name);
    return t;
  }();
  return table;
}

// MKL's exp takes a per-element slow path where the result underflows (x below about -87.3):
// measured 6x slower per call for a quarter of lanes at -inf, 60x at -100. Causal attention
// feeds it -inf for every masked score (x - rowmax). Below -110 the result is +0 under any
// rounding (e^-110 is 1e-48, far below the smallest denormal), so those lanes are computed from
// 0 and zeroed afterwards; results that really are denormal (rare) keep MKL's path and bits.
constexpr float kExpZeroBelow = -110.f;

// The lane tests and selects are written on 8-float vectors: as plain loops, the "any lane
// below" test is a float reduction the compiler may not reorder, so it ran one element at a
// time and cost about what MKL's exp itself does (a masked softmax over [8, 4, 32, 32], fused
// mode, per call with its dispatch: 111 -> 87 us).
TPU_AVX2_CLONES void vml_exp(VmlUnary f, int64_t n, const float* a, float* d) {
  RowVec v, lo;
  for (int j = 0; j < 8; ++j) lo[j] = kExpZeroBelow;
  RowMask below = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::memcpy(&v, a + i, sizeof v);
    below |= v < lo;  // NaN lanes compare false
  }
  uint64_t words[4];
  std::memcpy(words, &below, sizeof words);
  bool any = (words[0] | words[1] | words[2] | words[3]) != 0;
  for (; i < n; ++i) any |= a[i] < kExpZeroBelow;
  if (!any) return f(static_cast<int>(n), a, d, kVmlMode);
  constexpr int64_t kChunk = 256;  // d may be a itself: each chunk goes through the stack
  alignas(64) float x[kChunk];
  const RowVec zero = {};
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t m = std::min(kChunk, n - c);
    const float* ac = a + c;
    int64_t k = 0;
    for (; k + 8 <= m; k += 8) {
      std::memcpy(&v, ac + k, sizeof v);
      v = v < lo ? zero : v;
      std::memcpy(x + k, &v, sizeof v);
    }
    for (; k < m; ++k) x[k] = ac[k] < kExpZeroBelow ? 0.f : ac[k];
    f(static_cast<int>(m), x, x, kVmlMode);
    float* dc = d + c;
    for (k = 0; k + 8 <= m; k += 8) {
      RowVec e;
      std::memcpy(&v, ac + k, sizeof v);
      std::memcpy(&e, x + k, sizeof e);
      e = v < lo ? zero : e;
      std::memcpy(dc + k, &e, sizeof e);
    }
    for (; k < m; ++k) dc[k] = ac[k] < kExpZeroBelow ? 0.f : x[k];
  }
}

// pow with a tile-invariant exponent (a Python scalar, usually), computed as ATen's CPU pow
// kernel does (Pow.cpp, PowKernel.cpp): x^1 is x, x^2 x * x, x^3 x * x * x, x^-1 1/x, x^-2
// 1/(x * x), x^0.5 sqrt and x^-0.5 1/sqrt, all correctly rounded steps; the general pow (SLEEF,
// 1 ulp) is several times slower and differs from those in the last bit (x^3: a quarter of
// random inputs).
uint8_t pow_as(float exponent, int16_t& b, int16_t a) {
  if (exponent == 2.f) {
    b = a;
    return kMul;
  }
  if (exponent == 1.f) return kCopy;  // autograd's pow backward asks for x^1 (RMSNorm's x^2)
  if (exponent == 3.f) return kCube;
  if (exponent == -1.f) return kReciprocal;
  if (exponent == -2.f) return kReciprocalSquare;
  if (exponent == 0.5f) return kSqrt;
  if (exponent == -0.5f) return kRsqrt;
  return kPow;
}

// bfloat16's x^3 and x^-2 as ATen computes them: Vectorized<BFloat16> rounds every product, so
// x * x is rounded to bfloat16 before the second step (whose result the caller rounds).
void pow_bf16_products(uint8_t op, float* __restrict d, const float* __restrict a, int64_t n, int64_t ma) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i & ma];
    const float square = bf16_value(bf16_bits(x * x));
    d[i] = op == kCube ? square * x : 1.f / square;
  }
}

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

}  // namespace

void row_sums(const float* x, int64_t rows, int64_t m, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = row_sum_one(x + r * m, m);
}

float total_sum(const float* x, int64_t n) {
  if (n <= kMaxRow) return row_sum_one(x, n);
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<float> sums(static_cast<size_t>(blocks));
  auto sum_blocks = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) sums[b] = row_sum_one(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
  };
  // On a stream worker (one OpenMP thread) the kernel threads split it, as elementwise kernels.
  parallel_units(n, blocks, kSumBlock, sum_blocks);
  return total_sum(sums.data(), blocks);
}

namespace {

// One instruction over n elements: operands in slots 0 (and 1), the result in slot 2. exec_instr
// computes whole groups of 8, so the tail goes through padded copies; the rest goes in chunks,
// since MKL's functions take an int length (a chunk is a multiple of 8 and lanes are
// independent, so chunking does not change the bits). A uniform y is read as a cluster reads a
// tile-invariant operand (its first lanes, `fixed`), and a pow over a scalar exponent takes
// pow_as's recipes.
void run_one_instr(Op op, float* d, const float* x, const float* y, int64_t n, bool y_uniform, bool scalar_exponent) {
  constexpr int64_t kChunk = int64_t{1} << 14;
  Cluster::Instr in{op, 0, /*dst=*/2, /*a=*/0, static_cast<int16_t>(y != nullptr ? 1 : -1), -1};
  alignas(64) float y_lanes[16];  // a uniform y in every lane of a group, as a tile-invariant buffer
  if (y_uniform) {
    std::fill_n(y_lanes, 16, y[0]);
    y = y_lanes;
    in.fixed = 2;
    in.pow_scalar = op == kPow && scalar_exponent;
  }
  const bool use_sleef = sleef().unary[kExp] != nullptr;
  const int64_t n8 = n / 8 * 8;
  for (int64_t i = 0; i < n8; i += kChunk) {
    const int64_t m = std::min(kChunk, n8 - i);
    float* slots[3] = {const_cast<float*>(x) + i, y == nullptr ? nullptr : const_cast<float*>(y) + (y_uniform ? 0 : i),
                       d + i};  // operands are only read
    exec_instr(in, [&](int16_t s) { return s < 0 ? nullptr : slots[s]; }, m, m, use_sleef);
  }
  if (n8 == n) return;
  alignas(64) float tail_x[16] = {}, tail_y[16] = {}, tail_d[16];
  std::copy(x + n8, x + n, tail_x);
  if (y != nullptr) std::copy(y + (y_uniform ? 0 : n8), y + (y_uniform ? 16 : n), tail_y);
  float* slots[3] = {tail_x, tail_y, tail_d};
  exec_instr(in, [&](int16_t s) { return s < 0 ? nullptr : slots[s]; }, 8, 8, use_sleef);
  std::copy(tail_d, tail_d + (n - n8), d + n8);
}

}  // namespace

void cluster_unary_f32(OpKind kind, float* d, const float* x, int64_t n) {
  const Op op = unary_op(kind);
  TPU_CHECK(op != kNoOp, "host fusion: no cluster function for ", ir::op_name(kind));
  run_one_instr(op, d, x, nullptr, n, false, false);
}

void cluster_binary_f32(OpKind kind, float* d, const float* x, const float* y, int64_t n, bool y_uniform,
                        bool scalar_exponent) {
  const Op op = binary_op(kind);
  TPU_CHECK(op != kNoOp, "host fusion: no cluster function for ", ir::op_name(kind));
  run_one_instr(op, d, x, y, n, y_uniform, scalar_exponent);
}

bool is_total_sum(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.kind != OpKind::kReduce || n.operands.size() != 1 || n.dtype != DType::kF32) return false;
  const ir::Node& x = g.node(n.operands[0]);
  if (x.dtype != DType::kF32 || static_cast<ir::ReduceKind>(n.iattrs.at(0)) != ir::ReduceKind::kSum) return false;
  if (n.iattrs.size() != x.shape.size() + 1) return false;
  for (size_t k = 0; k < x.shape.size(); ++k) {
    if (n.iattrs[1 + k] != static_cast<int64_t>(k)) return false;
  }
  return c10::multiply_integers(x.shape) > kMaxRow;
}

bool is_fusible(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (!exact(n.dtype)) return false;
  if (n.kind == OpKind::kBroadcastInDim) return true;
  if (n.kind == OpKind::kConvert) {
    DType from = g.node(n.operands.at(0)).dtype;
    if (!exact(from) && !ir::is_integer(from) && from != DType::kF64) return false;
    // A tiny double rounds to 0.0f but is true as a bool.
    if (from == DType::kF64 && n.dtype == DType::kBool) return false;
  } else {
    Op op = node_op(n, g);
    if (op == kNoOp) return false;
    for (int32_t o : n.operands) {
      if (!exact(g.node(o).dtype)) return false;
    }
    // not/and/or/xor: bool only (the integer bitwise forms stay on the kernels); the other
    // unary and binary ops: floats (isfinite reads a float and yields bool).
    const bool bool_op = op == kNotBool || op == kAnd || op == kOr || op == kXor;
    const DType x = g.node(n.operands.at(0)).dtype;
    if (bool_op && !(n.dtype == DType::kBool && x == DType::kBool)) return false;
    bool arith = ir::is_unary_elementwise(n.kind) || ir::is_binary_elementwise(n.kind);
    if (arith && !bool_op && !exact_float(x)) return false;
  }
  for (int32_t o : n.operands) {
    if (g.node(o).shape != n.shape) return false;
  }
  return true;
}

int row_reduce_lead_rank(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  if (n.kind != OpKind::kReduce || n.operands.size() != 1 || n.dtype != DType::kF32) return -1;
  const ir::Node& x = g.node(n.operands[0]);
  if (x.dtype != DType::kF32) return -1;
  auto kind = static_cast<ir::ReduceKind>(n.iattrs.at(0));
  // Sums add in row_sums' order here and in the reduce kernel alike (kernels_reduce.cpp), so a
  // sum's bits do not depend on whether it joined a cluster: strict and fused modes agree.
  if (kind != ir::ReduceKind::kSum && kind != ir::ReduceKind::kMax && kind != ir::ReduceKind::kMin) return -1;
  const int64_t rank = static_cast<int64_t>(x.shape.size()), nd = static_cast<int64_t>(n.iattrs.size()) - 1;
  if (nd < 1) return -1;
  int64_t row = 1;
  for (int64_t k = 0; k < nd; ++k) {
    if (n.iattrs[1 + k] != rank - nd + k) return -1;  // the trailing dims, in order
    row *= x.shape[rank - nd + k];
  }
  if (row < 1 || row > kMaxRow || c10::multiply_integers(x.shape) == 0) return -1;
  return static_cast<int>(rank - nd);
}

bool Cluster::can_absorb(const Cluster& other) const {
  if (lead_rank_ < 0 || other.lead_rank_ >= 0 || static_cast<int>(other.shape_.size()) != lead_rank_) return false;
  if (members_.size() + other.members_.size() > kMaxClusterNodes) return false;
  return std::equal(other.shape_.begin(), other.shape_.end(), shape_.begin());
}

void Cluster::build(const ir::Graph& g, const std::vector<bool>& stored) {
  numel_ = c10::multiply_integers(shape_);
  dtype_ = to_aten(g.node(members_.back()).dtype);
  std::unordered_map<int32_t, int16_t> slot_of;  // member, constant or external node
  std::unordered_map<int32_t, size_t> member_pos;
  for (size_t k = 0; k < members_.size(); ++k) member_pos[members_[k]] = k;
  // Last member reading each member, so buffers are reused once a value is dead in the tile.
  std::vector<size_t> last_read(members_.size(), 0);
  for (size_t k = 0; k < members_.size(); ++k) {
    for (int32_t o : g.node(members_[k]).operands) {
      if (auto it = member_pos.find(o); it != member_pos.end()) last_read[it->second] = k;
    }
  }
  std::vector<int16_t> free_slots;
  // Loaded and splat buffers are filled before the program runs, so they never share a slot.
  auto fresh = [&] { return num_slots_++; };
  // Slots whose contents are the same in every tile (see Instr::invariant): never reused.
  std::vector<bool> invariant_slot;
  auto mark_invariant = [&](int16_t slot) {
    if (invariant_slot.size() <= static_cast<size_t>(slot)) invariant_slot.resize(slot + 1, false);
    invariant_slot[slot] = true;
  };
  auto is_invariant = [&](int16_t slot) {
    return slot < 0 || (static_cast<size_t>(slot) < invariant_slot.size() && invariant_slot[slot]);
  };
  // Slots holding one value per row (row clusters): reductions, the arithmetic on them and
  // per-row inputs. A slot is reused only after its value is dead, so the flag is per value.
  std::vector<bool> compact_slot;
  auto set_compact = [&](int16_t slot, bool yes) {
    if (compact_slot.size() <= static_cast<size_t>(slot)) compact_slot.resize(slot + 1, false);
    compact_slot[slot] = yes;
  };
  auto is_compact = [&](int16_t slot) {
    return slot >= 0 && static_cast<size_t>(slot) < compact_slot.size() && compact_slot[slot];
  };
  auto operand = [&](int32_t o) -> int16_t {
    if (auto it = slot_of.find(o); it != slot_of.end()) return it->second;
    const ir::Node& on = g.node(o);
    int16_t s = fresh();
    if (on.kind == OpKind::kConstant && exact(on.dtype)) {
      // Built like the constant kernel: integers wrap into the dtype, floats round from double.
      at::ScalarType dt = to_aten(on.dtype);
      at::Tensor c = on.fattrs.empty() ? at::scalar_tensor(on.iattrs.at(0), at::kLong).to(dt)
                                       : at::scalar_tensor(on.fattrs.at(0), at::kDouble).to(dt);
      splats_.push_back({s, c.to(at::kFloat).item<float>()});
      mark_invariant(s);
    } else {
      Input in{o, s, on.shape, {}, false};
      if (reduced_shape(on.shape)) {  // per-row value: stride 0 along the row
        in.dims.resize(on.shape.size());
        for (size_t k = 0; k < in.dims.size(); ++k) in.dims[k] = static_cast<int64_t>(k);
        in.broadcast = true;
      }
      in.one_element = c10::multiply_integers(on.shape) == 1;
      if (in.one_element) mark_invariant(s);
      // A per-row value is loaded once per row, not broadcast over the row.
      in.compact = in.broadcast && lead_rank_ >= 0 && !in.one_element;
      set_compact(s, in.compact);
      inputs_.push_back(std::move(in));
    }
    slot_of[o] = s;
    return s;
  };
  for (size_t k = 0; k < members_.size(); ++k) {
    const int32_t m = members_[k];
    const ir::Node& n = g.node(m);
    member_names_.push_back("%" + std::to_string(m) + " " + ir::op_name(n.kind));
    if (n.kind == OpKind::kBroadcastInDim && member_pos.count(n.operands.at(0))) {
      // A reduced value back over its rows: already broadcast in the buffers.
      Instr in{kCopy, 0, -1, slot_of.at(n.operands[0]), -1, -1};
      in.dst = fresh();
      in.invariant = is_invariant(in.a);
      in.expand = is_compact(in.a);
      if (in.invariant) mark_invariant(in.dst);
      slot_of[m] = in.dst;
      program_.push_back(in);
      continue;
    }
    if (n.kind == OpKind::kBroadcastInDim) {
      int32_t o = n.operands.at(0);
      int16_t s = fresh();
      inputs_.push_back({o, s, g.node(o).shape, n.iattrs, true});
      Input& in = inputs_.back();
      in.one_element = c10::multiply_integers(g.node(o).shape) == 1;
      if (in.one_element) mark_invariant(s);
      // A broadcast to the lead shape (absorbed arithmetic on rows): one value per row.
      in.compact = lead_rank_ >= 0 && !n.shape.empty() && reduced_shape(n.shape) && !in.one_element;
      set_compact(s, in.compact);
      slot_of[m] = s;
      continue;
    }
    if (m == total_sum_ || m == column_sum_) {  // summed per tile in run(), after the last instruction
      (m == total_sum_ ? total_slot_ : column_slot_) = slot_of.at(n.operands.at(0));
      if (m == column_sum_) column_operand_ = n.operands[0];
      slot_of[m] = slot_of[n.operands[0]];
      continue;
    }
    Op op = node_op(n, g);
    if (n.kind == OpKind::kReduce) {
      auto kind = static_cast<ir::ReduceKind>(n.iattrs.at(0));
      op = kind == ir::ReduceKind::kSum ? kRowSum : kind == ir::ReduceKind::kMax ? kRowMax : kRowMin;
    }
    Instr in{op, 0, -1, -1, -1, -1};
    int16_t* srcs[3] = {&in.a, &in.b, &in.c};
    for (size_t j = 0; j < n.operands.size() && j < 3; ++j) *srcs[j] = operand(n.operands[j]);
    in.round = n.dtype == DType::kBF16 ? 1 : n.dtype == DType::kF16 ? 2 : 0;
    in.pow_scalar = in.op == kPow && is_invariant(in.b) && ir::pow_has_scalar_exponent(n);
    in.invariant = in.op < kRowSum && is_invariant(in.a) && is_invariant(in.b) && is_invariant(in.c);
    if (!in.invariant && in.op < kRowSum) {
      for (int j = 0; j < 3; ++j) {
        if (*srcs[j] >= 0 && is_invariant(*srcs[j])) in.fixed |= static_cast<uint8_t>(1 << j);
      }
    }
    if (free_slots.empty() || in.invariant) {
      in.dst = fresh();
    } else {
      in.dst = free_slots.back();
      free_slots.pop_back();
    }
    if (in.invariant) mark_invariant(in.dst);
    // Reductions and the arithmetic on their results run once per row (compact slots).
    in.rows = !in.invariant && lead_rank_ >= 0 && (in.op >= kRowSum || reduced_shape(n.shape));
    if (in.rows && in.op < kRowSum) {
      for (int16_t o : {in.a, in.b, in.c}) {
        TPU_CHECK(o < 0 || is_compact(o) || is_invariant(o), "host fusion: per-row member %", m,
                  " reads a full-row value");
      }
    }
    set_compact(in.dst, in.rows);
    slot_of[m] = in.dst;
    program_.push_back(in);
    for (size_t j = 0; j < n.operands.size(); ++j) {
      int32_t o = n.operands[j];
      auto it = member_pos.find(o);
      bool dup = std::find(n.operands.begin(), n.operands.begin() + j, o) != n.operands.begin() + j;
      if (it == member_pos.end() || dup || last_read[it->second] != k || stored[it->second]) continue;
      if (g.node(o).kind == OpKind::kBroadcastInDim) continue;  // a loaded (or copied) buffer
      if (is_invariant(slot_of[o])) continue;                   // computed once, read by every tile
      free_slots.push_back(slot_of[o]);
    }
  }
  // Keep the buffers a tile streams through within ~128 KiB (L2) when a cluster has many live
  // values. Invariant buffers do not count: tile instructions read only their first lanes.
  const int64_t streamed =
      num_slots_ - static_cast<int64_t>(std::count(invariant_slot.begin(), invariant_slot.end(), true));
  const int64_t fit = std::max<int64_t>(128, (int64_t{32768} / std::max<int64_t>(streamed, 1)) / 8 * 8);
  if (lead_rank_ >= 0) {  // whole rows per tile
    row_ = c10::multiply_integers(shape_.begin() + lead_rank_, shape_.end());
    const int64_t rows = numel_ / row_;
    tile_ = row_ * std::clamp<int64_t>(std::min(kMaxTile, fit) / row_, 1, std::max<int64_t>(rows, 1));
  } else if (total_sum_ >= 0) {  // tiles divide the sum's blocks (numel_ > kMaxRow > kMaxTile)
    tile_ = 32;
    while (tile_ * 2 <= std::min(kMaxTile, fit)) tile_ *= 2;
  } else if (column_sum_ >= 0) {  // powers of two that divide a column sum's blocks of elements
    column_count_ = c10::multiply_integers(shape_.begin() + column_kept_.first, shape_.begin() + column_kept_.second);
    const int64_t block = kColumnBlock * column_count_;
    tile_ = 8;
    while (tile_ * 2 <= std::min(kMaxTile, fit) && tile_ < numel_ && block % (tile_ * 2) == 0) tile_ *= 2;
  } else {
    tile_ = std::clamp<int64_t>((numel_ + 7) / 8 * 8, 8, std::min(kMaxTile, fit));
  }
  slot_stride_ = (tile_ + 7) / 8 * 8;
  for (size_t k = 0; k < members_.size(); ++k) {
    if (!stored[k]) continue;
    const ir::Node& n = g.node(members_[k]);
    store_nodes_.push_back(members_[k]);
    stores_.push_back({members_[k], slot_of[members_[k]], to_aten(n.dtype), n.shape, reduced_shape(n.shape)});
    const int16_t slot = stores_.back().slot;
    stores_.back().total = members_[k] == total_sum_;
    stores_.back().column = members_[k] == column_sum_;
    column_operand_stored_ |= column_sum_ >= 0 && members_[k] == column_operand_;
    stores_.back().per_tile = !stores_.back().total && !stores_.back().column &&
                              std::any_of(program_.begin(), program_.end(), [&](const Instr& in) {
                                return in.dst == slot && !in.invariant && !in.rows && !in.expand;
                              });
    // run() computes nothing for an empty cluster: a stored value with elements would be left
    // unwritten (the executor never folds 0-d values into an empty cluster, see executor.cpp).
    TPU_CHECK(numel_ > 0 || c10::multiply_integers(n.shape) == 0, "host fusion: member %", members_[k], " of shape ",
              c10::IntArrayRef(n.shape), " stored from an empty cluster of shape ", c10::IntArrayRef(shape_));
  }
}

// The channels-last format of the cluster's first full-size operand that a convolution left in
// it, for a plain cluster: it then walks its elements in that memory order (see the header
// comment, "Layout"). Empty: row-major.
std::optional<at::MemoryFormat> Cluster::walk_format(const std::vector<at::Tensor>& values) const {
  if (lead_rank_ >= 0 || total_sum_ >= 0) return std::nullopt;
  for (const Input& in : inputs_) {
    const at::Tensor& v = values[in.node];
    if (in.broadcast || in.one_element || !v.sizes().equals(shape_)) continue;
    if (auto format = channels_last_format(v)) return format;
  }
  return std::nullopt;
}

namespace {
// One per-tile instruction of a tile of n elements (rows of `row` elements): the interpreter's
// step, also called back by native kernels for the instructions they leave to it.
struct TileStep {
  const Cluster::Instr* program;
  float* const* slot_ptr;
  int64_t n, row;
  bool use_sleef;

  void operator()(int32_t k) const {
    const Cluster::Instr& in = program[k];
    auto slot = [p = slot_ptr](int16_t s) { return s < 0 ? nullptr : p[s]; };
    const int64_t n8 = (n + 7) / 8 * 8, rows = n / row, rows8 = (rows + 7) / 8 * 8;
    if (in.op >= kRowSum && in.op <= kRowMin) {
      exec_row(in.op, slot(in.dst), slot(in.a), n, row);
    } else if (in.expand) {  // a per-row value back over its rows
      const float* a = slot(in.a);
      float* d = slot(in.dst);
      for (int64_t r = 0; r < rows; ++r) std::fill_n(d + r * row, row, a[r]);
    } else if (in.rows) {
      exec_instr(in, slot, rows, rows8, use_sleef);
    } else {
      exec_instr(in, slot, n, n8, use_sleef);
    }
  }
  static void run(void* self, int32_t k) { (*static_cast<const TileStep*>(self))(k); }
};
}  // namespace

NativeTileFn Cluster::native_fn() const {
  if (NativeKernel* k = native_.kernel.load(std::memory_order_acquire)) return k->get();
  const NativeTierPolicy& policy = native_tier_policy();
  if (!policy.enabled || native_.runs.load(std::memory_order_relaxed) >= policy.hot_runs) return nullptr;
  // Exactly one run (the hot_runs-th) asks; the others interpret until the kernel is loaded.
  if (native_.runs.fetch_add(1, std::memory_order_relaxed) + 1 != policy.hot_runs) return nullptr;
  const std::string source = native_source(policy.lanes);
  NativeKernel* k = source.empty() ? nullptr : native_kernel(source);
  if (k == nullptr) return nullptr;
  native_.kernel.store(k, std::memory_order_release);
  return k->get();
}

void Cluster::run(std::vector<at::Tensor>& values, const std::vector<at::Tensor*>& outs) const {
  // Walk order: row-major over the shape, or channels-last's memory order (N, spatial..., C).
  const std::optional<at::MemoryFormat> walk = walk_format(values);
  c10::SmallVector<int64_t, 6> order;
  if (walk) {
    order.push_back(0);
    for (size_t d = 2; d < shape_.size(); ++d) order.push_back(static_cast<int64_t>(d));
    order.push_back(1);
  }
  c10::SmallVector<int64_t, 6> walk_shape(shape_.begin(), shape_.end());
  auto permuted = [&](c10::IntArrayRef v) {
    c10::SmallVector<int64_t, 6> p(v.begin(), v.end());
    for (size_t d = 0; d < order.size(); ++d) p[d] = v[static_cast<size_t>(order[d])];
    return p;
  };
  if (!order.empty()) walk_shape = permuted(shape_);
  std::vector<Access> in_acc;
  in_acc.reserve(inputs_.size());
  for (const Input& in : inputs_) {
    const at::Tensor& v = values[in.node];
    TPU_CHECK(v.defined(), "host fusion: operand %", in.node, " has no value");
    // A value may be smaller than its node's shape (a 0-d constant): read it expanded.
    at::Tensor t = v.sizes().equals(in.shape) ? v : v.expand(in.shape);
    // Per-row inputs walk the lead shape (one value per row); the others the cluster's shape.
    const size_t rank = in.compact ? static_cast<size_t>(lead_rank_) : shape_.size();
    c10::SmallVector<int64_t, 6> strides(rank, 0);
    if (in.broadcast) {
      for (size_t k = 0; k < in.dims.size(); ++k) {
        if (in.shape[k] != 1) strides[in.dims[k]] = t.stride(static_cast<int64_t>(k));
      }
    } else {
      strides.assign(t.strides().begin(), t.strides().end());
    }
    if (!order.empty() && !in.compact) strides = permuted(strides);
    in_acc.push_back(make_access(const_cast<void*>(t.const_data_ptr()), t.scalar_type(),
                                 c10::IntArrayRef(walk_shape).slice(0, rank), strides));
  }
  std::vector<Access> out_acc;
  out_acc.reserve(stores_.size());
  for (size_t j = 0; j < stores_.size(); ++j) {
    const Store& s = stores_[j];
    // In a permuted walk, full-size values are stored in its memory order (0-d ones as they are).
    const bool walked = !order.empty() && s.shape.size() == shape_.size();
    at::Tensor dest = outs[j] != nullptr ? *outs[j]
                                         : at::empty(s.shape, at::TensorOptions().dtype(s.dtype).memory_format(
                                                                  walked ? *walk : at::MemoryFormat::Contiguous));
    values[s.node] = dest;
    // Reduced values are written once per row: their access walks the lead shape.
    void* base = dest.numel() ? dest.data_ptr() : nullptr;
    out_acc.push_back(walked ? make_access(base, s.dtype, walk_shape, permuted(dest.strides()))
                             : make_access(base, s.dtype, s.shape, dest.strides()));
  }
  if (numel_ == 0) return;
  // Stores into contiguous float32 memory that no input reads are computed in place: the
  // storing instruction's buffer is the destination itself (except in a last partial tile,
  // whose rounded-up lanes would run past it), which saves the copy out of the tile.
  auto byte_span = [](const Access& a) {
    return byte_extent(a.base, a.sizes, a.strides, static_cast<int64_t>(c10::elementSize(a.dtype)));
  };
  c10::SmallVector<uint8_t, 16> store_in_place(stores_.size(), 0);
  for (size_t j = 0; j < stores_.size(); ++j) {
    const Access& o = out_acc[j];
    if (lead_rank_ >= 0 || !stores_[j].per_tile || o.dtype != at::kFloat || !o.contiguous() || o.base == nullptr) {
      continue;
    }
    const auto [lo, hi] = byte_span(o);
    store_in_place[j] = std::none_of(in_acc.begin(), in_acc.end(), [&, lo = lo, hi = hi](const Access& a) {
      const auto [alo, ahi] = byte_span(a);
      return alo <= hi && lo <= ahi;
    });
  }
  const int64_t tile = tile_, num_tiles = (numel_ + tile - 1) / tile, stride = slot_stride_, row = row_;
  // How each input reaches its slot: filled once (one value for every tile), read where it lies
  // (contiguous float32: no instruction writes an input's slot, build() never reuses one), or
  // loaded per tile. On the stack for clusters of up to 16 inputs: no allocation per run.
  // Also loaded once: an input broadcast along its leading dims whose remaining extent divides
  // the tile (a row cluster's weight over its rows; a bias of 64 in tiles of 1024), since every
  // tile starts at a multiple of it and so holds the same values. One value per tile: an input
  // broadcast along its innermost dims over a multiple of the tile (a per-channel mean over
  // 64x64 images in tiles of 1024) holds one value in each tile, filled only when it changes.
  enum InputMode : uint8_t { kLoadPerTile, kUniform, kInPlace, kSameEveryTile, kOneValuePerTile };
  c10::SmallVector<uint8_t, 16> mode(inputs_.size(), kLoadPerTile);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Access& a = in_acc[i];
    if (inputs_[i].one_element || a.uniform()) {
      mode[i] = kUniform;
    } else if (a.dtype == at::kFloat && a.contiguous() && !inputs_[i].compact) {
      mode[i] = kInPlace;
    } else if (!inputs_[i].compact && a.sizes.size() >= 2 && a.strides[0] == 0 && tile_ % (numel_ / a.sizes[0]) == 0) {
      mode[i] = kSameEveryTile;
    } else if (!inputs_[i].compact && a.strides.back() == 0 && a.sizes.back() % tile_ == 0) {
      mode[i] = kOneValuePerTile;
    }
  }

  const bool use_sleef = sleef().unary[kExp] != nullptr;
  const NativeTileFn native = native_fn();
  // A column sum adds its rows per tile when the walk visits the member as [rows, kept]: kept
  // dims trailing in a row-major walk, the channels in a channels-last one. Otherwise its
  // member goes to a scratch tensor in walk order, summed after the tiles.
  const int64_t columns = column_count_;
  const bool columns_in_tiles = column_sum_ >= 0 && (walk ? column_kept_ == std::make_pair(1, 2)
                                                          : column_kept_.second == static_cast<int>(shape_.size()));
  // A member the cluster stores anyway is summed from its destination after the tiles.
  at::Tensor column_scratch;
  Access column_scratch_acc;
  if (column_sum_ >= 0 && !columns_in_tiles && !column_operand_stored_) {
    column_scratch = at::empty(
        shape_, at::TensorOptions().dtype(at::kFloat).memory_format(walk ? *walk : at::MemoryFormat::Contiguous));
    column_scratch_acc =
        walk ? make_access(column_scratch.data_ptr(), at::kFloat, walk_shape, permuted(column_scratch.strides()))
             : make_access(column_scratch.data_ptr(), at::kFloat, shape_, column_scratch.strides());
  }
  // A total sum: one sum per block of kSumBlock elements; a column sum: one per column per
  // block of kColumnBlock rows. Each block's tiles run on one thread.
  const int64_t block = total_sum_ >= 0 ? kSumBlock : columns_in_tiles ? kColumnBlock * columns : tile;
  const int64_t tiles_per_block = block / tile, num_blocks = (numel_ + block - 1) / block;
  std::vector<float> block_sums(total_sum_ >= 0    ? static_cast<size_t>(num_blocks)
                                : columns_in_tiles ? static_cast<size_t>(num_blocks * columns)
                                                   : 0);
  auto run_tiles = [&](int64_t t0, int64_t t1) {
    LaneSums lanes;
    thread_local ColumnLanes column_lanes;
    // Per-thread scratch, reused across runs: a fresh vector per run cost a malloc (often
    // above glibc's fastbin sizes, so it consolidated the heap) plus a zero fill.
    thread_local std::vector<float> scratch;
    const size_t need = static_cast<size_t>(num_slots_) * stride;
    if (scratch.size() < need) scratch.assign(need, 0.f);
    float* buf = scratch.data();
    thread_local std::vector<float*> slot_ptrs;  // where each slot's values are this tile
    slot_ptrs.resize(static_cast<size_t>(num_slots_));
    // Through a plain pointer from here: each use of a thread_local of a shared library is a
    // __tls_get_addr call (8% of a row cluster's time when slot() read it per instruction).
    float** const slot_ptr = slot_ptrs.data();
    for (int16_t s = 0; s < num_slots_; ++s) slot_ptr[s] = buf + s * stride;
    auto slot = [slot_ptr](int16_t s) { return s < 0 ? nullptr : slot_ptr[s]; };
    // Splats and uniform inputs are the same for every tile: filled once.
    for (auto [s, v] : splats_) std::fill_n(slot(s), tile, v);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (mode[i] == kSameEveryTile) load(in_acc[i], 0, std::min(tile, numel_), slot(inputs_[i].slot));
      if (mode[i] != kUniform) continue;
      float v;
      load(in_acc[i], 0, 1, &v);
      std::fill_n(slot(inputs_[i].slot), tile, v);
    }
    const int64_t tile8 = (tile + 7) / 8 * 8;
    // Every lane of an invariant buffer holds the same value (it reads only such buffers), so
    // one group is computed and copied across the tile: an optimizer's recomputed bias
    // corrections (executor.h) took SLEEF's pow over whole tiles, 8% of a compiled AdamW step.
    const int64_t group = std::min<int64_t>(tile8, 16);
    for (const Instr& in : program_) {
      if (!in.invariant) continue;
      exec_instr(in, slot, group, group, use_sleef);
      float* d = slot(in.dst);
      std::fill(d + group, d + tile8, d[0]);
    }
    // kOneValuePerTile: the value each input's slot was filled with in this call (its bits;
    // slots of inputs are written by nothing else), and for how many lanes.
    c10::SmallVector<std::pair<uint32_t, int64_t>, 16> filled(inputs_.size(), {0, 0});
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t start = t * tile, n = std::min(tile, numel_ - start), n8 = (n + 7) / 8 * 8;
      for (size_t i = 0; i < inputs_.size(); ++i) {
        if (mode[i] == kUniform || mode[i] == kSameEveryTile) continue;
        const int16_t s = inputs_[i].slot;
        if (mode[i] == kOneValuePerTile) {
          float v;
          load(in_acc[i], start, 1, &v);
          const uint32_t bits = std::bit_cast<uint32_t>(v);
          slot_ptr[s] = buf + s * stride;
          if (filled[i].second < n || filled[i].first != bits) {
            std::fill_n(slot_ptr[s], n, v);
            filled[i] = {bits, n};
          }
          continue;
        }
        // In place only while the 8-lane rounding reads inside the operand (not the last tile).
        if (mode[i] == kInPlace && start + n8 <= numel_) {
          slot_ptr[s] = reinterpret_cast<float*>(in_acc[i].base) + start;
          continue;
        }
        slot_ptr[s] = buf + s * stride;
        if (inputs_[i].compact) {
          load(in_acc[i], start / row, n / row, slot_ptr[s]);
        } else {
          load(in_acc[i], start, n, slot_ptr[s]);
        }
      }
      const int64_t rows = n / row;
      const bool whole = start + n8 <= numel_;
      for (size_t j = 0; j < stores_.size(); ++j) {
        if (!store_in_place[j]) continue;
        const int16_t s = stores_[j].slot;
        slot_ptr[s] = whole ? reinterpret_cast<float*>(out_acc[j].base) + start : buf + s * stride;
      }
      // Lanes past n hold stale data from earlier tiles or runs (or zeros): computed, never stored.
      TileStep tile_step{program_.data(), slot_ptr, n, row, use_sleef};
      if (native != nullptr) {
        native(slot_ptr, n8, &TileStep::run, &tile_step);
      } else {
        for (size_t k = 0; k < program_.size(); ++k) {
          if (!program_[k].invariant) tile_step(static_cast<int32_t>(k));
        }
      }
      if (total_slot_ >= 0) {
        lane_sums_add_tile(lanes, slot(total_slot_), n);
        if ((start + n) % kSumBlock == 0 || start + n == numel_) {
          block_sums[static_cast<size_t>(start / kSumBlock)] = lane_sums_finish(lanes);
          lanes = LaneSums();
        }
      }
      if (columns_in_tiles) {
        if (start % block == 0) column_lanes.reset(columns);
        column_lanes.add(start % block, slot(column_slot_), n);
        if ((start + n) % block == 0 || start + n == numel_)
          column_lanes.finish(&block_sums[(start / block) * columns]);
      } else if (column_scratch.defined()) {
        store(column_scratch_acc, start, n, slot(column_slot_));
      }
      for (size_t j = 0; j < stores_.size(); ++j) {
        // Already there, or written after the tiles.
        if ((store_in_place[j] && whole) || stores_[j].total || stores_[j].column) continue;
        if (!stores_[j].reduced) {
          store(out_acc[j], start, n, slot(stores_[j].slot));
          continue;
        }
        const float* v = slot(stores_[j].slot);
        if (stores_[j].shape.empty()) {  // one value for the whole cluster: the first tile writes it
          if (start == 0) store(out_acc[j], 0, 1, v);
          continue;
        }
        // Per-row values are compact (an invariant one holds the same value everywhere).
        store(out_acc[j], start / row, rows, v);
      }
    }
  };
  // A stream worker runs ATen with one thread, so at::parallel_for is serial there: a cluster
  // with enough work (elements x instructions, compared like an elementwise kernel's elements)
  // splits its tiles across the kernel threads instead (kernel_threads.h).
  // A sum's blocks never straddle two threads: its tiles are handed out in whole blocks.
  const int64_t units = (num_tiles + tiles_per_block - 1) / tiles_per_block;
  auto run_units = [&](int64_t u0, int64_t u1) {
    run_tiles(u0 * tiles_per_block, std::min(num_tiles, u1 * tiles_per_block));
  };
  parallel_units(split_work(), units, tile * tiles_per_block, run_units);
  for (size_t j = 0; j < stores_.size(); ++j) {
    if (stores_[j].total) {
      const float sum = total_sum(block_sums.data(), static_cast<int64_t>(block_sums.size()));
      store(out_acc[j], 0, 1, &sum);
    } else if (stores_[j].column) {
      std::vector<float> sums(static_cast<size_t>(columns));
      if (columns_in_tiles) {
        combine_column_blocks(block_sums.data(), num_blocks, columns, sums.data());
      } else {
        column_sums(column_scratch.defined() ? column_scratch : values[column_operand_], column_kept_.first,
                    column_kept_.second, sums.data());
      }
      store(out_acc[j], 0, columns, sums.data());
    }
  }
}

std::string Cluster::describe() const {
  std::string s = "cluster shape " + c10::str(c10::IntArrayRef(shape_)) + " " + c10::toString(dtype_) + ", tile " +
                  std::to_string(tile_) + (lead_rank_ >= 0 ? " (rows of " + std::to_string(row_) + ")" : "") + ", " +
                  std::to_string(num_slots_) + " buffers:";
  for (const std::string& m : member_names_) s += " " + m + ",";
  s.pop_back();
  s += "; inputs";
  for (const Input& in : inputs_) s += " %" + std::to_string(in.node) + (in.broadcast ? "(broadcast)" : "");
  if (!splats_.empty()) s += " + " + std::to_string(splats_.size()) + " constants";
  s += "; stores";
  for (int32_t m : store_nodes_) s += " %" + std::to_string(m);
  return s;
}

}  // namespace torch_tpu::runtime::host
