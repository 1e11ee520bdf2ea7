// The per-op translation table (see emitter.h for the design and docs/stablehlo.md for the map).
#include "stablehlo/emitter.h"

#include <c10/util/accumulate.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <optional>

#include "common/check.h"
#include "ir/verifier.h"
#include "stablehlo/rng.h"
#include "stablehlo/text.h"

namespace torch_tpu::stablehlo {
namespace {

using ir::OpKind;
using Shape = std::vector<int64_t>;

// Adding an op to ops.h must add its translation below (emit_node's switch has no default).
static_assert(ir::kNumOpKinds == 75, "new IR op: add its StableHLO translation to emit_node");

[[noreturn]] void unsupported(const ir::Node& n, const std::string& why) {
  C10_THROW_ERROR(NotImplementedError, std::string("torch_tpu: StableHLO emitter: ") + ir::op_name(n.kind) + " on " +
                                           ir::dtype_name(n.dtype) + ": " + why);
}

bool is_half(const std::string& e) { return e == "f16" || e == "bf16"; }

Val zero_like(Body& b, const std::string& e, const Shape& shape) {
  return elem_is_float(e) ? b.fsplat(0.0, e, shape) : b.isplat(0, e, shape);
}

// The IR's convert (torch's .to): ->bool is != 0; float->int truncates through int64 and wraps
// like torch; f64->f16/bf16 rounds through f32 like c10::Half/BFloat16.
Val ir_convert(Body& b, const Val& x, const std::string& dst) {
  const std::string& src = x.type.elem;
  if (src == dst) return x;
  if (dst == "i1") return b.compare("NE", x, zero_like(b, src, x.type.shape));
  if (elem_is_float(src) && !elem_is_float(dst) && dst != "i64") return b.convert(b.convert(x, "i64"), dst);
  if (src == "f64" && is_half(dst)) return b.convert(b.convert(x, "f32"), dst);
  return b.convert(x, dst);
}

// Identity element of a reduction ("sum", "prod", "max", "min", "and", "or") in type e.
Val identity(Body& b, const std::string& kind, const std::string& e) {
  if (kind == "sum" || kind == "or") return zero_like(b, e, {});
  if (kind == "prod" || kind == "and") return elem_is_float(e) ? b.fsplat(1.0, e) : b.isplat(1, e);
  const bool max = kind == "max";
  if (elem_is_float(e))
    return b.fsplat(max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity(), e);
  if (e == "i1") return b.isplat(max ? 0 : 1, e);
  const int bits = elem_bits(e);
  if (elem_is_unsigned(e)) return b.isplat(max ? 0 : static_cast<int64_t>((1ULL << bits) - 1), e);
  const int64_t lo = bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
  return b.isplat(max ? lo : -(lo + 1), e);
}

// The StableHLO op combining two values for reduction kind `kind` (bool max/min are or/and).
std::string combiner(const std::string& kind, const std::string& e) {
  if (kind == "sum") return "stablehlo.add";
  if (kind == "prod") return "stablehlo.multiply";
  if (kind == "max") return e == "i1" ? "stablehlo.or" : "stablehlo.maximum";
  if (kind == "min") return e == "i1" ? "stablehlo.and" : "stablehlo.minimum";
  if (kind == "and") return "stablehlo.and";
  return "stablehlo.or";
}

std::string binary_region(Body& b, const std::string& opname, const std::string& e) {
  TType s{e, {}};
  return b.region({s, s},
                  [&](Body& r, const std::vector<Val>& a) { return std::vector<Val>{r.binary(opname, a[0], a[1])}; });
}

// f16/bf16 sums and products accumulate in f32 and round once (docs/ir.md: float sums accumulate
// in >= f32; for products this is as exact as any rounding order torch's kernels happen to use).
std::string accumulation_type(const std::string& kind, const std::string& e) {
  return (kind == "sum" || kind == "prod") && is_half(e) ? "f32" : e;
}

std::string padding_attr(const Shape& lo, const Shape& hi) {
  std::string s = "dense<[";
  for (size_t d = 0; d < lo.size(); ++d)
    s += (d ? ", [" : "[") + std::to_string(lo[d]) + ", " + std::to_string(hi[d]) + "]";
  return s + "]> : tensor<" + std::to_string(lo.size()) + "x2xi64>";
}

Val reduce_window(Body& b, const Val& x, const std::string& kind, const Shape& window, const Shape& strides,
                  const Shape& lo, const Shape& hi, const Shape& dilation, const Shape& out_shape) {
  const std::string e = x.type.elem;
  const std::string acc = accumulation_type(kind, e);
  Val xa = b.convert(x, acc);
  std::string attrs = "window_dimensions = " + i64_array(window) + ", window_strides = " + i64_array(strides) +
                      ", base_dilations = " + i64_array(Shape(window.size(), 1)) +
                      ", window_dilations = " + i64_array(dilation) + ", padding = " + padding_attr(lo, hi);
  Val r = b.op("stablehlo.reduce_window", {xa, identity(b, kind, acc)}, {acc, out_shape}, attrs,
               binary_region(b, combiner(kind, acc), acc));
  return b.convert(r, e);
}

// torch.gather/scatter index -> StableHLO full coordinates [..., rank]: `index` along `axis`,
// the position itself along every other dim.
Val full_coordinates(Body& b, const Val& index, int64_t axis) {
  const Shape& s = index.type.shape;
  Shape one = s;
  one.push_back(1);
  std::vector<Val> parts;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    parts.push_back(b.reshape(d == axis ? index : b.iota("i64", s, d), one));
  if (parts.size() == 1) return parts[0];
  Shape full = s;
  full.push_back(static_cast<int64_t>(s.size()));
  return b.op("stablehlo.concatenate", parts, {"i64", full}, "dimension = " + std::to_string(s.size()) + " : i64");
}

Shape iota_list(int64_t n) {
  Shape v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// NaN-aware "a is before b" for argmax/argmin (NaN is the extreme) and for sort (NaN largest).
Val is_nan(Body& b, const Val& v) { return b.compare("NE", v, v); }

Val emit_unary(Body& b, const ir::Node& n, const Val& x) {
  const std::string& e = x.type.elem;
  static const std::map<OpKind, const char*> kDirect = {
      {OpKind::kNeg, "stablehlo.negate"},
      {OpKind::kFloor, "stablehlo.floor"},
      {OpKind::kCeil, "stablehlo.ceil"},
      {OpKind::kRoundEven, "stablehlo.round_nearest_even"},
      {OpKind::kExp, "stablehlo.exponential"},
      {OpKind::kExpm1, "stablehlo.exponential_minus_one"},
      {OpKind::kLog, "stablehlo.log"},
      {OpKind::kLog1p, "stablehlo.log_plus_one"},
      {OpKind::kSqrt, "stablehlo.sqrt"},
      {OpKind::kRsqrt, "stablehlo.rsqrt"},
      {OpKind::kCbrt, "stablehlo.cbrt"},
      {OpKind::kSin, "stablehlo.sine"},
      {OpKind::kCos, "stablehlo.cosine"},
      {OpKind::kTan, "stablehlo.tan"},
      {OpKind::kTanh, "stablehlo.tanh"},
      {OpKind::kAsin, "chlo.asin"},
      {OpKind::kAcos, "chlo.acos"},
      {OpKind::kAtan, "chlo.atan"},
      {OpKind::kSinh, "chlo.sinh"},
      {OpKind::kCosh, "chlo.cosh"},
      {OpKind::kAsinh, "chlo.asinh"},
      {OpKind::kAcosh, "chlo.acosh"},
      {OpKind::kAtanh, "chlo.atanh"},
      {OpKind::kLogistic, "stablehlo.logistic"},
      {OpKind::kErf, "chlo.erf"},
      {OpKind::kErfinv, "chlo.erf_inv"},
      {OpKind::kLgamma, "chlo.lgamma"},
      {OpKind::kNot, "stablehlo.not"},
  };
  switch (n.kind) {
    case OpKind::kAbs:  // stablehlo.abs takes signed types only; |x| of an unsigned x is x
      return elem_is_unsigned(e) ? x : b.unary("stablehlo.abs", x);
    case OpKind::kSign:  // torch.sign(NaN) is 0; stablehlo.sign(NaN) is NaN
      if (elem_is_float(e)) return b.select(is_nan(b, x), zero_like(b, e, x.type.shape), b.unary("stablehlo.sign", x));
      if (!elem_is_unsigned(e)) return b.unary("stablehlo.sign", x);
      return b.convert(b.compare("NE", x, zero_like(b, e, x.type.shape)), e);
    case OpKind::kTrunc:  // no stablehlo.trunc: ceil below zero, floor otherwise (keeps -0, NaN)
      return b.select(b.compare("LT", x, zero_like(b, e, x.type.shape)), b.unary("stablehlo.ceil", x),
                      b.unary("stablehlo.floor", x));
    case OpKind::kDigamma: {  // torch: digamma(+-0) = -+inf (the pole's one-sided limit); chlo gives NaN
      Val pole = b.unary("stablehlo.negate", b.binary("stablehlo.divide", b.fsplat(1.0, e, x.type.shape), x));
      return b.select(b.compare("EQ", x, zero_like(b, e, x.type.shape)), pole, b.unary("chlo.digamma", x));
    }
    case OpKind::kIsFinite:
      return b.op("stablehlo.is_finite", {x}, {"i1", x.type.shape});
    default:
      break;
  }
  auto it = kDirect.find(n.kind);
  if (it == kDirect.end()) unsupported(n, "no unary translation");
  return b.unary(it->second, x);
}

Val emit_binary(Body& b, const ir::Node& n, const Val& x, const Val& y) {
  static const std::map<OpKind, const char*> kOps = {
      {OpKind::kAdd, "stablehlo.add"},
      {OpKind::kSub, "stablehlo.subtract"},
      {OpKind::kMul, "stablehlo.multiply"},
      {OpKind::kDiv, "stablehlo.divide"},
      {OpKind::kRem, "stablehlo.remainder"},
      {OpKind::kPow, "stablehlo.power"},
      {OpKind::kMax, "stablehlo.maximum"},
      {OpKind::kMin, "stablehlo.minimum"},
      {OpKind::kAtan2, "stablehlo.atan2"},
      {OpKind::kAnd, "stablehlo.and"},
      {OpKind::kOr, "stablehlo.or"},
      {OpKind::kXor, "stablehlo.xor"},
      {OpKind::kShl, "stablehlo.shift_left"},
      {OpKind::kShrArith, "stablehlo.shift_right_arithmetic"},
      {OpKind::kShrLogical, "stablehlo.shift_right_logical"},
  };
  // divide/remainder truncate and take the dividend's sign for integers (= the IR's div/rem);
  // maximum/minimum propagate NaN; shifts by an amount outside [0, bits) (as unsigned) give 0,
  // or the sign fill for the arithmetic right shift -- the IR's (and torch's) semantics.
  // torch's >> on uint8 is a logical shift (there is no sign bit to fill).
  if (n.kind == OpKind::kShrArith && elem_is_unsigned(x.type.elem))
    return b.binary("stablehlo.shift_right_logical", x, y);
  return b.binary(kOps.at(n.kind), x, y);
}

Val emit_reduce(Body& b, const ir::Node& n, const Val& x) {
  static const char* kKinds[] = {"sum", "prod", "max", "min", "and", "or", "argmax", "argmin"};
  const int64_t k = n.iattrs.at(0);
  if (k < 0 || k > 7) unsupported(n, "reduce kind " + std::to_string(k));
  const std::string kind = kKinds[k];
  Shape dims(n.iattrs.begin() + 1, n.iattrs.end());
  const std::string e = x.type.elem;
  if (kind == "argmax" || kind == "argmin") {
    // Variadic reduce of (value, index): keep the extreme, NaN counting as the extreme (torch's
    // argmax and argmin both return the first NaN), ties to the smaller index. The init index is
    // INT64_MAX so the init pair loses every tie.
    const bool max = kind == "argmax";
    Val idx = b.iota("i64", x.type.shape, dims.at(0));
    TType sv{e, {}}, si{"i64", {}};
    std::string region = b.region({sv, si, sv, si}, [&](Body& r, const std::vector<Val>& a) {
      const Val &av = a[0], &ai = a[1], &bv = a[2], &bi = a[3];
      Val better = r.compare(max ? "GT" : "LT", av, bv);
      Val equal = r.compare("EQ", av, bv);
      if (elem_is_float(e)) {
        Val an = is_nan(r, av), bn = is_nan(r, bv);
        better = r.binary("stablehlo.or", better, r.binary("stablehlo.and", an, r.unary("stablehlo.not", bn)));
        equal = r.binary("stablehlo.or", equal, r.binary("stablehlo.and", an, bn));
      }
      Val take_a = r.binary("stablehlo.or", better, r.binary("stablehlo.and", equal, r.compare("LT", ai, bi)));
      return std::vector<Val>{r.select(take_a, av, bv), r.select(take_a, ai, bi)};
    });
    auto res =
        b.op_n("stablehlo.reduce",
               {x, idx, identity(b, max ? "max" : "min", e), b.isplat(std::numeric_limits<int64_t>::max(), "i64")},
               {{e, n.shape}, {"i64", n.shape}}, "dimensions = " + i64_array(dims), region);
    return res[1];
  }
  if (dims.empty()) return x;
  const std::string acc = accumulation_type(kind, e);
  Val r = b.op("stablehlo.reduce", {b.convert(x, acc), identity(b, kind, acc)}, {acc, n.shape},
               "dimensions = " + i64_array(dims), binary_region(b, combiner(kind, acc), acc));
  return b.convert(r, e);
}

Val emit_sort(Body& b, const ir::Node& n, const Val& x) {
  if (x.type.shape.empty()) return b.isplat(0, "i64");
  const int64_t dim = n.iattrs.at(0);
  const bool descending = n.iattrs.at(1) != 0;
  const std::string e = x.type.elem;
  TType sv{e, {}}, si{"i64", {}};
  // A strict "lhs goes first" with NaN as the largest value; is_stable keeps ties in input order.
  std::string region = b.region({sv, sv, si, si}, [&](Body& r, const std::vector<Val>& a) {
    const Val &lhs = a[0], &rhs = a[1];
    Val before = r.compare(descending ? "GT" : "LT", lhs, rhs);
    if (elem_is_float(e)) {
      Val ln = is_nan(r, lhs), rn = is_nan(r, rhs);
      Val nan_order = descending ? r.binary("stablehlo.and", ln, r.unary("stablehlo.not", rn))
                                 : r.binary("stablehlo.and", r.unary("stablehlo.not", ln), rn);
      before = r.binary("stablehlo.or", before, nan_order);
    }
    return std::vector<Val>{before};
  });
  auto res = b.op_n("stablehlo.sort", {x, b.iota("i64", x.type.shape, dim)}, {x.type, {"i64", x.type.shape}},
                    "dimension = " + std::to_string(dim) + " : i64, is_stable = true", region);
  return res[1];
}

// cholesky: StableHLO reads the named triangle and leaves the result's other triangle
// implementation-defined; the IR's is zero (docs/ir.md), so a select against the diagonal
// clears it. A matrix that is not positive-definite comes back as the plugin makes it (XLA:
// NaN), not NaN from its first failing column as on the host runtime.
Val emit_cholesky(Body& b, const ir::Node& n, const Val& a) {
  const bool lower = n.iattrs.at(0) != 0;
  const Shape& s = a.type.shape;
  const auto r = static_cast<int64_t>(s.size());
  Val factor = b.op("stablehlo.cholesky", {a}, a.type, lower ? "lower = true" : "lower = false");
  Val keep = b.compare(lower ? "GE" : "LE", b.iota("i64", s, r - 2), b.iota("i64", s, r - 1));
  return b.select(keep, factor, b.fsplat(0.0, a.type.elem, s));
}

Val emit_triangular_solve(Body& b, const ir::Node& n, const Val& a, const Val& x) {
  auto flag = [&](size_t k) { return std::string(n.iattrs.at(k) != 0 ? "true" : "false"); };
  const std::string attrs = "left_side = " + flag(0) + ", lower = " + flag(1) + ", unit_diagonal = " + flag(2) +
                            ", transpose_a = #stablehlo<transpose " +
                            (n.iattrs.at(3) != 0 ? "TRANSPOSE" : "NO_TRANSPOSE") + ">";
  return b.op("stablehlo.triangular_solve", {a, x}, x.type, attrs);
}

Val emit_gather(Body& b, const ir::Node& n, const Val& x, const Val& index) {
  const int64_t r = static_cast<int64_t>(x.type.shape.size());
  if (r == 0) return x;  // a 0-d gather reads the only element
  // Nothing to read (indexing a zero-size dim): every index is out of range, which the index
  // check reports; XLA rejects a gather whose slice is larger than the operand.
  if (c10::multiply_integers(x.type.shape) == 0) return zero_like(b, x.type.elem, n.shape);
  Shape dims = iota_list(r);
  std::string attrs = "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = " + i64_list(dims) +
                      ", start_index_map = " + i64_list(dims) + ", index_vector_dim = " + std::to_string(r) +
                      ">, slice_sizes = " + i64_array(Shape(static_cast<size_t>(r), 1)) +
                      ", indices_are_sorted = false";
  return b.op("stablehlo.gather", {x, full_coordinates(b, index, n.iattrs.at(0))}, {x.type.elem, n.shape}, attrs);
}

Val emit_scatter(Body& b, const ir::Node& n, const Val& x, const Val& index, const Val& updates) {
  static const char* kModes[] = {"replace", "sum", "prod", "max", "min"};
  const int64_t m = n.iattrs.at(1);
  if (m < 0 || m > 4) unsupported(n, "scatter mode " + std::to_string(m));
  const std::string e = x.type.elem;
  const std::string mode = kModes[m];
  const int64_t r = static_cast<int64_t>(x.type.shape.size());
  if (r == 0) return mode == "replace" ? updates : b.binary(combiner(mode, e), x, updates);
  TType s{e, {}};
  std::string region = b.region({s, s}, [&](Body& rb, const std::vector<Val>& a) {
    return std::vector<Val>{mode == "replace" ? a[1] : rb.binary(combiner(mode, e), a[0], a[1])};
  });
  Shape dims = iota_list(r);
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = " + i64_list(dims) +
                      ", scatter_dims_to_operand_dims = " + i64_list(dims) +
                      ", index_vector_dim = " + std::to_string(r) +
                      ">, indices_are_sorted = false, unique_indices = false";
  return b.op("stablehlo.scatter", {x, full_coordinates(b, index, n.iattrs.at(0)), updates}, x.type, attrs, region);
}

// PyTorch's float32 contractions are exact float32 by default (torch.get_float32_matmul_precision
// is "highest", TF32 off), but a PJRT GPU compiler may use TF32 for a DEFAULT-precision f32 dot.
// HIGHEST keeps the GPU's results PyTorch's; CPU compilers ignore it.
std::string f32_precision(const std::string& elem) {
  return elem == "f32" ? ", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]" : "";
}

Val emit_convolution(Body& b, const ir::Node& n, const Val& lhs, const Val& rhs) {
  const int64_t nsp = n.iattrs.at(0);
  auto list = [&](int64_t i) { return Shape(n.iattrs.begin() + 1 + i * nsp, n.iattrs.begin() + 1 + (i + 1) * nsp); };
  const int64_t groups = n.iattrs.at(1 + 5 * nsp);
  std::string sp;
  for (int64_t d = 0; d < nsp; ++d) sp += ", " + std::to_string(d);
  std::string attrs = "dimension_numbers = #stablehlo.conv<[b, f" + sp + "]x[o, i" + sp + "]->[b, f" + sp +
                      "]>, window_strides = " + i64_array(list(0)) + ", padding = " + padding_attr(list(1), list(2)) +
                      ", lhs_dilation = " + i64_array(list(3)) + ", rhs_dilation = " + i64_array(list(4)) +
                      ", feature_group_count = " + std::to_string(groups) + " : i64, batch_group_count = 1 : i64";
  attrs += f32_precision(is_half(lhs.type.elem) ? "f32" : lhs.type.elem);
  // f16/bf16 convolve in f32 and round once (builder.py's reference does the same).
  const std::string e = lhs.type.elem;
  const std::string acc = is_half(e) ? "f32" : e;
  Val r = b.op("stablehlo.convolution", {b.convert(lhs, acc), b.convert(rhs, acc)}, {acc, n.shape}, attrs);
  return b.convert(r, e);
}

Val emit_dot_general(Body& b, const ir::Node& n, const Val& lhs, const Val& rhs) {
  const auto& a = n.iattrs;
  const int64_t nb = a.at(0);
  Shape lb(a.begin() + 1, a.begin() + 1 + nb), rb(a.begin() + 1 + nb, a.begin() + 1 + 2 * nb);
  const int64_t nc = a.at(static_cast<size_t>(1 + 2 * nb));
  auto c0 = a.begin() + 2 + 2 * nb;
  Shape lc(c0, c0 + nc), rc(c0 + nc, c0 + 2 * nc);
  std::string dn;
  auto field = [&](const char* name, const Shape& v) {
    if (v.empty()) return;
    dn += (dn.empty() ? "" : ", ") + std::string(name) + " = " + i64_list(v);
  };
  field("lhs_batching_dimensions", lb);
  field("rhs_batching_dimensions", rb);
  field("lhs_contracting_dimensions", lc);
  field("rhs_contracting_dimensions", rc);
  return b.op("stablehlo.dot_general", {lhs, rhs}, {lhs.type.elem, n.shape},
              "dot_dimension_numbers = #stablehlo.dot<" + dn + ">" + f32_precision(lhs.type.elem));
}

Val emit_node(Body& b, const ir::Node& n, const std::vector<Val>& in) {
  const std::string e = elem_of(n.dtype);
  const TType out{e, n.shape};
  const auto& a = n.iattrs;
  const size_t r = n.shape.size();
  switch (n.kind) {
    case OpKind::kParameter:
      break;  // arguments, bound by the caller
    case OpKind::kConstant:
      return n.fattrs.empty() ? b.isplat(a.at(0), e) : b.fsplat(n.fattrs[0], e);
    case OpKind::kIota:
      return ir_convert(b, b.iota("i64", n.shape, a.at(0)), e);
    case OpKind::kRngUniform:
    case OpKind::kRngNormal:
      return emit_rng(b, n, in.at(0), in.at(1));
    case OpKind::kNeg:
    case OpKind::kAbs:
    case OpKind::kSign:
    case OpKind::kFloor:
    case OpKind::kCeil:
    case OpKind::kRoundEven:
    case OpKind::kTrunc:
    case OpKind::kExp:
    case OpKind::kExpm1:
    case OpKind::kLog:
    case OpKind::kLog1p:
    case OpKind::kSqrt:
    case OpKind::kRsqrt:
    case OpKind::kCbrt:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kTan:
    case OpKind::kTanh:
    case OpKind::kAsin:
    case OpKind::kAcos:
    case OpKind::kAtan:
    case OpKind::kSinh:
    case OpKind::kCosh:
    case OpKind::kAsinh:
    case OpKind::kAcosh:
    case OpKind::kAtanh:
    case OpKind::kLogistic:
    case OpKind::kErf:
    case OpKind::kErfinv:
    case OpKind::kLgamma:
    case OpKind::kDigamma:
    case OpKind::kNot:
    case OpKind::kIsFinite:
      return emit_unary(b, n, in.at(0));
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kRem:
    case OpKind::kPow:
    case OpKind::kMax:
    case OpKind::kMin:
    case OpKind::kAtan2:
    case OpKind::kAnd:
    case OpKind::kOr:
    case OpKind::kXor:
    case OpKind::kShl:
    case OpKind::kShrArith:
    case OpKind::kShrLogical:
      return emit_binary(b, n, in.at(0), in.at(1));
    case OpKind::kCompare: {
      static const char* kDirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
      if (a.at(0) < 0 || a.at(0) > 5) unsupported(n, "comparison direction " + std::to_string(a.at(0)));
      return b.compare(kDirs[a.at(0)], in.at(0), in.at(1));
    }
    case OpKind::kSelect:
      return b.select(in.at(0), in.at(1), in.at(2));
    case OpKind::kConvert:
      return ir_convert(b, in.at(0), e);
    case OpKind::kBroadcastInDim:
      return b.op("stablehlo.broadcast_in_dim", {in.at(0)}, out, "broadcast_dimensions = " + i64_array(a));
    case OpKind::kReshape:
      return b.op("stablehlo.reshape", {in.at(0)}, out);
    case OpKind::kTranspose:
      return b.op("stablehlo.transpose", {in.at(0)}, out, "permutation = " + i64_array(a));
    case OpKind::kSlice:
      return b.op("stablehlo.slice", {in.at(0)}, out,
                  "start_indices = " + i64_array(Shape(a.begin(), a.begin() + r)) +
                      ", limit_indices = " + i64_array(Shape(a.begin() + r, a.begin() + 2 * r)) +
                      ", strides = " + i64_array(Shape(a.begin() + 2 * r, a.end())));
    case OpKind::kDynamicSlice:  // StableHLO clamps the starts exactly like the IR
      return b.op("stablehlo.dynamic_slice", in, out, "slice_sizes = " + i64_array(a));
    case OpKind::kDynamicUpdateSlice:
      return b.op("stablehlo.dynamic_update_slice", in, out);
    case OpKind::kConcatenate:
      return b.op("stablehlo.concatenate", in, out, "dimension = " + std::to_string(a.at(0)) + " : i64");
    case OpKind::kPad:  // interior first, then edges; negative edges crop (also into the padding)
      return b.op("stablehlo.pad", {in.at(0), in.at(1)}, out,
                  "edge_padding_low = " + i64_array(Shape(a.begin(), a.begin() + r)) +
                      ", edge_padding_high = " + i64_array(Shape(a.begin() + r, a.begin() + 2 * r)) +
                      ", interior_padding = " + i64_array(Shape(a.begin() + 2 * r, a.end())));
    case OpKind::kReverse:
      return b.op("stablehlo.reverse", {in.at(0)}, out, "dimensions = " + i64_array(a));
    case OpKind::kGather:
      return emit_gather(b, n, in.at(0), in.at(1));
    case OpKind::kScatter:
      return emit_scatter(b, n, in.at(0), in.at(1), in.at(2));
    case OpKind::kReduce:
      return emit_reduce(b, n, in.at(0));
    case OpKind::kReduceWindow: {
      static const char* kKinds[] = {"sum", "max", "min"};
      if (a.at(0) < 0 || a.at(0) > 2) unsupported(n, "window kind " + std::to_string(a.at(0)));
      if (r == 0) return in.at(0);
      auto list = [&](size_t i) { return Shape(a.begin() + 1 + i * r, a.begin() + 1 + (i + 1) * r); };
      return reduce_window(b, in.at(0), kKinds[a[0]], list(0), list(1), list(2), list(3), list(4), n.shape);
    }
    case OpKind::kScan: {
      // Inclusive scan = reduce_window whose window spans the whole dim, padded by n-1 identity
      // elements before (after, for a reverse scan) the data.
      static const char* kKinds[] = {"sum", "prod", "max", "min"};
      if (a.at(0) < 0 || a.at(0) > 3) unsupported(n, "scan kind " + std::to_string(a.at(0)));
      if (r == 0) return in.at(0);
      const size_t dim = static_cast<size_t>(a.at(1));
      const bool reverse = a.at(2) != 0;
      Shape window(r, 1), ones(r, 1), lo(r, 0), hi(r, 0);
      window[dim] = n.shape[dim];
      (reverse ? hi : lo)[dim] = n.shape[dim] - 1;
      return reduce_window(b, in.at(0), kKinds[a[0]], window, ones, lo, hi, ones, n.shape);
    }
    case OpKind::kDotGeneral:
      return emit_dot_general(b, n, in.at(0), in.at(1));
    case OpKind::kConvolution:
      return emit_convolution(b, n, in.at(0), in.at(1));
    case OpKind::kSort:
      return emit_sort(b, n, in.at(0));
    case OpKind::kCholesky:
      return emit_cholesky(b, n, in.at(0));
    case OpKind::kTriangularSolve:
      return emit_triangular_solve(b, n, in.at(0), in.at(1));
    case OpKind::kNumOps:
      break;
  }
  unsupported(n, "no translation");
}

// The flat-array positions of a strided view (0-d i64 `offset`, `strides` in elements) of
// `shape`: offset + sum(i_d * stride_d), as a [shape..., 1] index tensor.
Val view_positions(Body& b, const Val& offset, const Shape& strides, const Shape& shape) {
  Shape index_shape = shape;
  index_shape.push_back(1);
  Val index = b.broadcast(offset, shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1 || strides[d] == 0) continue;
    Val step = b.binary("stablehlo.multiply", b.iota("i64", shape, static_cast<int64_t>(d)),
                        b.isplat(strides[d], "i64", shape));
    index = b.binary("stablehlo.add", index, step);
  }
  return b.reshape(index, index_shape);
}

// A strided view that is a box of a row-major "container" array laid over the flat array from
// the view's first element: every stride (of a dim longer than 1) divides the next larger one,
// and each dim fits in the room that stride ratio leaves (q, k and v as strided slices of one
// [b, t, 3 * d] projection: [b, t, 36, 64] boxes [b, t, 12, 64], transposed). Such a view is a
// dynamic_slice of its span at the run-time offset plus static slices and a transpose, which XLA
// fuses into the reader; the general path's gather computes an i64 position per element and
// reads them one by one (about 5x the time on XLA's CPU backend, slower still on TPUs).
struct Box {
  int64_t span = 0;       // elements from the view's first to its last, inclusive
  Shape container;        // outermost first; its product is >= span
  Shape taken;            // per container dim: the view's size in it (1 for padding dims)
  Shape sorted_dims;      // the view dims (longer than 1) the container dims hold, outermost first
  Shape permutation;      // from sorted_dims order to the view's dim order
};

std::optional<Box> box_of(const Shape& strides, const Shape& shape, int64_t elements) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, view dim), dims longer than 1
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return std::nullopt;  // nothing to read: the gather handles it
    if (shape[d] == 1) continue;
    if (strides[d] <= 0) return std::nullopt;  // broadcast (0) or reversed views
    dims.emplace_back(strides[d], static_cast<int64_t>(d));
  }
  std::sort(dims.begin(), dims.end());  // innermost (smallest stride) first
  Box box;
  box.span = 1;
  Shape inner_to_outer, taken;
  if (dims.empty() || dims[0].first > 1) {  // elements between the innermost dim's: a padding dim
    inner_to_outer.push_back(dims.empty() ? 1 : dims[0].first);
    taken.push_back(1);
  }
  for (size_t k = 0; k < dims.size(); ++k) {
    const auto [stride, d] = dims[k];
    const int64_t size = shape[static_cast<size_t>(d)];
    int64_t extent = size;
    if (k + 1 < dims.size()) {
      const int64_t next = dims[k + 1].first;
      if (next == stride || next % stride != 0 || next / stride < size) return std::nullopt;
      extent = next / stride;
    }
    inner_to_outer.push_back(extent);
    taken.push_back(size);
    box.span += (size - 1) * stride;
  }
  if (box.span > elements) return std::nullopt;
  box.container.assign(inner_to_outer.rbegin(), inner_to_outer.rend());
  box.taken.assign(taken.rbegin(), taken.rend());
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) box.sorted_dims.push_back(it->second);
  Shape order = box.sorted_dims;  // the view dims in increasing order, as positions in sorted_dims
  std::sort(order.begin(), order.end());
  for (int64_t d : order)
    box.permutation.push_back(
        std::find(box.sorted_dims.begin(), box.sorted_dims.end(), d) - box.sorted_dims.begin());
  return box;
}

// The flat array's span that holds box view `box` at `offset`, padded and shaped as its
// container (outermost first).
Val box_container(Body& b, const Val& flat, const Val& offset, const Box& box) {
  Val span = b.op("stablehlo.dynamic_slice", {flat, offset}, {flat.type.elem, {box.span}},
                  "slice_sizes = " + i64_array({box.span}));
  const int64_t total = c10::multiply_integers(box.container);
  if (total > box.span)
    span = b.op("stablehlo.pad", {span, zero_like(b, flat.type.elem, {})}, {flat.type.elem, {total}},
                "edge_padding_low = " + i64_array({0}) + ", edge_padding_high = " + i64_array({total - box.span}) +
                    ", interior_padding = " + i64_array({0}));
  return b.reshape(span, box.container);
}

// The view dims (longer than 1) of `shape` in the box's sorted order.
Shape sorted_sizes(const Box& box, const Shape& shape) {
  Shape out;
  for (int64_t d : box.sorted_dims) out.push_back(shape[static_cast<size_t>(d)]);
  return out;
}

// The strided view of a flat array as a value of `shape`: static slices of its span when the
// view is a box (box_of), else one gather.
Val gather_view(Body& b, const Val& flat, const Val& offset, const Shape& strides, const Shape& shape) {
  if (std::optional<Box> box = box_of(strides, shape, flat.type.shape.at(0))) {
    Val c = box_container(b, flat, offset, *box);
    Val v = b.op("stablehlo.slice", {c}, {flat.type.elem, box->taken},
                 "start_indices = " + i64_array(Shape(box->taken.size(), 0)) +
                     ", limit_indices = " + i64_array(box->taken) +
                     ", strides = " + i64_array(Shape(box->taken.size(), 1)));
    const Shape sorted = sorted_sizes(*box, shape);
    v = b.reshape(v, sorted);
    Shape in_order;
    for (int64_t p : box->permutation) in_order.push_back(sorted[static_cast<size_t>(p)]);
    if (box->permutation != iota_list(static_cast<int64_t>(sorted.size())))
      v = b.op("stablehlo.transpose", {v}, {flat.type.elem, in_order}, "permutation = " + i64_array(box->permutation));
    return b.reshape(v, shape);
  }
  const std::string attrs =
      "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], "
      "index_vector_dim = " +
      std::to_string(shape.size()) + ">, slice_sizes = array<i64: 1>, indices_are_sorted = false";
  return b.op("stablehlo.gather", {flat, view_positions(b, offset, strides, shape)}, {flat.type.elem, shape}, attrs);
}

// `flat` with the elements of its strided view replaced by `value`: one scatter.
Val scatter_view(Body& b, const Val& flat, const Val& offset, const Shape& strides, const Val& value) {
  const Shape& shape = value.type.shape;
  if (std::optional<Box> box = box_of(strides, shape, flat.type.shape.at(0))) {
    // The span as its container, the value written into the box (its corner is the container's),
    // and the span written back: the elements in the view's gaps keep their values.
    Val c = box_container(b, flat, offset, *box);
    const Shape sorted = sorted_sizes(*box, shape);
    Shape inverse(box->permutation.size());
    for (size_t j = 0; j < inverse.size(); ++j) inverse[static_cast<size_t>(box->permutation[j])] = static_cast<int64_t>(j);
    Val v = b.reshape(value, [&] {
      Shape in_order;
      for (int64_t p : box->permutation) in_order.push_back(sorted[static_cast<size_t>(p)]);
      return in_order;
    }());
    if (inverse != iota_list(static_cast<int64_t>(inverse.size())))
      v = b.op("stablehlo.transpose", {v}, {value.type.elem, sorted}, "permutation = " + i64_array(inverse));
    v = b.reshape(v, box->taken);
    std::vector<Val> update{c, v};
    for (size_t j = 0; j < box->container.size(); ++j) update.push_back(b.isplat(0, "i64"));
    c = b.op("stablehlo.dynamic_update_slice", update, c.type);
    const int64_t total = c10::multiply_integers(box->container);
    Val span = b.reshape(c, {total});
    if (total > box->span)
      span = b.op("stablehlo.slice", {span}, {flat.type.elem, {box->span}},
                  "start_indices = " + i64_array({0}) + ", limit_indices = " + i64_array({box->span}) +
                      ", strides = " + i64_array({1}));
    return b.op("stablehlo.dynamic_update_slice", {flat, span, offset}, flat.type);
  }
  TType s{flat.type.elem, {}};
  std::string region = b.region({s, s}, [&](Body&, const std::vector<Val>& a) { return std::vector<Val>{a[1]}; });
  const std::string attrs =
      "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], "
      "scatter_dims_to_operand_dims = [0], index_vector_dim = " +
      std::to_string(shape.size()) + ">, indices_are_sorted = false, unique_indices = false";
  return b.op("stablehlo.scatter", {flat, view_positions(b, offset, strides, shape), value}, flat.type, attrs, region);
}

}  // namespace

// Result `r` (node `node`, final value `v`) of a program with index checks: if an argument aliases
// it (an in-place update), a failed check returns that argument as it was. A scatter into the
// argument itself needs nothing: its updates are dropped already (and a select would stop XLA
// from scattering in place).
static Val keep_aliased_on_failure(Body& b, const ir::Graph& g, int32_t node, size_t r, const Val& v,
                                   const std::vector<int32_t>& aliases, const std::vector<TType>& arg_types,
                                   const Module& module, const Val& failed) {
  for (size_t k = 0; k < aliases.size() && k < arg_types.size(); ++k) {
    if (aliases[k] != static_cast<int32_t>(r)) continue;
    const ir::Node& n = g.node(node);
    if (n.kind == OpKind::kScatter) {
      const ir::Node& x = g.node(n.operands.at(0));
      if (x.kind == OpKind::kParameter && x.iattrs.at(0) == module.arguments.at(k).binding) return v;
    }
    TPU_CHECK_VALUE(arg_types[k].str() == v.type.str(), "StableHLO emitter: argument ", k, " (",
                    arg_types[k].str(), ") aliases result ", r, " (", v.type.str(), ")");
    return b.select(b.broadcast(failed, v.type.shape), Val{"%arg" + std::to_string(k), arg_types[k]}, v);
  }
  return v;
}

Module emit_module(const ir::Graph& g, const std::vector<int32_t>& outputs, const EmitOptions& options) {
  if (options.verify) ir::verify(g);
  for (char c : options.module_name)
    TPU_CHECK_VALUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_', "StableHLO emitter: module name '",
                    options.module_name, "' must be [A-Za-z0-9_]");

  // Live nodes: those the outputs depend on.
  std::vector<char> live(static_cast<size_t>(g.size()), 0);
  for (int32_t o : outputs) {
    TPU_CHECK_VALUE(o >= 0 && o < g.size(), "StableHLO emitter: output ", o, " not in the graph");
    live[static_cast<size_t>(o)] = 1;
  }
  for (int32_t i = g.size() - 1; i >= 0; --i)
    if (live[static_cast<size_t>(i)])
      for (int32_t op : g.node(i).operands) live[static_cast<size_t>(op)] = 1;

  // Arguments: bindings >= 0 in increasing order, then the RNG seed and offset.
  std::map<int64_t, const ir::Node*> bindings;
  bool rng = false;
  for (int32_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(i);
    if (n.kind != OpKind::kParameter || (options.live_arguments_only && !live[static_cast<size_t>(i)])) continue;
    const int64_t binding = n.iattrs.at(0);
    if (binding < 0) {
      rng = true;
      continue;
    }
    auto [it, fresh] = bindings.emplace(binding, &n);
    TPU_CHECK_VALUE(fresh || (it->second->dtype == n.dtype && it->second->shape == n.shape),
                    "StableHLO emitter: parameter binding ", binding, " used with two types");
  }
  Module module;
  std::map<int64_t, std::string> arg_of;
  std::vector<TType> arg_types;
  auto flat = [&](const std::vector<int64_t>& shape) {
    if (!options.flat_tensors || shape.size() == 1) return shape;
    return std::vector<int64_t>{c10::multiply_integers(shape)};
  };
  std::map<int64_t, const std::vector<int64_t>*> layout_of;
  std::map<int64_t, const EmitOptions::StridedView*> view_of;
  for (const auto& [binding, node] : bindings) {
    const size_t k = arg_types.size();
    layout_of[binding] = k < options.argument_layouts.size() ? &options.argument_layouts[k] : nullptr;
    const EmitOptions::StridedView* view = k < options.argument_views.size() ? &options.argument_views[k] : nullptr;
    if (view != nullptr && view->strides.empty()) view = nullptr;
    TPU_CHECK_VALUE(view == nullptr || (options.flat_tensors && view->strides.size() == node->shape.size()),
                    "StableHLO emitter: strided view of argument ", k, " needs flat_tensors and one stride per dim");
    view_of[binding] = view;
    arg_of[binding] = "%arg" + std::to_string(arg_types.size());
    arg_types.push_back({elem_of(node->dtype), view ? Shape{view->elements} : flat(node->shape)});
    module.arguments.push_back({binding, node->dtype, node->shape});
  }
  if (rng) {
    for (int64_t binding : {ir::kRngSeedBinding, ir::kRngOffsetBinding}) {
      arg_of[binding] = "%arg" + std::to_string(arg_types.size());
      arg_types.push_back({"i64", {}});
      module.arguments.push_back({binding, ir::DType::kI64, {}});
    }
  }
  std::map<int64_t, std::string> view_offset_of;  // binding -> its view's offset argument
  for (size_t k = 0; k < bindings.size(); ++k) {
    const int64_t binding = module.arguments[k].binding;
    if (view_of.at(binding) == nullptr) continue;
    view_offset_of[binding] = "%arg" + std::to_string(arg_types.size());
    arg_types.push_back({"i64", {}});
    module.arguments.push_back({kViewOffsetBinding - static_cast<int64_t>(k), ir::DType::kI64, {}});
  }
  std::vector<int32_t> aliases = options.argument_aliases;
  std::vector<std::pair<Val, Val>> result_base(outputs.size());  // (array, offset) of result views
  for (size_t r = 0; r < outputs.size() && r < options.result_views.size(); ++r) {
    const EmitOptions::ResultView& view = options.result_views[r];
    if (view.strides.empty()) continue;
    const ir::Node& n = g.node(outputs[r]);
    TPU_CHECK_VALUE(options.flat_tensors && view.strides.size() == n.shape.size(), "StableHLO emitter: view of ",
                    "result ", r, " needs flat_tensors and one stride per dim");
    TType array{elem_of(n.dtype), {view.elements}};
    if (view.alias) {
      aliases.resize(arg_types.size() + 1, -1);
      aliases[arg_types.size()] = static_cast<int32_t>(r);
    }
    result_base[r].first = {"%arg" + std::to_string(arg_types.size()), array};
    arg_types.push_back(array);
    module.arguments.push_back({kResultViewBinding - static_cast<int64_t>(r), n.dtype, {view.elements}});
    result_base[r].second = {"%arg" + std::to_string(arg_types.size()), {"i64", {}}};
    arg_types.push_back({"i64", {}});
    module.arguments.push_back({kResultViewBinding - static_cast<int64_t>(r), ir::DType::kI64, {}});
  }

  std::string body;
  int counter = 0;
  Body b(&body, &counter, 4);
  std::vector<Val> vals(static_cast<size_t>(g.size()));
  IndexBounds bounds(g);
  std::vector<Val> check_failed, check_reported;
  std::optional<Val> any_failed;  // of the checks emitted so far
  for (int32_t i = 0; i < g.size(); ++i) {
    if (!live[static_cast<size_t>(i)]) continue;
    const ir::Node& n = g.node(i);
    TType type{elem_of(n.dtype), n.shape};
    if (n.kind == OpKind::kParameter) {
      const int64_t binding = n.iattrs.at(0);
      const bool flattened = binding >= 0 && flat(n.shape) != n.shape;
      Val arg{arg_of.at(binding), flattened ? TType{type.elem, flat(n.shape)} : type};
      if (const EmitOptions::StridedView* view = binding >= 0 ? view_of.at(binding) : nullptr) {
        vals[static_cast<size_t>(i)] = gather_view(b, {arg_of.at(binding), {type.elem, {view->elements}}},
                                                   {view_offset_of.at(binding), {"i64", {}}}, view->strides, n.shape);
        continue;
      }
      const std::vector<int64_t>* order = binding >= 0 ? layout_of.at(binding) : nullptr;
      if (order != nullptr && !order->empty()) {
        TPU_CHECK_VALUE(options.flat_tensors && order->size() == n.shape.size(), "StableHLO emitter: layout of ",
                        "binding ", binding, " needs flat_tensors and one entry per dim");
        std::vector<int64_t> physical, back(order->size());
        for (size_t j = 0; j < order->size(); ++j) {
          physical.push_back(n.shape.at(static_cast<size_t>((*order)[j])));
          back.at(static_cast<size_t>((*order)[j])) = static_cast<int64_t>(j);
        }
        vals[static_cast<size_t>(i)] =
            b.op("stablehlo.transpose", {b.reshape(arg, physical)}, type, "permutation = " + i64_array(back));
        continue;
      }
      vals[static_cast<size_t>(i)] = flattened ? b.reshape(arg, n.shape) : arg;
      continue;
    }
    std::vector<Val> in;
    for (int32_t op : n.operands) in.push_back(vals[static_cast<size_t>(op)]);
    if (options.index_checks && (n.kind == OpKind::kGather || n.kind == OpKind::kScatter) &&
        !in.at(0).type.shape.empty()) {
      const bool gather = n.kind == OpKind::kGather;
      const int64_t size = in[0].type.shape.at(static_cast<size_t>(n.iattrs.at(0)));
      const size_t errors = gather ? 1 : 2;  // the attr that asks for RuntimeError (docs/ir.md)
      if (g.node(n.operands[1]).numel() > 0 && !bounds.in_range(n.operands[1], size)) {
        auto [failed, reported] = emit_index_check(b, in[1], size);
        check_failed.push_back(failed);
        check_reported.push_back(reported);
        module.index_checks.push_back(
            {gather ? "gather" : "scatter", i, size, n.iattrs.size() > errors && n.iattrs[errors] == 1});
        any_failed = any_failed ? b.binary("stablehlo.or", *any_failed, failed) : failed;
      }
      if (!gather && any_failed) {  // a failing program writes nothing: every update is dropped
        const Shape& s = in[1].type.shape;
        in[1] = b.select(b.broadcast(*any_failed, s), b.isplat(size, "i64", s), in[1]);
      }
    }
    // Nothing to compute: an empty constant. After the index check: a scatter into an empty
    // tensor still reports its indices, as the host runtime and CPU do.
    if (n.numel() == 0) {
      vals[static_cast<size_t>(i)] = zero_like(b, type.elem, n.shape);
      continue;
    }
    Val v = emit_node(b, n, in);
    TPU_CHECK(v.type.elem == type.elem && v.type.shape == n.shape, "StableHLO emitter: ", ir::op_name(n.kind),
              " produced ", v.type.str(), ", expected ", type.str());
    vals[static_cast<size_t>(i)] = v;
  }

  std::string text = "module @" + options.module_name + " {\n  func.func public @main(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    text += (i ? ", " : "") + std::string("%arg") + std::to_string(i) + ": " + arg_types[i].str();
    const int32_t alias = i < aliases.size() ? aliases[i] : -1;
    TPU_CHECK_VALUE(alias < static_cast<int32_t>(outputs.size()), "StableHLO emitter: argument ", i, " aliases result ",
                    alias, " of ", outputs.size());
    if (alias >= 0) text += " {tf.aliasing_output = " + std::to_string(alias) + " : i32}";
  }
  text += ") -> (";
  std::string refs, types;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Val v = vals[static_cast<size_t>(outputs[i])];
    if (!result_base[i].first.ref.empty()) {
      const EmitOptions::ResultView& view = options.result_views[i];
      if (any_failed)  // a failed check: the view keeps its elements
        v = b.select(b.broadcast(*any_failed, v.type.shape),
                     gather_view(b, result_base[i].first, result_base[i].second, view.strides, v.type.shape), v);
      v = scatter_view(b, result_base[i].first, result_base[i].second, view.strides, v);
    }
    const std::vector<int64_t>* order = i < options.result_layouts.size() ? &options.result_layouts[i] : nullptr;
    if (order != nullptr && !order->empty()) {
      TPU_CHECK_VALUE(options.flat_tensors && order->size() == v.type.shape.size(), "StableHLO emitter: layout of ",
                      "result ", i, " needs flat_tensors and one entry per dim");
      std::vector<int64_t> physical;
      for (int64_t d : *order) physical.push_back(v.type.shape.at(static_cast<size_t>(d)));
      v = b.op("stablehlo.transpose", {v}, {v.type.elem, physical}, "permutation = " + i64_array(*order));
    }
    if (flat(v.type.shape) != v.type.shape) v = b.reshape(v, flat(v.type.shape));
    if (any_failed && result_base[i].first.ref.empty()) v = keep_aliased_on_failure(b, g, outputs[i], i, v, aliases,
                                                                                     arg_types, module, *any_failed);
    refs += (i ? ", " : "") + v.ref;
    types += (i ? ", " : "") + v.type.str();
  }
  if (any_failed) {
    Val check = emit_check_result(b, check_failed, check_reported);
    refs += (outputs.empty() ? "" : ", ") + check.ref;
    types += (outputs.empty() ? "" : ", ") + check.type.str();
  }
  text += types + ") {\n" + body;
  text += refs.empty() ? "    return\n" : "    return " + refs + " : " + types + "\n";
  module.text = text + "  }\n}\n";
  return module;
}

std::string emit_stablehlo(const ir::Graph& g, const std::vector<int32_t>& outputs, const EmitOptions& options) {
  return emit_module(g, outputs, options).text;
}

}  // namespace torch_tpu::stablehlo
