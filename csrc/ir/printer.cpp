#include "ir/printer.h"

#include <cstdio>
#include <string>
#include <vector>

namespace torch_tpu::ir {
namespace {

std::string list(const std::vector<int64_t>& xs, size_t from = 0, size_t count = SIZE_MAX) {
  std::string out = "[";
  for (size_t i = from; i < xs.size() && i - from < count; ++i) {
    out += (i > from ? ", " : "") + std::to_string(xs[i]);
  }
  return out + "]";
}

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string tensor_type(const Node& n) {
  std::string out = "tensor<";
  for (int64_t s : n.shape) out += std::to_string(s) + "x";
  return out + dtype_name(n.dtype) + ">";
}

const char* pick(const char* const* names, size_t count, int64_t i) {
  return i >= 0 && static_cast<size_t>(i) < count ? names[i] : "?";
}

// Attribute text ("{...}" or empty) for node n; falls back to raw lists when malformed. The
// op's name comes from ops.cpp's table (asserted there); its attributes' layout from here.
static_assert(kNumOpKinds == 75, "new IR op: print its attributes by name in attributes()");
std::string attributes(const Graph& g, const Node& n) {
  static const char* const kDirs[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  static const char* const kReduce[] = {"sum", "prod", "max",    "min",
                                        "and", "or",   "argmax", "argmin"};
  static const char* const kWindow[] = {"sum", "max", "min"};
  static const char* const kModes[] = {"replace", "add", "mul", "max", "min"};
  const auto& a = n.iattrs;
  auto in_rank = [&](size_t k) -> size_t {
    return k < n.operands.size() && n.operands[k] >= 0 && n.operands[k] < g.size()
               ? g.node(n.operands[k]).shape.size()
               : 0;
  };
  size_t r = in_rank(0);
  std::string s;
  switch (n.kind) {
    case OpKind::kParameter:
      if (a.size() == 1) {
        s = a[0] == kRngSeedBinding     ? "binding = rng_seed"
            : a[0] == kRngOffsetBinding ? "binding = rng_offset"
                                        : "binding = " + std::to_string(a[0]);
      }
      break;
    case OpKind::kConstant:
      if (n.fattrs.size() == 1 && a.empty()) s = "value = " + fmt_double(n.fattrs[0]);
      if (a.size() == 1 && n.fattrs.empty()) s = "value = " + std::to_string(a[0]);
      break;
    case OpKind::kIota:
    case OpKind::kConcatenate:
      if (a.size() == 1) s = "dim = " + std::to_string(a[0]);
      break;
    case OpKind::kCompare:
      if (a.size() == 1) s = std::string("dir = ") + pick(kDirs, 6, a[0]);
      break;
    case OpKind::kBroadcastInDim:
    case OpKind::kReverse:
      s = "dims = " + list(a);
      break;
    case OpKind::kTranspose:
      s = "perm = " + list(a);
      break;
    case OpKind::kSlice:
      if (a.size() == 3 * r) {
        s = "start = " + list(a, 0, r) + ", limit = " + list(a, r, r) +
            ", stride = " + list(a, 2 * r, r);
      }
      break;
    case OpKind::kDynamicSlice:
      s = "sizes = " + list(a);
      break;
    case OpKind::kPad:
      if (a.size() == 3 * r) {
        s = "lo = " + list(a, 0, r) + ", hi = " + list(a, r, r) +
            ", interior = " + list(a, 2 * r, r);
      }
      break;
    case OpKind::kGather:
      if (a.size() == 1 || a.size() == 2) s = "axis = " + std::to_string(a[0]);
      if (a.size() == 2 && a[1] == 1) s += ", errors = runtime";
      break;
    case OpKind::kScatter:
      if (a.size() == 2 || a.size() == 3) s = "axis = " + std::to_string(a[0]) + ", mode = " + pick(kModes, 5, a[1]);
      if (a.size() == 3 && a[2] == 1) s += ", errors = runtime";
      break;
    case OpKind::kReduce:
      if (!a.empty())
        s = std::string("kind = ") + pick(kReduce, 8, a[0]) + ", dims = " + list(a, 1);
      break;
    case OpKind::kReduceWindow:
      if (a.size() == 1 + 5 * r) {
        s = std::string("kind = ") + pick(kWindow, 3, a[0]) + ", window = " + list(a, 1, r) +
            ", strides = " + list(a, 1 + r, r) + ", pad_lo = " + list(a, 1 + 2 * r, r) +
            ", pad_hi = " + list(a, 1 + 3 * r, r) + ", dilation = " + list(a, 1 + 4 * r, r);
      }
      break;
    case OpKind::kScan:
      if (a.size() == 3) {
        s = std::string("kind = ") + pick(kReduce, 4, a[0]) + ", dim = " + std::to_string(a[1]) +
            (a[2] ? ", reverse" : "");
      }
      break;
    case OpKind::kDotGeneral:
      if (!a.empty() && a[0] >= 0 && a.size() >= static_cast<size_t>(2 + 2 * a[0])) {
        size_t nb = a[0], at = 1 + 2 * nb;
        size_t nc = a[at] >= 0 ? a[at] : SIZE_MAX;
        if (a.size() == at + 1 + 2 * nc) {
          s = "lhs_batch = " + list(a, 1, nb) + ", rhs_batch = " + list(a, 1 + nb, nb) +
              ", lhs_contract = " + list(a, at + 1, nc) +
              ", rhs_contract = " + list(a, at + 1 + nc, nc);
        }
      }
      break;
    case OpKind::kConvolution:
      if (!a.empty() && a[0] >= 1 && a.size() == 2 + 5 * static_cast<size_t>(a[0])) {
        size_t k = a[0];
        s = "strides = " + list(a, 1, k) + ", pad_lo = " + list(a, 1 + k, k) +
            ", pad_hi = " + list(a, 1 + 2 * k, k) + ", lhs_dilation = " + list(a, 1 + 3 * k, k) +
            ", rhs_dilation = " + list(a, 1 + 4 * k, k) + ", groups = " + std::to_string(a.back());
      }
      break;
    case OpKind::kSort:
      if (a.size() == 3) s = "dim = " + std::to_string(a[0]) + (a[1] ? ", descending" : "");
      break;
    case OpKind::kCholesky:
      if (a.size() == 1) s = a[0] ? "lower" : "upper";
      break;
    case OpKind::kTriangularSolve:
      if (a.size() == 4) {
        s = std::string(a[0] ? "left_side" : "right_side") + (a[1] ? ", lower" : ", upper") +
            (a[2] ? ", unit_diagonal" : "") + (a[3] ? ", transpose_a" : "");
      }
      break;
    default:
      break;
  }
  if (s.empty() && (!a.empty() || !n.fattrs.empty())) {  // unknown layout: show it raw
    s = "iattrs = " + list(a);
    if (!n.fattrs.empty()) {
      s += ", fattrs = [";
      for (size_t i = 0; i < n.fattrs.size(); ++i) s += (i ? ", " : "") + fmt_double(n.fattrs[i]);
      s += "]";
    }
  }
  return s.empty() ? s : " {" + s + "}";
}

}  // namespace

std::string node_to_string(const Graph& graph, int32_t id) {
  const Node& n = graph.node(id);
  std::string line = "%" + std::to_string(id) + " = " + op_name(n.kind);
  for (size_t i = 0; i < n.operands.size(); ++i) {
    line += (i ? ", %" : " %") + std::to_string(n.operands[i]);
  }
  return line + attributes(graph, n) + " : " + tensor_type(n);
}

std::string to_string(const Graph& graph) {
  std::string out;
  for (int32_t i = 0; i < graph.size(); ++i) out += node_to_string(graph, i) + "\n";
  return out;
}

}  // namespace torch_tpu::ir
