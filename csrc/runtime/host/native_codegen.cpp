// Native tile kernels from a cluster's tile program (tile_cluster.h, native_kernels.h).
//
// The per-tile instructions are cut into segments of consecutive arithmetic instructions the
// generated code computes exactly (IEEE single operations, compares, selects, bit operations);
// each segment becomes one loop over the tile's lanes that keeps its values in registers,
// loading what it reads from the slots and storing only the slots read after it. Everything
// else (SLEEF and MKL functions, pow, f16 rounding, row reductions) stays an interpreter
// instruction, called back between segments, so a tile's bits do not depend on the tier that
// ran it. A per-row value broadcast back over its row is read in place by the segment that
// uses it, and arithmetic on per-row values (a mean, a variance's rsqrt) runs in segments of
// one lane per row.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "runtime/host/tile_cluster.h"
#include "runtime/host/tile_ops.h"

namespace torch_tpu::runtime::host {
namespace {

// The generated expression of `op` over operand expressions x, y, z (vector type F), or ""
// when the op stays with the interpreter. Each matches exec_op's formula bit for bit.
std::string native_expr(uint8_t op, const std::string& x, const std::string& y, const std::string& z) {
  const std::string zero = "bc<F>(0.f)";
  switch (op) {
    case kCopy:
      return x;
    case kNeg:
      return "-" + x;
    case kAbs:
      return "vabs<F>(" + x + ")";
    case kSign:
      return "b2f<F>(" + x + " > " + zero + ") - b2f<F>(" + x + " < " + zero + ")";
    case kSqrt:
      return "vsqrt<F>(" + x + ")";
    case kRsqrt:
      return "bc<F>(1.f) / vsqrt<F>(" + x + ")";
    case kNotBool:
      return "b2f<F>(" + x + " == " + zero + ")";
    case kIsFinite:
      return "b2f<F>(vabs<F>(" + x + ") <= bc<F>(3.40282347e+38f))";
    case kToBool:
      return "b2f<F>(" + x + " != " + zero + ")";
    case kAdd:
      return x + " + " + y;
    case kSub:
      return x + " - " + y;
    case kMul:
      return x + " * " + y;
    case kDiv:
      return x + " / " + y;
    case kMax:
      return "vmax<F>(" + x + ", " + y + ")";
    case kMin:
      return "vmin<F>(" + x + ", " + y + ")";
    case kAnd:
    case kOr:
    case kXor: {  // on truth values: x and y compare unequal to zero
      const char* join = op == kAnd ? " & " : op == kOr ? " | " : " ^ ";
      return "b2f<F>((" + x + " != " + zero + ")" + join + "(" + y + " != " + zero + "))";
    }
    case kEq:
    case kNe:
    case kLt:
    case kLe:
    case kGt:
    case kGe: {
      static_assert(kGe - kEq == 5, "comparisons are consecutive in tile_ops.h");
      static constexpr const char* kCompare[] = {" == ", " != ", " < ", " <= ", " > ", " >= "};
      return "b2f<F>(" + x + kCompare[op - kEq] + y + ")";
    }
    case kSelect:
      return "(" + x + " != " + zero + ") ? " + y + " : " + z;
    default:
      return "";
  }
}

int arity(uint8_t op) {
  if (op == kSelect) return 3;
  return op >= kAdd ? 2 : 1;
}

// An instruction whose op the generated code computes (over the tile's lanes, or over one lane
// per row for instructions on per-row values).
bool exact_op(const Cluster::Instr& in) {
  return !in.invariant && !in.pow_scalar && in.round <= 1 && !in.expand && !native_expr(in.op, "x", "y", "z").empty();
}

// How a per-tile instruction runs in the generated code.
enum Kind { kCallBack, kTileLanes, kRowLanes };

}  // namespace

std::string Cluster::native_source(int lanes) const {
  const int32_t count = static_cast<int32_t>(program_.size());
  // live_after[k]: slots read after per-tile instruction k (by later instructions, or by the
  // stores, sums and column sums that read the buffers after the program).
  std::vector<std::set<int16_t>> live_after(static_cast<size_t>(count));
  std::set<int16_t> live;
  for (const Store& st : stores_) live.insert(st.slot);
  if (total_slot_ >= 0) live.insert(total_slot_);
  if (column_slot_ >= 0) live.insert(column_slot_);
  for (int32_t k = count - 1; k >= 0; --k) {
    const Instr& in = program_[static_cast<size_t>(k)];
    live_after[static_cast<size_t>(k)] = live;
    if (in.invariant) continue;
    live.erase(in.dst);
    for (int16_t s : {in.a, in.b, in.c}) {
      if (s >= 0) live.insert(s);
    }
  }

  // A per-row value broadcast back over its row is read where it lies when no vector straddles
  // two rows (rows of a multiple of the lanes; tiles start at a row).
  const bool native_expand = row_ % lanes == 0;
  auto kind_of = [&](const Instr& in) {
    if ((exact_op(in) && !in.rows) || (in.expand && native_expand)) return kTileLanes;
    // Arithmetic on per-row values: one lane per row, when every tile's rows fill its n8 lanes.
    if (exact_op(in) && in.rows && row_ % 8 == 0) return kRowLanes;
    return kCallBack;
  };
  std::string body, prologue;
  std::set<int16_t> pointers, scalars;
  bool worth_it = false;
  int32_t k = 0;
  while (k < count) {
    const Instr& first = program_[static_cast<size_t>(k)];
    if (first.invariant) {
      ++k;
      continue;
    }
    const Kind kind = kind_of(first);
    if (kind == kCallBack) {
      body += "  step(ctx, " + std::to_string(k) + ");\n";
      ++k;
      continue;
    }
    // A segment: per-tile instructions of one kind from k (invariant ones in between skipped).
    std::string loop;
    std::vector<std::pair<int16_t, std::string>> current;  // slot -> the value it holds now
    auto value_of = [&](int16_t s) -> const std::string* {
      for (auto it = current.rbegin(); it != current.rend(); ++it) {
        if (it->first == s) return &it->second;
      }
      return nullptr;
    };
    int32_t last = k, natives = 0;
    for (; k < count; ++k) {
      const Instr& in = program_[static_cast<size_t>(k)];
      if (in.invariant) continue;
      if (kind_of(in) != kind) break;
      if (in.expand && value_of(in.a) != nullptr) break;  // per-row values come from memory
      std::string operands[3];
      const int16_t slots[3] = {in.a, in.b, in.c};
      for (int j = 0; j < (in.expand ? 0 : arity(in.op)); ++j) {
        const int16_t s = slots[j];
        if (in.fixed & (1 << j)) {  // tile-invariant: one value in every lane, read once per tile
          scalars.insert(s);
          operands[j] = "bc<F>(c" + std::to_string(s) + ")";
        } else if (const std::string* v = value_of(s)) {
          operands[j] = *v;
        } else {
          pointers.insert(s);
          operands[j] = "ld<F>(p" + std::to_string(s) + " + i)";
        }
      }
      const std::string name = "v" + std::to_string(k);
      std::string expr;
      if (in.expand) {
        pointers.insert(in.a);
        expr = "bc<F>(p" + std::to_string(in.a) + "[i / " + std::to_string(row_) + "])";
      } else {
        expr = native_expr(in.op, operands[0], operands[1], operands[2]);
        if (in.round == 1) expr = "rbf16<F>(" + expr + ")";  // a bfloat16 value
      }
      loop += "      const F " + name + " = " + expr + ";\n";
      current.emplace_back(in.dst, name);
      last = k;
      ++natives;
    }
    worth_it = worth_it || natives >= 2;
    // Store each slot's final value if something after the segment reads it.
    std::set<int16_t> stored;
    for (auto it = current.rbegin(); it != current.rend(); ++it) {
      if (!stored.insert(it->first).second || !live_after[static_cast<size_t>(last)].count(it->first)) continue;
      pointers.insert(it->first);
      loop += "      st<F>(p" + std::to_string(it->first) + " + i, " + it->second + ");\n";
    }
    body += "  {\n    auto lanes = [&](auto vector, long i) {\n      typedef decltype(vector) F;\n" + loop +
            "    };\n    long i = 0;\n";
    if (kind == kRowLanes) {  // the interpreter's rows8: the tile's rows rounded up to 8
      body += "    for (const long r8 = (n8 / " + std::to_string(row_) +
              " + 7) / 8 * 8; i < r8; i += 8) lanes(F8{}, i);\n  }\n";
      continue;
    }
    if (lanes == 16) body += "    for (; i + 16 <= n8; i += 16) lanes(F16{}, i);\n";
    body += "    for (; i < n8; i += 8) lanes(F8{}, i);\n  }\n";
  }
  if (!worth_it) return "";
  for (int16_t s : pointers) prologue += "  float* const p" + std::to_string(s) + " = s[" + std::to_string(s) + "];\n";
  for (int16_t s : scalars) prologue += "  const float c" + std::to_string(s) + " = s[" + std::to_string(s) + "][0];\n";
  return "extern \"C\" void NATIVE_TILE_FN(float* const* s, long n8, Step step, void* ctx) {\n" + prologue + body +
         "}\n";
}

}  // namespace torch_tpu::runtime::host
