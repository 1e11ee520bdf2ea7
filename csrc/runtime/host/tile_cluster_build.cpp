// Tile clusters (tile_cluster.h): which IR nodes may join one, and building a cluster's tile
// program (slots, loads, splats, instructions, stores).
#include <algorithm>
#include <string>
#include <unordered_map>

#include "common/check.h"
#include "runtime/host/kernels.h"
#include "runtime/host/tile_math.h"

namespace torch_tpu::runtime::host {

using namespace tile;
using ir::DType;
using ir::OpKind;

namespace {

// Dtypes whose values the float tile buffers hold exactly.
bool exact(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kBool; }
bool exact_float(DType t) { return t != DType::kBool && exact(t); }

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

}  // namespace

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

}  // namespace torch_tpu::runtime::host
