// Elementwise IR ops (unary, binary, compare, select, convert) and leaves (constant, iota).
// Each maps to the ATen op builder.py's reference uses, so results match it bit for bit, except
// float32 transcendentals, sqrt, pow and atan2, which run the fused clusters' functions so that
// a value's bits do not depend on whether it was fused (tile_cluster.h, cluster_unary_f32): within an
// ulp of ATen's. The `_out` variants write straight into an output destination.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <c10/util/TypeCast.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/check.h"
#include "runtime/host/tile_cluster.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/kernels.h"

namespace torch_tpu::runtime::host {
namespace {

using ir::OpKind;

// Wraps `fn(a)` / `fn_out(out, a)` into a kernel reading operand x.
#define UNARY_OUT(FN) \
  [x](const Values& v, at::Tensor* out) { return out ? at::FN##_out(*out, v[x]) : at::FN(v[x]); }
#define UNARY_EXPR(EXPR)              \
  [x](const Values& v, at::Tensor*) { \
    const at::Tensor& a = v[x];       \
    return EXPR;                      \
  }
#define BINARY_OUT(FN)                                                \
  [x, y](const Values& v, at::Tensor* out) {                          \
    return out ? at::FN##_out(*out, v[x], v[y]) : at::FN(v[x], v[y]); \
  }

// Every element of `t` is its first (a broadcast scalar: all strides 0).
bool is_uniform(const at::Tensor& t) {
  return std::all_of(t.strides().begin(), t.strides().end(), [](int64_t s) { return s == 0; }) || t.numel() == 1;
}

// A float32 unary (b null) or binary op with the fused clusters' function (tile_cluster.h,
// cluster_unary_f32 / cluster_binary_f32), into `out` when given. Over ATen's intra-op threads
// with ATen's grain, as the ATen kernel would run (serial on a stream worker, where split_large
// cuts large ones); lanes are independent, so the cut does not change the bits. Operands of one
// dense layout are read in memory order and the result keeps it (channels-last stays
// channels-last, as in ATen's kernels: a later reduction's order, and so its bits, follow the
// layout it reads); other operands are made contiguous, except a uniform b (a broadcast
// scalar), which is read as its one value rather than materialized. scalar_exponent: see
// cluster_binary_f32.
at::Tensor float_cluster_op(OpKind kind, const at::Tensor& a, const at::Tensor* b, at::Tensor* out,
                            bool scalar_exponent = false) {
  const bool uniform = b != nullptr && b->numel() > 0 && is_uniform(*b);
  const bool same = a.is_non_overlapping_and_dense() &&
                    (b == nullptr || uniform || (b->sizes() == a.sizes() && b->strides() == a.strides()));
  const at::Tensor x = same ? a : a.contiguous();
  const at::Tensor y = b == nullptr ? at::Tensor() : same || uniform ? *b : b->contiguous();  // IR operands: one shape
  const bool direct = out != nullptr && out->scalar_type() == at::kFloat && out->strides() == x.strides() &&
                      out->is_non_overlapping_and_dense();
  at::Tensor dst = direct ? *out : at::empty_like(x);
  float* d = dst.mutable_data_ptr<float>();
  const float* xp = x.const_data_ptr<float>();
  const float* yp = b == nullptr ? nullptr : y.const_data_ptr<float>();
  at::parallel_for(0, x.numel(), at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
    if (yp == nullptr) {
      cluster_unary_f32(kind, d + begin, xp + begin, end - begin);
    } else {
      cluster_binary_f32(kind, d + begin, xp + begin, uniform ? yp : yp + begin, end - begin, uniform, scalar_exponent);
    }
  });
  if (out == nullptr) return dst;
  if (!direct) out->copy_(dst);
  return *out;
}

// For the ops whose ATen kernel may give other float32 bits than the clusters' function:
// that function for float32, so strict and fused mode agree.
#define UNARY_AS_CLUSTERS(FN, KIND)                                                    \
  [x](const Values& v, at::Tensor* out) {                                              \
    const at::Tensor& a = v[x];                                                        \
    if (a.scalar_type() == at::kFloat) return float_cluster_op(KIND, a, nullptr, out); \
    return out ? at::FN##_out(*out, a) : at::FN(a);                                    \
  }
#define BINARY_AS_CLUSTERS(FN, KIND)                                            \
  [x, y](const Values& v, at::Tensor* out) {                                    \
    if (v[x].scalar_type() == at::kFloat && v[y].scalar_type() == at::kFloat) { \
      return float_cluster_op(KIND, v[x], &v[y], out);                          \
    }                                                                           \
    return out ? at::FN##_out(*out, v[x], v[y]) : at::FN(v[x], v[y]);           \
  }

Kernel unary_kernel(OpKind kind, int32_t x, bool is_bool) {
  switch (kind) {
    case OpKind::kNeg:
      return UNARY_OUT(neg);
    case OpKind::kAbs:
      return UNARY_OUT(abs);
    case OpKind::kSign:
      return UNARY_OUT(sign);
    case OpKind::kFloor:
      return UNARY_OUT(floor);
    case OpKind::kCeil:
      return UNARY_OUT(ceil);
    case OpKind::kRoundEven:
      return UNARY_OUT(round);  // torch.round: half to even
    case OpKind::kTrunc:
      return UNARY_OUT(trunc);
    case OpKind::kExp:
      return UNARY_AS_CLUSTERS(exp, OpKind::kExp);
    case OpKind::kExpm1:
      return UNARY_AS_CLUSTERS(expm1, OpKind::kExpm1);
    case OpKind::kLog:
      return UNARY_AS_CLUSTERS(log, OpKind::kLog);
    case OpKind::kLog1p:
      return UNARY_AS_CLUSTERS(log1p, OpKind::kLog1p);
    case OpKind::kSqrt:
      return UNARY_AS_CLUSTERS(sqrt, OpKind::kSqrt);
    case OpKind::kRsqrt:
      return UNARY_AS_CLUSTERS(rsqrt, OpKind::kRsqrt);
    // The reference's recipe (ATen has no cbrt); keeps the sign of -0 and NaN like it does.
    case OpKind::kCbrt:
      return UNARY_EXPR(at::sign(a) * at::abs(a).pow(1.0 / 3.0));
    case OpKind::kSin:
      return UNARY_AS_CLUSTERS(sin, OpKind::kSin);
    case OpKind::kCos:
      return UNARY_AS_CLUSTERS(cos, OpKind::kCos);
    case OpKind::kTan:
      return UNARY_AS_CLUSTERS(tan, OpKind::kTan);
    case OpKind::kTanh:
      return UNARY_AS_CLUSTERS(tanh, OpKind::kTanh);
    case OpKind::kAsin:
      return UNARY_AS_CLUSTERS(asin, OpKind::kAsin);
    case OpKind::kAcos:
      return UNARY_AS_CLUSTERS(acos, OpKind::kAcos);
    case OpKind::kAtan:
      return UNARY_AS_CLUSTERS(atan, OpKind::kAtan);
    case OpKind::kSinh:
      return UNARY_AS_CLUSTERS(sinh, OpKind::kSinh);
    case OpKind::kCosh:
      return UNARY_AS_CLUSTERS(cosh, OpKind::kCosh);
    case OpKind::kAsinh:
      return UNARY_AS_CLUSTERS(asinh, OpKind::kAsinh);
    case OpKind::kAcosh:
      return UNARY_AS_CLUSTERS(acosh, OpKind::kAcosh);
    case OpKind::kAtanh:
      return UNARY_AS_CLUSTERS(atanh, OpKind::kAtanh);
    case OpKind::kLogistic:
      return UNARY_AS_CLUSTERS(sigmoid, OpKind::kLogistic);
    case OpKind::kErf:
      return UNARY_AS_CLUSTERS(erf, OpKind::kErf);
    case OpKind::kErfinv:
      return UNARY_OUT(erfinv);
    case OpKind::kLgamma:
      return UNARY_AS_CLUSTERS(lgamma, OpKind::kLgamma);
    case OpKind::kDigamma:
      return UNARY_OUT(digamma);
    case OpKind::kNot:
      if (is_bool) return UNARY_OUT(logical_not);
      return UNARY_OUT(bitwise_not);
    case OpKind::kIsFinite:
      return UNARY_EXPR(at::isfinite(a));
    default:
      return {};
  }
}

// shr_logical: shift the operand's bits as unsigned; shifts outside [0, bits) give 0.
template <typename T>
void shr_logical_loop(const T* a, const T* b, T* out, int64_t n) {
  using U = std::make_unsigned_t<T>;
  constexpr int64_t bits = sizeof(T) * 8;
  for (int64_t i = 0; i < n; ++i) {
    int64_t s = static_cast<int64_t>(b[i]);
    out[i] = s < 0 || s >= bits ? T(0) : static_cast<T>(static_cast<U>(a[i]) >> s);
  }
}

at::Tensor shr_logical(const at::Tensor& a_in, const at::Tensor& b_in) {
  at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  at::Tensor out = at::empty(a.sizes(), a.options());
  AT_DISPATCH_INTEGRAL_TYPES(a.scalar_type(), "shr_logical", [&] {
    shr_logical_loop(a.const_data_ptr<scalar_t>(), b.const_data_ptr<scalar_t>(),
                     out.mutable_data_ptr<scalar_t>(), a.numel());
  });
  return out;
}

// Integer div (truncating) and rem (the dividend's sign, as fmod): CPU's
// div(rounding_mode="trunc") and fmod, except at MIN / -1, where the hardware traps (ATen's CPU
// division kernel dies of SIGFPE on int32 and int64): the quotient wraps to MIN, as CPU's floor
// division and its int8/int16 kernels give, and the remainder is 0. A zero divisor raises ATen's
// ZeroDivisionError. One pass over the operands as they lie (a broadcast divisor stays stride 0).
template <typename T>
T div_trunc_int(T a, T b) {
  TORCH_CHECK(b != 0, "ZeroDivisionError");
  if constexpr (std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (b == T(-1)) return static_cast<T>(U(0) - static_cast<U>(a));  // wraps: -MIN == MIN
  }
  return static_cast<T>(a / b);
}

template <typename T>
T fmod_int(T a, T b) {
  TORCH_CHECK(b != 0, "ZeroDivisionError");
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
  }
  return static_cast<T>(a % b);
}

at::Tensor integer_division(OpKind kind, const at::Tensor& a, const at::Tensor& b, at::Tensor* out) {
  at::Tensor result = out ? *out : at::Tensor();
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(result)
                                .add_const_input(a)
                                .add_const_input(b)
                                .build();
  AT_DISPATCH_INTEGRAL_TYPES(iter.common_dtype(), "integer_division", [&] {
    auto loop = [](auto fn) {
      return [fn](char** data, const int64_t* strides, int64_t n) {
        char *d = data[0], *pa = data[1], *pb = data[2];
        for (int64_t i = 0; i < n; ++i, d += strides[0], pa += strides[1], pb += strides[2]) {
          *reinterpret_cast<scalar_t*>(d) =
              fn(*reinterpret_cast<const scalar_t*>(pa), *reinterpret_cast<const scalar_t*>(pb));
        }
      };
    };
    if (kind == OpKind::kDiv) {
      iter.for_each(loop(div_trunc_int<scalar_t>));
    } else {
      iter.for_each(loop(fmod_int<scalar_t>));
    }
  });
  return iter.output();
}

Kernel binary_kernel(OpKind kind, int32_t x, int32_t y, bool integer, bool scalar_exponent) {
  switch (kind) {
    case OpKind::kAdd:
      return BINARY_OUT(add);
    case OpKind::kSub:
      return BINARY_OUT(sub);
    case OpKind::kMul:
      return BINARY_OUT(mul);
    case OpKind::kDiv:
      if (integer) {  // truncating; x / 0 raises ZeroDivisionError
        return [x, y](const Values& v, at::Tensor* out) { return integer_division(OpKind::kDiv, v[x], v[y], out); };
      }
      return BINARY_OUT(div);
    case OpKind::kRem:
      if (integer) {  // x % 0 raises ZeroDivisionError
        return [x, y](const Values& v, at::Tensor* out) { return integer_division(OpKind::kRem, v[x], v[y], out); };
      }
      return BINARY_OUT(fmod);
    case OpKind::kPow:
      return [x, y, scalar_exponent](const Values& v, at::Tensor* out) {
        const at::Tensor &a = v[x], &e = v[y];
        if (a.scalar_type() == at::kFloat && e.scalar_type() == at::kFloat) {
          return float_cluster_op(OpKind::kPow, a, &e, out, scalar_exponent);
        }
        // A Python number exponent (broadcast by the lowering) takes ATen's scalar-exponent
        // kernel, whose recipes (x^2 = x*x, x^-1 = 1/x, ...) are CPU's bits for pow(x, 3.0) in
        // float64; float32 takes the same recipes above (tile_math.cpp, pow_as).
        if (scalar_exponent && a.is_floating_point() && e.numel() > 0 && is_uniform(e)) {
          const at::Scalar s = e.as_strided({}, {}).item();
          return out ? at::pow_out(*out, a, s) : at::pow(a, s);
        }
        return out ? at::pow_out(*out, a, e) : at::pow(a, e);
      };
    case OpKind::kMax:
      return BINARY_OUT(maximum);  // NaN-propagating
    case OpKind::kMin:
      return BINARY_OUT(minimum);
    case OpKind::kAtan2:
      return BINARY_AS_CLUSTERS(atan2, OpKind::kAtan2);
    case OpKind::kAnd:
      return BINARY_OUT(bitwise_and);
    case OpKind::kOr:
      return BINARY_OUT(bitwise_or);
    case OpKind::kXor:
      return BINARY_OUT(bitwise_xor);
    case OpKind::kShl:
      return BINARY_OUT(bitwise_left_shift);
    case OpKind::kShrArith:
      return BINARY_OUT(bitwise_right_shift);
    case OpKind::kShrLogical:
      return [x, y](const Values& v, at::Tensor*) { return shr_logical(v[x], v[y]); };
    default:
      return {};
  }
}

Kernel compare_kernel(int64_t dir, int32_t x, int32_t y) {
  switch (static_cast<ir::CompareDir>(dir)) {
    case ir::CompareDir::kEq:
      return BINARY_OUT(eq);
    case ir::CompareDir::kNe:
      return BINARY_OUT(ne);
    case ir::CompareDir::kLt:
      return BINARY_OUT(lt);
    case ir::CompareDir::kLe:
      return BINARY_OUT(le);
    case ir::CompareDir::kGt:
      return BINARY_OUT(gt);
    case ir::CompareDir::kGe:
      return BINARY_OUT(ge);
  }
  return {};
}

// dst (0-d) = src (one element) converted like ATen's copy_ converts.
void convert_scalar(const at::Tensor& src, at::Tensor& dst) {
  TPU_CHECK(src.numel() == 1 && dst.numel() == 1, "host runtime: scalar convert of ", src.numel(),
            " elements");
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, src.scalar_type(), "convert_src", [&] {
    const scalar_t x = *src.const_data_ptr<scalar_t>();
    using src_t = scalar_t;
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, dst.scalar_type(), "convert_dst", [&] {
      *dst.mutable_data_ptr<scalar_t>() = c10::convert<scalar_t, src_t>(x);
    });
  });
}

// A large kernel split into row blocks on kernel threads (kernel_threads.h): `chunk` is the
// same kernel built over operand slots 0..k-1, run per block on the operands narrowed to the
// block's rows (elementwise operands have the node's shape) and writing into the block of the
// destination. Small nodes (and 0-d or single-row ones) keep `whole` unwrapped.
Kernel split_large(const ir::Node& n, Kernel whole, Kernel chunk) {
  const int64_t numel = c10::multiply_integers(n.shape);
  if (!whole || n.shape.empty() || n.shape[0] < 2 || numel < kSplitMinElements) return whole;
  return [whole = std::move(whole), chunk = std::move(chunk), operands = n.operands, shape = n.shape,
          dtype = to_aten(n.dtype), numel](const Values& v, at::Tensor* out) {
    const int64_t rows = shape[0];
    const int parts = split_parts(numel, rows);
    if (parts <= 1) return whole(v, out);
    at::Tensor dst = out ? *out : at::empty(shape, at::TensorOptions().dtype(dtype));
    run_split_rows(parts, rows, [&](int64_t begin, int64_t end) {
      const int64_t len = end - begin;
      Values args;
      args.reserve(operands.size());
      for (int32_t id : operands) {
        const at::Tensor& t = v[id];
        args.push_back(t.dim() == static_cast<int64_t>(shape.size()) && t.size(0) == rows ? t.narrow(0, begin, len)
                                                                                           : t);
      }
      at::Tensor block = dst.narrow(0, begin, len);
      at::Tensor r = chunk(args, &block);
      if (!r.is_same(block)) block.copy_(r);  // kernels without an `_out` variant
    });
    return dst;
  };
}

}  // namespace

Kernel make_elementwise_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  const at::ScalarType dtype = to_aten(n.dtype);
  if (ir::is_unary_elementwise(n.kind)) {
    const bool is_bool = g.node(n.operands[0]).dtype == ir::DType::kBool;
    return split_large(n, unary_kernel(n.kind, n.operands[0], is_bool), unary_kernel(n.kind, 0, is_bool));
  }
  if (ir::is_binary_elementwise(n.kind)) {
    const bool integer = !ir::is_float(g.node(n.operands[0]).dtype);
    const bool scalar_exponent = ir::pow_has_scalar_exponent(n);
    return split_large(n, binary_kernel(n.kind, n.operands[0], n.operands[1], integer, scalar_exponent),
                       binary_kernel(n.kind, 0, 1, integer, scalar_exponent));
  }
  switch (n.kind) {
    case OpKind::kConstant: {
      // Built once; like builder.py, integers wrap into the dtype and floats round from double.
      at::Tensor c = n.fattrs.empty() ? at::scalar_tensor(n.iattrs.at(0), at::kLong).to(dtype)
                                      : at::scalar_tensor(n.fattrs.at(0), at::kDouble).to(dtype);
      return [c](const Values&, at::Tensor*) { return c; };
    }
    case OpKind::kIota: {
      int64_t dim = n.iattrs.at(0);
      std::vector<int64_t> view(n.shape.size(), 1), shape = n.shape;
      view[dim] = shape[dim];
      // The expanded view costs only the arange; consumers read it with stride 0.
      return [dim, view, shape, dtype](const Values&, at::Tensor*) {
        return at::arange(shape[dim], at::kLong).to(dtype).view(view).expand(shape);
      };
    }
    case OpKind::kCompare:
      return split_large(n, compare_kernel(n.iattrs.at(0), n.operands[0], n.operands[1]),
                         compare_kernel(n.iattrs.at(0), 0, 1));
    case OpKind::kSelect: {
      auto select = [](int32_t p, int32_t t, int32_t f) -> Kernel {
        return [p, t, f](const Values& v, at::Tensor* out) {
          return out ? at::where_out(*out, v[p], v[t], v[f]) : at::where(v[p], v[t], v[f]);
        };
      };
      return split_large(n, select(n.operands[0], n.operands[1], n.operands[2]), select(0, 1, 2));
    }
    case OpKind::kConvert: {
      int32_t x = n.operands[0];
      if (n.shape.empty()) {
        // 0-d (Python scalars: learning rates, alphas, step counts): one c10::convert, which
        // is the conversion ATen's copy kernel applies per element, without a TensorIterator.
        return [x, dtype](const Values& v, at::Tensor* out) {
          at::Tensor r = out ? *out : at::empty({}, at::TensorOptions().dtype(dtype));
          convert_scalar(v[x], r);
          return r;
        };
      }
      auto convert = [dtype](int32_t x) -> Kernel {
        return [x, dtype](const Values& v, at::Tensor* out) {
          return out ? out->copy_(v[x]) : v[x].to(dtype);  // copy_ converts like .to()
        };
      };
      return split_large(n, convert(x), convert(0));
    }
    default:
      return {};
  }
}

}  // namespace torch_tpu::runtime::host
