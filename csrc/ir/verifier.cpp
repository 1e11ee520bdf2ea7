#include "ir/verifier.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace torch_tpu::ir {
namespace {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string type_str(const Node& n) {
  return std::string(dtype_name(n.dtype)) + shape_str(n.shape);
}

int64_t numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

bool is_perm(const std::vector<int64_t>& p, size_t rank) {
  if (p.size() != rank) return false;
  std::vector<bool> seen(rank, false);
  for (int64_t d : p) {
    if (d < 0 || d >= static_cast<int64_t>(rank) || seen[d]) return false;
    seen[d] = true;
  }
  return true;
}

// Checks one node; `fail` throws with the node/op/constraint prefix.
class NodeVerifier {
 public:
  NodeVerifier(const Graph& g, int32_t id) : g_(g), id_(id), n_(g.node(id)) {}

  void run() {
    structural();
    DType dt = n_.dtype;
    Shape shape = n_.shape;  // ops whose result shape is an input of the op keep this
    infer(dt, shape);
    check(dt == n_.dtype, "G5",
          std::string("recorded dtype ") + dtype_name(n_.dtype) + " != inferred " + dtype_name(dt));
    check(shape == n_.shape, "G6",
          "recorded shape " + shape_str(n_.shape) + " != inferred " + shape_str(shape));
  }

 private:
  [[noreturn]] void fail(const char* c, const std::string& msg) const {
    const char* op = op_name(n_.kind);
    throw VerifyError(id_,
                      "%" + std::to_string(id_) + " = " + op + ": " + op + "." + c + " " + msg);
  }
  void check(bool cond, const char* c, const std::string& msg) const {
    if (!cond) fail(c, msg);
  }
  const Node& in(size_t k) const { return g_.node(n_.operands[k]); }
  int64_t attr(size_t k) const { return n_.iattrs[k]; }
  std::vector<int64_t> attrs(size_t from, size_t count) const {
    return {n_.iattrs.begin() + from, n_.iattrs.begin() + from + count};
  }

  void arity(size_t n) const {
    check(n_.operands.size() == n, "G2",
          "expects " + std::to_string(n) + " operands, got " + std::to_string(n_.operands.size()));
  }
  void nattrs(size_t n, size_t nf = 0) const {
    check(n_.iattrs.size() == n && n_.fattrs.size() == nf, "G3",
          "expects " + std::to_string(n) + " integer and " + std::to_string(nf) +
              " float attributes, got " + std::to_string(n_.iattrs.size()) + " and " +
              std::to_string(n_.fattrs.size()));
  }

  void structural() const {
    check(static_cast<int>(n_.kind) < kNumOpKinds, "G4", "invalid op id");
    check(is_valid_dtype(static_cast<int>(n_.dtype)), "G4",
          "invalid dtype code " + std::to_string(static_cast<int>(n_.dtype)));
    for (int64_t s : n_.shape) check(s >= 0, "G4", "negative dimension in " + shape_str(n_.shape));
    for (int32_t o : n_.operands) {
      check(o >= 0 && o < id_, "G1", "operand %" + std::to_string(o) + " is not an earlier node");
    }
  }

  void unary(DType& dt, Shape& shape) const {
    arity(1);
    nattrs(0);
    const Node& x = in(0);
    OpKind k = n_.kind;
    if (k == OpKind::kNeg || k == OpKind::kAbs || k == OpKind::kSign) {
      check(x.dtype != DType::kBool, "C1", "needs a numeric operand, got bool");
    } else if (k == OpKind::kNot) {
      check(!is_float(x.dtype), "C1",
            std::string("needs a bool or integer operand, got ") + dtype_name(x.dtype));
    } else {  // float-only ops, is_finite included
      check(is_float(x.dtype), "C1",
            std::string("needs a float operand, got ") + dtype_name(x.dtype));
    }
    dt = k == OpKind::kIsFinite ? DType::kBool : x.dtype;
    shape = x.shape;
  }

  void binary(DType& dt, Shape& shape) const {
    arity(2);
    if (n_.kind == OpKind::kPow && !n_.iattrs.empty()) {
      nattrs(1);
      check(attr(0) == kPowScalarExponent, "C4",
            "pow's attribute must be 1 (scalar exponent), got " + std::to_string(attr(0)));
    } else {
      nattrs(0);
    }
    const Node &x = in(0), &y = in(1);
    check(x.shape == y.shape, "C1",
          "operand shapes differ (" + shape_str(x.shape) + " vs " + shape_str(y.shape) + ")");
    check(x.dtype == y.dtype, "C2",
          std::string("operand dtypes differ (") + dtype_name(x.dtype) + " vs " +
              dtype_name(y.dtype) + ")");
    OpKind k = n_.kind;
    std::string got = std::string("got ") + dtype_name(x.dtype);
    if (k >= OpKind::kAdd && k <= OpKind::kMin) {
      check(x.dtype != DType::kBool, "C3", "needs numeric operands, got bool");
    } else if (k == OpKind::kAtan2) {
      check(is_float(x.dtype), "C3", "needs float operands, " + got);
    } else if (k >= OpKind::kAnd && k <= OpKind::kXor) {
      check(!is_float(x.dtype), "C3", "needs bool or integer operands, " + got);
    } else {  // shifts
      check(is_integer(x.dtype), "C3", "needs integer operands, " + got);
    }
    dt = x.dtype;
    shape = x.shape;
  }

  // Adding an op to ops.h must add its type rule below (the switch's default rejects it).
  static_assert(kNumOpKinds == 75, "new IR op: add its constraints to infer() (and docs/ir.md)");
  void infer(DType& dt, Shape& shape) const {
    const OpKind k = n_.kind;
    if (is_unary_elementwise(k)) return unary(dt, shape);
    if (is_binary_elementwise(k)) return binary(dt, shape);
    switch (k) {
      case OpKind::kParameter:
        // C1: the reserved RNG bindings (-1 seed, -2 offset) are 0-d int64.
        arity(0);
        nattrs(1);
        check(attr(0) >= kRngOffsetBinding, "C1", "invalid binding " + std::to_string(attr(0)));
        if (attr(0) < 0) {
          check(n_.dtype == DType::kI64 && n_.shape.empty(), "C1",
                "RNG state parameter must be i64[], got " + type_str(n_));
        }
        return;
      case OpKind::kConstant:
        // C1: 0-d; float types carry one float attribute, others one integer attribute.
        arity(0);
        if (is_float(n_.dtype))
          nattrs(0, 1);
        else
          nattrs(1, 0);
        check(n_.shape.empty(), "C1", "constant must be 0-d, got " + shape_str(n_.shape));
        return;
      case OpKind::kIota:
        arity(0);
        nattrs(1);
        check(attr(0) >= 0 && attr(0) < n_.rank(), "C1",
              "dim " + std::to_string(attr(0)) + " out of range for rank " +
                  std::to_string(n_.rank()));
        return;
      case OpKind::kRngUniform:
      case OpKind::kRngNormal:
        // C1: float result. C2: seed and offset are i64[].
        arity(2);
        nattrs(0);
        check(is_float(n_.dtype), "C1",
              std::string("needs a float dtype, got ") + dtype_name(n_.dtype));
        for (size_t i = 0; i < 2; ++i) {
          check(in(i).dtype == DType::kI64 && in(i).shape.empty(), "C2",
                "seed/offset must be i64[], got " + type_str(in(i)));
        }
        return;
      case OpKind::kCompare:
        // C1: same shape and dtype. C2: direction in [0, 6).
        arity(2);
        nattrs(1);
        check(in(0).shape == in(1).shape && in(0).dtype == in(1).dtype, "C1",
              "operands differ (" + type_str(in(0)) + " vs " + type_str(in(1)) + ")");
        check(attr(0) >= 0 && attr(0) < 6, "C2", "invalid direction " + std::to_string(attr(0)));
        dt = DType::kBool;
        shape = in(0).shape;
        return;
      case OpKind::kSelect:
        arity(3);
        nattrs(0);
        check(in(0).dtype == DType::kBool, "C1",
              std::string("predicate must be bool, got ") + dtype_name(in(0).dtype));
        check(in(0).shape == in(1).shape && in(1).shape == in(2).shape, "C2",
              "shapes differ (" + shape_str(in(0).shape) + ", " + shape_str(in(1).shape) + ", " +
                  shape_str(in(2).shape) + ")");
        check(in(1).dtype == in(2).dtype, "C3",
              std::string("dtypes differ (") + dtype_name(in(1).dtype) + " vs " +
                  dtype_name(in(2).dtype) + ")");
        dt = in(1).dtype;
        shape = in(1).shape;
        return;
      case OpKind::kConvert:
        arity(1);
        nattrs(0);
        shape = in(0).shape;
        return;
      case OpKind::kBroadcastInDim: {
        // C1: x.shape[k] in (1, out[dims[k]]). C2: dims increasing and in range.
        arity(1);
        const Node& x = in(0);
        nattrs(x.shape.size());
        for (size_t i = 0; i < x.shape.size(); ++i) {
          int64_t d = attr(i);
          check(d >= 0 && d < n_.rank() && (i == 0 || d > attr(i - 1)), "C2",
                "dims must be increasing result dims, got " + shape_str(n_.iattrs));
          check(x.shape[i] == 1 || x.shape[i] == n_.shape[d], "C1",
                "operand dim " + std::to_string(i) + " (size " + std::to_string(x.shape[i]) +
                    ") does not fit result dim " + std::to_string(d) + " of " +
                    shape_str(n_.shape));
        }
        dt = x.dtype;
        return;
      }
      case OpKind::kReshape:
        arity(1);
        nattrs(0);
        check(numel(in(0).shape) == numel(n_.shape), "C1",
              shape_str(in(0).shape) + " -> " + shape_str(n_.shape) + " changes the element count");
        dt = in(0).dtype;
        return;
      case OpKind::kTranspose: {
        // C1: perm is a permutation of the operand's dims.
        arity(1);
        const Node& x = in(0);
        check(is_perm(n_.iattrs, x.shape.size()), "C1",
              shape_str(n_.iattrs) + " is not a permutation of rank " + std::to_string(x.rank()));
        dt = x.dtype;
        shape.clear();
        for (int64_t p : n_.iattrs) shape.push_back(x.shape[p]);
        return;
      }
      case OpKind::kSlice: {
        arity(1);
        const Node& x = in(0);
        size_t r = x.shape.size();
        nattrs(3 * r);
        shape.clear();
        for (size_t d = 0; d < r; ++d) {
          int64_t s = attr(d), l = attr(r + d), st = attr(2 * r + d);
          check(0 <= s && s <= l && l <= x.shape[d] && st > 0, "C1",
                "dim " + std::to_string(d) + ": start " + std::to_string(s) + ", limit " +
                    std::to_string(l) + ", stride " + std::to_string(st) + " invalid for size " +
                    std::to_string(x.shape[d]));
          shape.push_back((l - s + st - 1) / st);
        }
        dt = x.dtype;
        return;
      }
      case OpKind::kDynamicSlice: {
        // C1: one i64[] start per dim. C2: 0 <= size <= dim size.
        check(!n_.operands.empty(), "G2", "expects an operand and its starts");
        const Node& x = in(0);
        size_t r = x.shape.size();
        arity(1 + r);
        nattrs(r);
        for (size_t d = 0; d < r; ++d) {
          check(in(1 + d).dtype == DType::kI64 && in(1 + d).shape.empty(), "C1",
                "starts must be i64[], got " + type_str(in(1 + d)));
          check(attr(d) >= 0 && attr(d) <= x.shape[d], "C2",
                "sizes " + shape_str(n_.iattrs) + " exceed " + shape_str(x.shape));
        }
        dt = x.dtype;
        shape = n_.iattrs;
        return;
      }
      case OpKind::kDynamicUpdateSlice: {
        // C1: update has x's dtype and rank. C2: update fits in x. C3: starts are 0-d integers.
        check(n_.operands.size() >= 2, "G2", "expects an operand, an update and starts");
        const Node &x = in(0), &u = in(1);
        size_t r = x.shape.size();
        arity(2 + r);
        nattrs(0);
        check(u.dtype == x.dtype && u.shape.size() == r, "C1",
              "update " + type_str(u) + " does not match operand " + type_str(x));
        for (size_t d = 0; d < r; ++d) {
          check(u.shape[d] <= x.shape[d], "C2", "update larger than operand");
          const Node& s = in(2 + d);
          check(is_integer(s.dtype) && s.shape.empty(), "C3",
                "starts must be 0-d integers, got " + type_str(s));
        }
        dt = x.dtype;
        shape = x.shape;
        return;
      }
      case OpKind::kConcatenate: {
        // C1: same dtype, rank, sizes except dim. C2: at least one operand, dim in range.
        check(!n_.operands.empty(), "C2", "needs at least one operand");
        nattrs(1);
        const Node& x0 = in(0);
        int64_t dim = attr(0);
        check(dim >= 0 && dim < x0.rank(), "C2",
              "dim " + std::to_string(dim) + " out of range for rank " + std::to_string(x0.rank()));
        shape = x0.shape;
        shape[dim] = 0;
        for (size_t i = 0; i < n_.operands.size(); ++i) {
          const Node& x = in(i);
          bool ok = x.dtype == x0.dtype && x.rank() == x0.rank();
          for (int64_t d = 0; ok && d < x0.rank(); ++d) ok = d == dim || x.shape[d] == x0.shape[d];
          check(ok, "C1", "mismatched " + type_str(x) + " vs " + type_str(x0));
          shape[dim] += x.shape[dim];
        }
        dt = x0.dtype;
        return;
      }
      case OpKind::kPad: {
        // C1: value is 0-d of x's dtype. C2: interior >= 0. C3: result sizes >= 0.
        arity(2);
        const Node &x = in(0), &v = in(1);
        size_t r = x.shape.size();
        nattrs(3 * r);
        check(
            v.shape.empty() && v.dtype == x.dtype, "C1",
            std::string("padding value must be ") + dtype_name(x.dtype) + "[], got " + type_str(v));
        shape.clear();
        for (size_t d = 0; d < r; ++d) {
          int64_t lo = attr(d), hi = attr(r + d), interior = attr(2 * r + d), n = x.shape[d];
          check(interior >= 0, "C2", "interior padding must be >= 0");
          int64_t size = lo + hi + n + std::max<int64_t>(n - 1, 0) * interior;
          check(size >= 0, "C3", "dim " + std::to_string(d) + " would have negative size");
          shape.push_back(size);
        }
        dt = x.dtype;
        return;
      }
      case OpKind::kReverse: {
        // C1: dims in range.
        arity(1);
        for (int64_t d : n_.iattrs) {
          check(d >= 0 && d < in(0).rank(), "C1", "dims " + shape_str(n_.iattrs) + " out of range");
        }
        dt = in(0).dtype;
        shape = in(0).shape;
        return;
      }
      case OpKind::kGather: {
        // C1: index no larger than x outside axis. C2: index is i64 of x's rank. C3: axis.
        // C4: an optional second attribute, 0 or 1 (the error type of an out-of-range index).
        arity(2);
        nattrs(n_.iattrs.size() == 2 ? 2 : 1);
        check(n_.iattrs.size() == 1 || n_.iattrs[1] == 0 || n_.iattrs[1] == 1, "C4", "error kind must be 0 or 1");
        const Node &x = in(0), &idx = in(1);
        int64_t axis = attr(0);
        check(idx.dtype == DType::kI64 && idx.rank() == x.rank(), "C2",
              "index " + type_str(idx) + " must be i64 of rank " + std::to_string(x.rank()));
        check(axis >= 0 && axis < std::max<int64_t>(x.rank(), 1), "C3",
              "axis " + std::to_string(axis) + " out of range");
        for (int64_t d = 0; d < x.rank(); ++d) {
          check(d == axis || idx.shape[d] <= x.shape[d], "C1",
                "index " + shape_str(idx.shape) + " larger than operand " + shape_str(x.shape) +
                    " outside axis " + std::to_string(axis));
        }
        dt = x.dtype;
        shape = idx.shape;
        return;
      }
      case OpKind::kScatter: {
        // C1: index (i64) and updates same shape, rank of x. C2: updates dtype == x dtype.
        // C3: index no larger than x outside axis. C4: axis and mode in range. C5: an optional
        // third attribute, 0 or 1 (the error type of an out-of-range index).
        arity(3);
        nattrs(n_.iattrs.size() == 3 ? 3 : 2);
        check(n_.iattrs.size() == 2 || n_.iattrs[2] == 0 || n_.iattrs[2] == 1, "C5", "error kind must be 0 or 1");
        const Node &x = in(0), &idx = in(1), &u = in(2);
        int64_t axis = attr(0), mode = attr(1);
        check(idx.dtype == DType::kI64 && idx.shape == u.shape && idx.rank() == x.rank(), "C1",
              "index " + type_str(idx) + " / updates " + type_str(u) +
                  " must match and have operand rank " + std::to_string(x.rank()));
        check(u.dtype == x.dtype, "C2",
              std::string("updates dtype ") + dtype_name(u.dtype) + " != operand " +
                  dtype_name(x.dtype));
        check(axis >= 0 && axis < std::max<int64_t>(x.rank(), 1) && mode >= 0 && mode < 5, "C4",
              "axis " + std::to_string(axis) + " / mode " + std::to_string(mode) + " invalid");
        for (int64_t d = 0; d < x.rank(); ++d) {
          check(d == axis || idx.shape[d] <= x.shape[d], "C3",
                "index " + shape_str(idx.shape) + " larger than operand " + shape_str(x.shape) +
                    " outside axis " + std::to_string(axis));
        }
        dt = x.dtype;
        shape = x.shape;
        return;
      }
      case OpKind::kReduce: {
        // C1: dims increasing and in range. C2: and/or need bool, sum/prod numeric.
        // C3: argmax/argmin take one non-empty dim. C4: kind in range.
        arity(1);
        check(!n_.iattrs.empty(), "G3", "expects [kind, dims...]");
        const Node& x = in(0);
        int64_t kind = attr(0);
        check(kind >= 0 && kind < 8, "C4", "invalid kind " + std::to_string(kind));
        std::vector<int64_t> dims = attrs(1, n_.iattrs.size() - 1);
        for (size_t i = 0; i < dims.size(); ++i) {
          check(dims[i] >= 0 && dims[i] < x.rank() && (i == 0 || dims[i] > dims[i - 1]), "C1",
                "dims " + shape_str(dims) + " out of range or not increasing for rank " +
                    std::to_string(x.rank()));
        }
        auto rk = static_cast<ReduceKind>(kind);
        if (rk == ReduceKind::kAnd || rk == ReduceKind::kOr) {
          check(x.dtype == DType::kBool, "C2",
                std::string("and/or need bool, got ") + dtype_name(x.dtype));
        } else if (rk == ReduceKind::kSum || rk == ReduceKind::kProd) {
          check(x.dtype != DType::kBool, "C2", "sum/prod need a numeric operand");
        }
        bool arg = rk == ReduceKind::kArgmax || rk == ReduceKind::kArgmin;
        if (arg) {
          check(dims.size() == 1 && x.shape[dims[0]] > 0, "C3",
                "argmax/argmin need one non-empty dim");
        }
        shape.clear();
        for (int64_t d = 0; d < x.rank(); ++d) {
          if (!std::binary_search(dims.begin(), dims.end(), d)) shape.push_back(x.shape[d]);
        }
        dt = arg ? DType::kI64 : x.dtype;
        return;
      }
      case OpKind::kReduceWindow: {
        // C1: numeric operand. C2: window, strides, dilation >= 1 and padding >= 0. C3: kind.
        arity(1);
        const Node& x = in(0);
        size_t r = x.shape.size();
        nattrs(1 + 5 * r);
        check(x.dtype != DType::kBool, "C1", "needs a numeric operand");
        check(attr(0) >= 0 && attr(0) < 3, "C3", "invalid kind " + std::to_string(attr(0)));
        shape.clear();
        for (size_t d = 0; d < r; ++d) {
          int64_t w = attr(1 + d), st = attr(1 + r + d), lo = attr(1 + 2 * r + d),
                  hi = attr(1 + 3 * r + d), dil = attr(1 + 4 * r + d);
          check(w >= 1 && st >= 1 && dil >= 1 && lo >= 0 && hi >= 0, "C2",
                "dim " + std::to_string(d) + ": invalid window/stride/padding/dilation");
          int64_t span = (w - 1) * dil + 1, padded = x.shape[d] + lo + hi;
          shape.push_back(padded < span ? 0 : (padded - span) / st + 1);
        }
        dt = x.dtype;
        return;
      }
      case OpKind::kScan: {
        // C1: dim in range. C2: numeric operand. C3: kind in range, reverse is 0/1.
        arity(1);
        nattrs(3);
        const Node& x = in(0);
        check(attr(1) >= 0 && attr(1) < std::max<int64_t>(x.rank(), 1), "C1",
              "dim " + std::to_string(attr(1)) + " out of range");
        check(x.dtype != DType::kBool, "C2", "needs a numeric operand");
        check(attr(0) >= 0 && attr(0) < 4 && (attr(2) == 0 || attr(2) == 1), "C3",
              "invalid kind/reverse");
        dt = x.dtype;
        shape = x.shape;
        return;
      }
      case OpKind::kDotGeneral:
        return dot_general(dt, shape);
      case OpKind::kConvolution:
        return convolution(dt, shape);
      case OpKind::kSort: {
        // C1: dim in range. C2: descending is 0/1 and stable is 1.
        arity(1);
        nattrs(3);
        const Node& x = in(0);
        check(attr(0) >= 0 && attr(0) < std::max<int64_t>(x.rank(), 1), "C1",
              "dim " + std::to_string(attr(0)) + " out of range");
        check((attr(1) == 0 || attr(1) == 1) && attr(2) == 1, "C2", "invalid descending/stable");
        dt = DType::kI64;
        shape = x.shape;
        return;
      }
      case OpKind::kCholesky: {
        // C1: a float matrix (batch dims allowed), square. C2: lower is 0/1.
        arity(1);
        nattrs(1);
        const Node& a = in(0);
        check(a.rank() >= 2 && a.shape[a.rank() - 1] == a.shape[a.rank() - 2], "C1", "needs square matrices");
        check(a.dtype == DType::kF32 || a.dtype == DType::kF64, "C1", "needs float32 or float64");
        check(attr(0) == 0 || attr(0) == 1, "C2", "lower must be 0 or 1");
        dt = a.dtype;
        shape = a.shape;
        return;
      }
      case OpKind::kTriangularSolve: {
        // C1: a [..., n, n] and b [..., n, k] (left side) or [..., k, n] with the same batch
        // dims and dtype (float32/float64). C2: the four flags are 0/1.
        arity(2);
        nattrs(4);
        const Node& a = in(0);
        const Node& b = in(1);
        const int64_t r = a.rank();
        check(r >= 2 && a.shape[r - 1] == a.shape[r - 2] && b.rank() == r, "C1", "needs a square a and b of its rank");
        check(a.dtype == b.dtype && (a.dtype == DType::kF32 || a.dtype == DType::kF64), "C1",
              "needs float32 or float64 operands of one dtype");
        for (int64_t d = 0; d + 2 < r; ++d) check(a.shape[d] == b.shape[d], "C1", "batch dims differ");
        check(b.shape[attr(0) ? r - 2 : r - 1] == a.shape[r - 1], "C1", "b does not match a's size");
        for (int k = 0; k < 4; ++k) check(attr(k) == 0 || attr(k) == 1, "C2", "flags must be 0 or 1");
        dt = b.dtype;
        shape = b.shape;
        return;
      }
      default:
        fail("G4", "unhandled op");
    }
  }

  // C1: same dtype, not bool. C2: batch/contract list lengths agree. C3: paired sizes equal.
  // C4: dims in range and each dim used at most once per operand.
  void dot_general(DType& dt, Shape& shape) const {
    arity(2);
    const Node &l = in(0), &r = in(1);
    check(l.dtype == r.dtype && l.dtype != DType::kBool, "C1",
          "operands " + type_str(l) + " and " + type_str(r));
    const auto& a = n_.iattrs;
    check(!a.empty() && a[0] >= 0 && a.size() >= static_cast<size_t>(2 + 2 * a[0]), "G3",
          "malformed dimension lists");
    size_t nb = a[0];
    size_t nc_at = 1 + 2 * nb;
    check(a[nc_at] >= 0 && a.size() == 2 + 2 * nb + 2 * static_cast<size_t>(a[nc_at]), "G3",
          "malformed dimension lists");
    size_t nc = a[nc_at];
    std::vector<int64_t> lb = attrs(1, nb), rb = attrs(1 + nb, nb), lc = attrs(nc_at + 1, nc),
                         rc = attrs(nc_at + 1 + nc, nc);
    auto used = [&](const Node& x, std::vector<int64_t> dims) {
      std::vector<bool> seen(x.shape.size(), false);
      for (int64_t d : dims) {
        check(d >= 0 && d < x.rank() && !seen[d], "C4",
              "dimension lists " + shape_str(n_.iattrs) + " invalid for " + type_str(x));
        seen[d] = true;
      }
      return seen;
    };
    std::vector<int64_t> ldims = lb, rdims = rb;
    ldims.insert(ldims.end(), lc.begin(), lc.end());
    rdims.insert(rdims.end(), rc.begin(), rc.end());
    std::vector<bool> lu = used(l, ldims), ru = used(r, rdims);
    for (size_t i = 0; i < ldims.size(); ++i) {
      check(l.shape[ldims[i]] == r.shape[rdims[i]], "C3",
            "batch/contracting sizes differ: " + shape_str(l.shape) + " vs " + shape_str(r.shape));
    }
    shape.clear();
    for (int64_t d : lb) shape.push_back(l.shape[d]);
    for (int64_t d = 0; d < l.rank(); ++d)
      if (!lu[d]) shape.push_back(l.shape[d]);
    for (int64_t d = 0; d < r.rank(); ++d)
      if (!ru[d]) shape.push_back(r.shape[d]);
    dt = l.dtype;
  }

  // C1: float operands of one dtype. C2: ranks (lhs rank = rhs rank = nsp + 2, nsp >= 1).
  // C3: attribute lists nsp long, strides and dilations >= 1. C4: channels agree with groups.
  // C5: the (dilated, padded) input is at least the kernel span.
  void convolution(DType& dt, Shape& shape) const {
    arity(2);
    const Node &l = in(0), &r = in(1);
    check(l.dtype == r.dtype && is_float(l.dtype), "C1",
          "needs float operands of one dtype, got " + type_str(l) + " and " + type_str(r));
    check(!n_.iattrs.empty(), "G3", "missing attributes");
    int64_t nsp = attr(0);
    check(nsp >= 1 && l.rank() == nsp + 2 && r.rank() == l.rank(), "C2",
          "ranks " + std::to_string(l.rank()) + ", " + std::to_string(r.rank()) +
              " for spatial rank " + std::to_string(nsp));
    nattrs(2 + 5 * nsp);
    int64_t groups = attr(1 + 5 * nsp);
    check(groups >= 1 && l.shape[1] == r.shape[1] * groups && r.shape[0] % groups == 0, "C4",
          "channels: input " + std::to_string(l.shape[1]) + ", weight " + shape_str(r.shape) +
              ", groups " + std::to_string(groups));
    shape = {l.shape[0], r.shape[0]};
    for (int64_t d = 0; d < nsp; ++d) {
      int64_t stride = attr(1 + d), lo = attr(1 + nsp + d), hi = attr(1 + 2 * nsp + d),
              ldil = attr(1 + 3 * nsp + d), rdil = attr(1 + 4 * nsp + d);
      check(stride >= 1 && ldil >= 1 && rdil >= 1, "C3",
            "spatial dim " + std::to_string(d) + ": strides and dilations must be >= 1");
      int64_t n = l.shape[2 + d];
      int64_t dil_in = n + std::max<int64_t>(n - 1, 0) * (ldil - 1) + lo + hi;
      int64_t span = (r.shape[2 + d] - 1) * rdil + 1;
      check(dil_in >= span, "C5",
            "spatial dim " + std::to_string(d) + ": input " + std::to_string(dil_in) +
                " smaller than kernel span " + std::to_string(span));
      shape.push_back((dil_in - span) / stride + 1);
    }
    dt = l.dtype;
  }

  const Graph& g_;
  int32_t id_;
  const Node& n_;
};

}  // namespace

void verify(const Graph& graph) {
  for (int32_t i = 0; i < graph.size(); ++i) NodeVerifier(graph, i).run();
}

}  // namespace torch_tpu::ir
