// The tile loops and math entry points of tile_math.h.
#include "runtime/host/tile_math.h"

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
#include "runtime/host/kernel_threads.h"
#include "runtime/host/kernels.h"

namespace torch_tpu::runtime::host {

bool avx512_lanes() {
#if defined(__x86_64__)
  static const bool yes = __builtin_cpu_supports("avx512f") && at::get_cpu_capability() == "AVX512";
  return yes;
#else
  return false;
#endif
}

namespace tile {

using ir::DType;
using ir::OpKind;

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

// The summation order of every float32 row sum (tile_cluster.h, row_sums): 32 lanes, lane j adding
// elements j, j + 32, j + 64, ... in sequence (the last partial group of 32 zero-padded: +0.0
// leaves a lane unchanged, and a lane that starts at +0.0 never holds -0.0), then the lanes
// pairwise (lane j += lane j + 16, then + 8, + 4, + 2, + 1). Each lane is an independent chain
// of IEEE additions, so the AVX2 clone, the default (SSE) clone and a scalar build give the
// same bits. Four 8-wide accumulators in registers hide the add latency (an array of 32
// floats stayed on the stack: a store-to-load chain per add, half ATen's speed), and each
// lane adds at most kMaxRow / 32 terms, so the rounding error stays near ATen's cascade sum.
TPU_AVX2_CLONES float row_sum_one(const float* __restrict x, int64_t m) {
  LaneSums s;
  lane_sums_add(s, x, m);
  return lane_sums_finish(s);
}

// One tile of a total sum's block (a multiple of 32 elements, or the tensor's last tile).
TPU_AVX2_CLONES void lane_sums_add_tile(LaneSums& s, const float* __restrict x, int64_t m) { lane_sums_add(s, x, m); }

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

bool sleef_available() { return sleef().unary[kExp] != nullptr; }

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

}  // namespace tile

using namespace tile;

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

}  // namespace torch_tpu::runtime::host
