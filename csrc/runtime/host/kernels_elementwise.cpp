// Elementwise IR ops (unary, binary, compare, select, convert) and leaves (constant, iota).
// Each maps to the ATen op builder.py's reference uses, so results match it bit for bit; the
// `_out` variants write straight into an output destination.
#include <ATen/Dispatch.h>
#include <c10/util/TypeCast.h>

#include <cmath>

#include "common/check.h"
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
      return UNARY_OUT(exp);
    case OpKind::kExpm1:
      return UNARY_OUT(expm1);
    case OpKind::kLog:
      return UNARY_OUT(log);
    case OpKind::kLog1p:
      return UNARY_OUT(log1p);
    case OpKind::kSqrt:
      return UNARY_OUT(sqrt);
    case OpKind::kRsqrt:
      return UNARY_OUT(rsqrt);
    // The reference's recipe (ATen has no cbrt); keeps the sign of -0 and NaN like it does.
    case OpKind::kCbrt:
      return UNARY_EXPR(at::sign(a) * at::abs(a).pow(1.0 / 3.0));
    case OpKind::kSin:
      return UNARY_OUT(sin);
    case OpKind::kCos:
      return UNARY_OUT(cos);
    case OpKind::kTan:
      return UNARY_OUT(tan);
    case OpKind::kTanh:
      return UNARY_OUT(tanh);
    case OpKind::kAsin:
      return UNARY_OUT(asin);
    case OpKind::kAcos:
      return UNARY_OUT(acos);
    case OpKind::kAtan:
      return UNARY_OUT(atan);
    case OpKind::kSinh:
      return UNARY_OUT(sinh);
    case OpKind::kCosh:
      return UNARY_OUT(cosh);
    case OpKind::kAsinh:
      return UNARY_OUT(asinh);
    case OpKind::kAcosh:
      return UNARY_OUT(acosh);
    case OpKind::kAtanh:
      return UNARY_OUT(atanh);
    case OpKind::kLogistic:
      return UNARY_OUT(sigmoid);
    case OpKind::kErf:
      return UNARY_OUT(erf);
    case OpKind::kErfinv:
      return UNARY_OUT(erfinv);
    case OpKind::kLgamma:
      return UNARY_OUT(lgamma);
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

Kernel binary_kernel(OpKind kind, int32_t x, int32_t y, bool integer) {
  switch (kind) {
    case OpKind::kAdd:
      return BINARY_OUT(add);
    case OpKind::kSub:
      return BINARY_OUT(sub);
    case OpKind::kMul:
      return BINARY_OUT(mul);
    case OpKind::kDiv:
      if (integer) {  // truncating; x / 0 raises ZeroDivisionError inside ATen
        return [x, y](const Values& v, at::Tensor* out) {
          return out ? at::div_out(*out, v[x], v[y], "trunc") : at::div(v[x], v[y], "trunc");
        };
      }
      return BINARY_OUT(div);
    case OpKind::kRem:
      return BINARY_OUT(fmod);
    case OpKind::kPow:
      return BINARY_OUT(pow);
    case OpKind::kMax:
      return BINARY_OUT(maximum);  // NaN-propagating
    case OpKind::kMin:
      return BINARY_OUT(minimum);
    case OpKind::kAtan2:
      return BINARY_OUT(atan2);
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

}  // namespace

Kernel make_elementwise_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  const at::ScalarType dtype = to_aten(n.dtype);
  if (ir::is_unary_elementwise(n.kind)) {
    return unary_kernel(n.kind, n.operands[0], g.node(n.operands[0]).dtype == ir::DType::kBool);
  }
  if (ir::is_binary_elementwise(n.kind)) {
    return binary_kernel(n.kind, n.operands[0], n.operands[1],
                         !ir::is_float(g.node(n.operands[0]).dtype));
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
      return compare_kernel(n.iattrs.at(0), n.operands[0], n.operands[1]);
    case OpKind::kSelect: {
      int32_t p = n.operands[0], t = n.operands[1], f = n.operands[2];
      return [p, t, f](const Values& v, at::Tensor* out) {
        return out ? at::where_out(*out, v[p], v[t], v[f]) : at::where(v[p], v[t], v[f]);
      };
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
      return [x, dtype](const Values& v, at::Tensor* out) {
        return out ? out->copy_(v[x]) : v[x].to(dtype);  // copy_ converts like .to()
      };
    }
    default:
      return {};
  }
}

}  // namespace torch_tpu::runtime::host
