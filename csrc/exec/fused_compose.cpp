// Composing a pending graph (fused_pending.h) into one program: the per-op graphs concatenated,
// reads through views and merged writes expressed as IR, stores placed, snapshots found.
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "common/check.h"
#include "exec/fused_pending.h"
#include "exec/view_geometry.h"

namespace torch_tpu::exec::fusion {
namespace {

bool is_view_like(ir::OpKind k) {
  return k == ir::OpKind::kParameter || k == ir::OpKind::kReshape || k == ir::OpKind::kTranspose ||
         k == ir::OpKind::kSlice || k == ir::OpKind::kBroadcastInDim || k == ir::OpKind::kConvert;
}

}  // namespace

std::shared_ptr<FusedProgram> compose(const Pending& p, const std::vector<uint8_t>& live) {
  auto fp = std::make_shared<FusedProgram>();
  ir::Graph& g = fp->graph;
  std::vector<std::vector<int32_t>> remap(p.ops.size());
  int32_t current_op = 0;
  auto add = [&](ir::Node n) {
    fp->node_op.push_back(current_op);
    return g.add(std::move(n));
  };
  auto param = [&](const ir::Node& like, int32_t slot) {
    ir::Node n = like;
    n.iattrs = {slot};
    return add(std::move(n));
  };
  auto node_of = [&](ir::OpKind kind, ir::DType dtype, std::vector<int64_t> shape, std::vector<int64_t> iattrs,
                     std::vector<int32_t> operands) {
    ir::Node n = view_node(kind, dtype, std::move(shape), std::move(iattrs));
    n.operands = std::move(operands);
    return add(std::move(n));
  };
  auto chain = [&](int32_t cur, const std::vector<ir::Node>& nodes) {
    for (ir::Node t : nodes) {
      t.operands = {cur};
      cur = add(std::move(t));
    }
    return cur;
  };
  // A merged value: the base value with the stored node written into the view's box
  // (reshape to the box layout, dynamic_update_slice, reshape back). Pure SSA, so building it
  // at its first reader is as good as at the write.
  std::vector<int32_t> merged(p.merges.size(), -1);
  std::function<int32_t(const Source&)> materialize = [&](const Source& s) -> int32_t {
    if (s.kind == Source::kValue) return remap[static_cast<size_t>(s.index)][static_cast<size_t>(s.node)];
    TPU_CHECK(s.kind == Source::kMerged, "fused mode: unexpected value source");
    int32_t& memo = merged[static_cast<size_t>(s.index)];
    if (memo >= 0) return memo;
    const Merge& mg = p.merges[static_cast<size_t>(s.index)];
    const int32_t w = materialize(mg.base);
    const ir::DType dtype = g.node(w).dtype;
    const int64_t n = c10::multiply_integers(mg.w_sizes);
    BoxLayout box;
    TPU_CHECK(box_layout(n, mg.v_offset - mg.w_offset, mg.v_sizes, mg.v_strides, box), "fused mode: bad merge");
    // The update, from view order into the box's (stride-sorted, trailing 1) shape.
    int32_t u = remap[static_cast<size_t>(mg.op)][static_cast<size_t>(mg.node)];
    if (g.node(u).dtype != dtype) u = node_of(ir::OpKind::kConvert, dtype, g.node(u).shape, {}, {u});
    std::vector<ir::Node> steps;
    Chain cu{dtype, g.node(u).shape, steps};
    const std::vector<int64_t> perm = view_order(box);
    std::vector<int64_t> in_view_order, inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      in_view_order.push_back(box.real[static_cast<size_t>(perm[i])].size);
      inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    }
    cu.reshape(in_view_order);
    cu.transpose(inverse);
    std::vector<int64_t> box_shape(box.start.size());
    for (size_t d = 0; d < box_shape.size(); ++d) box_shape[d] = box.limit[d] - box.start[d];
    cu.reshape(box_shape);
    u = chain(u, steps);
    steps.clear();
    Chain cw{dtype, mg.w_sizes, steps};
    cw.reshape({n});
    const int32_t flat = chain(w, steps);
    int32_t head = flat;
    if (box.len < n) head = node_of(ir::OpKind::kSlice, dtype, {box.len}, {0, box.len, 1}, {flat});
    int32_t based = head;
    if (box.base != std::vector<int64_t>{box.len}) based = node_of(ir::OpKind::kReshape, dtype, box.base, {}, {head});
    std::vector<int32_t> operands{based, u};
    for (int64_t st : box.start) operands.push_back(node_of(ir::OpKind::kConstant, ir::DType::kI64, {}, {st}, {}));
    int32_t upd = node_of(ir::OpKind::kDynamicUpdateSlice, dtype, box.base, {}, std::move(operands));
    if (box.base != std::vector<int64_t>{box.len}) upd = node_of(ir::OpKind::kReshape, dtype, {box.len}, {}, {upd});
    if (box.len < n) {
      int32_t tail = node_of(ir::OpKind::kSlice, dtype, {n - box.len}, {box.len, n, 1}, {flat});
      upd = node_of(ir::OpKind::kConcatenate, dtype, {n}, {0}, {upd, tail});
    }
    if (mg.w_sizes != std::vector<int64_t>{n}) upd = node_of(ir::OpKind::kReshape, dtype, mg.w_sizes, {}, {upd});
    memo = upd;
    return upd;
  };
  fp->store_node.assign(p.stores.size(), -1);
  std::vector<int32_t> store_pos(p.stores.size());  // the op position where each store happens
  for (size_t s = 0; s < p.stores.size(); ++s) store_pos[s] = p.stores[s].op;
  for (size_t k = 0; k < p.ops.size(); ++k) {
    current_op = static_cast<int32_t>(k);
    const PendingOp& op = p.ops[k];
    const ir::Graph& src = op.program->graph;
    auto& rm = remap[k];
    rm.resize(static_cast<size_t>(src.size()));
    for (int32_t i = 0; i < src.size(); ++i) {
      const ir::Node& node = src.node(i);
      if (node.kind != ir::OpKind::kParameter) {
        ir::Node copy = node;
        for (auto& o : copy.operands) o = rm[static_cast<size_t>(o)];
        rm[static_cast<size_t>(i)] = add(std::move(copy));
        continue;
      }
      const int64_t b = node.iattrs.at(0);
      if (b < 0) {
        rm[static_cast<size_t>(i)] = param(node, op.rng_slot + (b == ir::kRngSeedBinding ? 0 : 1));
        continue;
      }
      const Source& s = p.sources[static_cast<size_t>(op.source_begin + b)];
      if (s.kind == Source::kUnused) {
        rm[static_cast<size_t>(i)] = -1;  // nothing reads it
        continue;
      }
      if (s.kind == Source::kSlot) {
        rm[static_cast<size_t>(i)] = param(node, s.index);
        continue;
      }
      int32_t cur = materialize(s);
      if (s.transform >= 0) {
        for (ir::Node t : p.transforms[static_cast<size_t>(s.transform)]) {
          t.operands = {cur};
          cur = add(std::move(t));
        }
      }
      if (g.node(cur).shape != node.shape) {
        ir::Node r = view_node(ir::OpKind::kReshape, g.node(cur).dtype, node.shape, {});
        r.operands = {cur};
        cur = add(std::move(r));
      }
      if (g.node(cur).dtype != node.dtype) {
        ir::Node c = view_node(ir::OpKind::kConvert, node.dtype, node.shape, {});
        c.operands = {cur};
        cur = add(std::move(c));
      }
      rm[static_cast<size_t>(i)] = cur;
    }
    // A store of a value computed by an earlier op (or of a parameter, written when the run
    // starts) happens when that value is computed. That is only correct when no op in between
    // touches the destination's memory; otherwise an identity convert placed here writes it at
    // this op's position.
    for (size_t j = 0; j < op.program->outputs.size(); ++j) {
      const size_t s = static_cast<size_t>(op.store_begin) + j;
      if (!live[s]) continue;
      int32_t node = rm[static_cast<size_t>(op.program->outputs[j].node)];
      const bool param = g.node(node).kind == ir::OpKind::kParameter;
      const int32_t at = param ? 0 : fp->node_op[static_cast<size_t>(node)];
      if (at != current_op || param) {
        const c10::StorageImpl* target = p.stores[s].storage._unsafe_get_target();
        auto touched = [&](int32_t lo, int32_t hi) {  // loads in ops [lo, hi], other stores in [lo, hi)
          for (const Slot& slot : p.slots) {
            if (slot.storage == target && slot.op >= lo && slot.op <= hi) return true;
          }
          for (size_t t = 0; t < p.stores.size(); ++t) {
            if (t != s && live[t] && p.stores[t].storage._unsafe_get_target() == target && p.stores[t].op >= lo &&
                p.stores[t].op < hi) {
              return true;
            }
          }
          return false;
        };
        if (touched(at, current_op)) {
          ir::Node c = view_node(ir::OpKind::kConvert, g.node(node).dtype, g.node(node).shape, {});
          c.operands = {node};
          node = add(std::move(c));
        } else {
          store_pos[s] = param ? -1 : at;
        }
      }
      fp->store_node[s] = node;
    }
  }
  // Snapshots: a load whose memory a later op's store overwrites, while nodes at or after that
  // op still read the loaded value (or a view-like alias of it).
  std::vector<int32_t> root(static_cast<size_t>(g.size()), -1);
  std::vector<int32_t> last_use_op(p.slots.size(), -1);
  for (int32_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(i);
    if (n.kind == ir::OpKind::kParameter) {
      root[static_cast<size_t>(i)] = static_cast<int32_t>(n.iattrs[0]);
      continue;
    }
    for (int32_t o : n.operands) {
      int32_t r = root[static_cast<size_t>(o)];
      if (r >= 0) {
        last_use_op[static_cast<size_t>(r)] = std::max(last_use_op[static_cast<size_t>(r)], fp->node_op[static_cast<size_t>(i)]);
      }
    }
    if (is_view_like(n.kind) && !n.operands.empty()) root[static_cast<size_t>(i)] = root[static_cast<size_t>(n.operands[0])];
  }
  fp->snapshot.assign(p.slots.size(), 0);
  for (size_t j = 0; j < p.slots.size(); ++j) {
    const Slot& slot = p.slots[j];
    if (slot.storage == nullptr || last_use_op[j] < 0) continue;
    for (size_t s = 0; s < p.stores.size(); ++s) {
      if (!live[s] || p.stores[s].op <= slot.op || p.stores[s].storage._unsafe_get_target() != slot.storage) continue;
      if (store_pos[s] <= last_use_op[j]) fp->snapshot[j] = 1;
      break;
    }
  }
  std::vector<int32_t> outputs;
  for (int32_t node : fp->store_node) {
    if (node >= 0) outputs.push_back(node);
  }
  std::sort(outputs.begin(), outputs.end());
  outputs.erase(std::unique(outputs.begin(), outputs.end()), outputs.end());
  runtime::MemoryClasses memory;
  for (const Slot& slot : p.slots) memory.bindings.push_back(slot.memory_class);
  for (size_t s = 0; s < p.stores.size(); ++s) {
    if (live[s]) memory.outputs.emplace_back(fp->store_node[s], p.stores[s].memory_class);
  }
  fp->executable = selected_runtime().compile_with_memory(g, outputs, memory);
  fp->stats = fp->executable->stats();
  return fp;
}

}  // namespace torch_tpu::exec::fusion
