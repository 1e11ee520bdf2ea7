// Index checks for XLA backends (index_checks.h).
#include "stablehlo/index_checks.h"

#include <c10/util/accumulate.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace torch_tpu::stablehlo {
namespace {

using ir::OpKind;
using Bounds = std::optional<std::pair<int64_t, int64_t>>;

// Bounds past this magnitude are not followed: interval arithmetic then never overflows.
constexpr int64_t kLimit = int64_t{1} << 40;

Bounds bounded(int64_t lo, int64_t hi) {
  if (lo < -kLimit || hi > kLimit) return std::nullopt;
  return std::make_pair(lo, hi);
}

Bounds join(const Bounds& a, const Bounds& b) {
  if (!a || !b) return std::nullopt;
  return std::make_pair(std::min(a->first, b->first), std::max(a->second, b->second));
}

// A comparison of values with bounds x and y: [1, 1] or [0, 0] where the bounds decide it.
Bounds compare_bounds(const ir::Node& n, const Bounds& x, const Bounds& y) {
  if (!x || !y) return bounded(0, 1);
  auto [a, b] = *x;
  auto [c, d] = *y;
  std::optional<bool> v;
  switch (static_cast<ir::CompareDir>(n.iattrs.at(0))) {
    case ir::CompareDir::kLt:
      v = b < c ? std::optional(true) : a >= d ? std::optional(false) : std::nullopt;
      break;
    case ir::CompareDir::kLe:
      v = b <= c ? std::optional(true) : a > d ? std::optional(false) : std::nullopt;
      break;
    case ir::CompareDir::kGt:
      v = a > d ? std::optional(true) : b <= c ? std::optional(false) : std::nullopt;
      break;
    case ir::CompareDir::kGe:
      v = a >= d ? std::optional(true) : b < c ? std::optional(false) : std::nullopt;
      break;
    case ir::CompareDir::kEq:
      v = (b < c || a > d) ? std::optional(false) : (a == b && b == c && c == d) ? std::optional(true) : std::nullopt;
      break;
    case ir::CompareDir::kNe:
      v = (b < c || a > d) ? std::optional(true) : (a == b && b == c && c == d) ? std::optional(false) : std::nullopt;
      break;
  }
  if (!v) return bounded(0, 1);
  return bounded(*v, *v);
}

// not/and/or/xor of booleans whose bounds are known: decided where they decide it.
Bounds logic_bounds(const ir::Node& n, const Bounds& x, const Bounds& y) {
  auto known = [](const Bounds& v) {
    return v && v->first == v->second ? std::optional<bool>(v->first != 0) : std::nullopt;
  };
  const std::optional<bool> p = known(x), q = known(y);
  std::optional<bool> v;
  if (n.kind == OpKind::kNot && p) v = !*p;
  if (n.kind == OpKind::kAnd)
    v = (p == false || q == false) ? std::optional(false) : (p && q) ? std::optional(true) : std::nullopt;
  if (n.kind == OpKind::kOr)
    v = (p == true || q == true) ? std::optional(true) : (p && q) ? std::optional(false) : std::nullopt;
  if (n.kind == OpKind::kXor && p && q) v = *p != *q;
  if (!v) return bounded(0, 1);
  return bounded(*v, *v);
}

}  // namespace

Bounds IndexBounds::of(int32_t id, int depth) {
  Entry& memo = memo_.at(static_cast<size_t>(id));
  if (memo.done) return memo.bounds;
  if (depth > 64) return std::nullopt;  // long chains: not worth proving (not memoized)
  const ir::Node& n = graph_.node(id);
  auto operand = [&](size_t k) { return of(n.operands.at(k), depth + 1); };
  Bounds r;
  if (n.dtype == ir::DType::kBool) {  // 0 or 1; a comparison's bounds may decide it
    memo.done = true;
    memo.bounds = n.kind == OpKind::kCompare ? compare_bounds(n, operand(0), operand(1))
                  : n.kind == OpKind::kNot   ? logic_bounds(n, operand(0), operand(0))
                  : (n.kind == OpKind::kAnd || n.kind == OpKind::kOr || n.kind == OpKind::kXor)
                      ? logic_bounds(n, operand(0), operand(1))
                      : bounded(0, 1);
    return memo.bounds;
  }
  switch (n.kind) {
    case OpKind::kConstant:
      if (ir::is_integer(n.dtype) && !n.iattrs.empty()) r = bounded(n.iattrs[0], n.iattrs[0]);
      break;
    case OpKind::kIota:
      if (!n.shape.empty()) r = bounded(0, n.shape.at(static_cast<size_t>(n.iattrs.at(0))) - 1);
      break;
    case OpKind::kSort:  // the permutation along its dim
      if (!n.shape.empty()) r = bounded(0, n.shape.at(static_cast<size_t>(n.iattrs.at(0))) - 1);
      break;
    case OpKind::kReduce: {
      const int64_t kind = n.iattrs.at(0);
      const ir::Node& x = graph_.node(n.operands.at(0));
      if ((kind == static_cast<int64_t>(ir::ReduceKind::kArgmax) ||
           kind == static_cast<int64_t>(ir::ReduceKind::kArgmin)) &&
          n.iattrs.size() == 2) {
        r = bounded(0, std::max<int64_t>(x.shape.at(static_cast<size_t>(n.iattrs[1])) - 1, 0));
      } else if (kind == static_cast<int64_t>(ir::ReduceKind::kMax) ||
                 kind == static_cast<int64_t>(ir::ReduceKind::kMin)) {
        r = operand(0);  // (an empty reduction's identity is out of any bound: not used as an index)
        if (r && c10::multiply_integers(x.shape) == 0) r = std::nullopt;
      }
      break;
    }
    case OpKind::kConvert: {
      // Integer -> i32/i64 keeps values that fit in i32; anything from a float is data.
      const ir::Node& x = graph_.node(n.operands.at(0));
      if ((ir::is_integer(x.dtype) || x.dtype == ir::DType::kBool) &&
          (n.dtype == ir::DType::kI64 || n.dtype == ir::DType::kI32)) {
        r = operand(0);
        if (r && (r->first < std::numeric_limits<int32_t>::min() || r->second > std::numeric_limits<int32_t>::max()))
          r = std::nullopt;
      }
      break;
    }
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kReverse:
    case OpKind::kDynamicSlice:
    case OpKind::kGather:  // its elements are some of the operand's
      r = operand(0);
      break;
    case OpKind::kPad:
    case OpKind::kDynamicUpdateSlice:
      r = join(operand(0), operand(1));
      break;
    case OpKind::kScatter:
      if (n.iattrs.at(1) == static_cast<int64_t>(ir::ScatterMode::kReplace) ||
          n.iattrs.at(1) == static_cast<int64_t>(ir::ScatterMode::kMax) ||
          n.iattrs.at(1) == static_cast<int64_t>(ir::ScatterMode::kMin))
        r = join(operand(0), operand(2));
      break;
    case OpKind::kConcatenate:
      r = operand(0);
      for (size_t k = 1; k < n.operands.size() && r; ++k) r = join(r, operand(k));
      break;
    case OpKind::kSelect: {  // a predicate the bounds decide picks one side (negative-index wrap)
      Bounds pred = operand(0);
      if (pred && pred->first == pred->second) {
        r = operand(pred->first != 0 ? 1 : 2);
      } else {
        r = join(operand(1), operand(2));
      }
      break;
    }
    case OpKind::kRem: {  // truncated: the dividend's sign, smaller than the divisor in magnitude
      if (!ir::is_integer(n.dtype)) break;
      Bounds x = operand(0), y = operand(1);
      if (!x || !y || y->first <= 0) break;
      r = x->first >= 0
              ? bounded(0, std::min(x->second, y->second - 1))
              : bounded(std::max(x->first, 1 - y->second), std::max<int64_t>(0, std::min(x->second, y->second - 1)));
      break;
    }
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kMax:
    case OpKind::kMin: {
      if (!ir::is_integer(n.dtype)) break;
      Bounds x = operand(0), y = operand(1);
      if (!x || !y) break;
      auto [a, b] = *x;
      auto [c, d] = *y;
      if (n.kind == OpKind::kAdd) r = bounded(a + c, b + d);
      if (n.kind == OpKind::kSub) r = bounded(a - d, b - c);
      if (n.kind == OpKind::kMax) r = bounded(std::max(a, c), std::max(b, d));
      if (n.kind == OpKind::kMin) r = bounded(std::min(a, c), std::min(b, d));
      if (n.kind == OpKind::kMul) {
        // Factors below 2^20 in magnitude: the products cannot overflow.
        if (std::max(std::abs(a), std::abs(b)) < (int64_t{1} << 20) &&
            std::max(std::abs(c), std::abs(d)) < (int64_t{1} << 20)) {
          const int64_t p[] = {a * c, a * d, b * c, b * d};
          r = bounded(*std::min_element(p, p + 4), *std::max_element(p, p + 4));
        }
      }
      break;
    }
    default:
      break;
  }
  memo.done = true;
  memo.bounds = r;
  return r;
}

std::pair<Val, Val> emit_index_check(Body& b, const Val& index, int64_t size) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < index.type.shape.size(); ++d) dims.push_back(static_cast<int64_t>(d));
  TType scalar{"i64", {}};
  auto reduce = [&](const char* combiner, int64_t init) {
    if (dims.empty()) return index;
    std::string region = b.region({scalar, scalar}, [&](Body& r, const std::vector<Val>& a) {
      return std::vector<Val>{r.binary(combiner, a[0], a[1])};
    });
    return b.op("stablehlo.reduce", {index, b.isplat(init, "i64")}, scalar, "dimensions = " + i64_array(dims), region);
  };
  Val lo = reduce("stablehlo.minimum", std::numeric_limits<int64_t>::max());
  Val hi = reduce("stablehlo.maximum", std::numeric_limits<int64_t>::min());
  Val negative = b.compare("LT", lo, b.isplat(0, "i64"));
  Val failed = b.binary("stablehlo.or", negative, b.compare("GE", hi, b.isplat(size, "i64")));
  return {failed, b.select(negative, lo, hi)};
}

Val emit_check_result(Body& b, const std::vector<Val>& failed, const std::vector<Val>& reported) {
  Val code = b.isplat(0, "i64"), value = b.isplat(0, "i64");
  for (size_t k = failed.size(); k-- > 0;) {  // the first failing check wins
    code = b.select(failed[k], b.isplat(static_cast<int64_t>(k) + 1, "i64"), code);
    value = b.select(failed[k], reported[k], value);
  }
  return b.op("stablehlo.concatenate", {b.reshape(code, {1}), b.reshape(value, {1})}, {"i64", {2}},
              "dimension = 0 : i64");
}

}  // namespace torch_tpu::stablehlo
