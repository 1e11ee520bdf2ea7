// Partitioning a host program's live nodes into kernel steps and fused clusters (executor.h:
// the closing rules, recomputed scalars, memory classes, row clusters, pull-ahead).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "ir/printer.h"
#include "runtime/host/column_sums.h"
#include "runtime/host/executor.h"

namespace torch_tpu::runtime::host {
namespace {

// The longest 0-d chain a cluster recomputes for one broadcast (members, repeats counted).
constexpr int64_t kMaxRecomputedScalars = 24;

// Which nodes are recomputed scalars (see the header): 0-d elementwise nodes, no outputs,
// whose every reader is another such node or a broadcast_in_dim a cluster can hold, in chains
// of at most kMaxRecomputedScalars. Dropping a node can disqualify its operands (a reader is
// no longer recomputed) and its readers (their chain grows), hence the fixed point.
std::vector<bool> recomputed_scalars(const ir::Graph& g, const std::vector<bool>& live,
                                     const std::vector<std::vector<int32_t>>& readers,
                                     const std::vector<bool>& is_output) {
  const int32_t n = g.size();
  std::vector<bool> yes(static_cast<size_t>(n), false);
  for (int32_t i = 0; i < n; ++i) {
    const ir::Node& node = g.node(i);
    yes[i] =
        live[i] && !is_output[i] && node.shape.empty() && node.kind != ir::OpKind::kBroadcastInDim && is_fusible(g, i);
  }
  std::vector<int64_t> chain(static_cast<size_t>(n), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = n - 1; i >= 0; --i) {
      if (!yes[i]) continue;
      const bool ok = !readers[i].empty() && std::all_of(readers[i].begin(), readers[i].end(), [&](int32_t r) {
        const ir::Node& rn = g.node(r);
        return yes[r] ||
               (rn.kind == ir::OpKind::kBroadcastInDim && is_fusible(g, r) && Cluster::can_hold_scalars(rn.shape));
      });
      if (!ok) {
        yes[i] = false;
        changed = true;
      }
    }
    for (int32_t i = 0; i < n; ++i) {
      if (!yes[i]) continue;
      chain[i] = 1;
      for (int32_t o : g.node(i).operands) chain[i] += yes[o] ? chain[o] : 0;
      if (chain[i] > kMaxRecomputedScalars) {
        yes[i] = false;
        changed = true;
      }
    }
  }
  return yes;
}

// Adding an op to ir/ops.h must give it a host kernel in one of the makers below (kernels_*.cpp);
// one without raises NotImplementedError at compile time, which tests/ir would catch only if it
// tested the op.
static_assert(ir::kNumOpKinds == 75, "new IR op: add its host kernel (runtime/host/kernels_*.cpp)");
Kernel make_kernel(const ir::Graph& g, int32_t id) {
  for (auto make : {make_elementwise_kernel, make_rng_kernel, make_data_kernel, make_reduce_kernel,
                    make_contract_kernel, make_linalg_kernel}) {
    if (Kernel k = make(g, id)) return k;
  }
  TPU_CHECK_NOT_IMPLEMENTED(false, "host runtime: no kernel for ", ir::node_to_string(g, id));
}

}  // namespace

HostExecutable::Partition HostExecutable::partition(const ir::Graph& graph, const compiler::passes::Liveness& liveness,
                                                    const KernelForms& forms, const HostOptions& options) {
  const auto n = static_cast<size_t>(num_nodes_);
  const std::vector<bool>& live = liveness.live;
  const std::vector<std::vector<int32_t>>& readers = liveness.readers;
  const ConcatOperandShapes& concat_shapes = forms.concat_shapes;
  const std::unordered_set<int32_t>& unflipped = forms.unflipped;
  const ProductForms& products = forms.products;
  Partition part;
  // 0-d chains that only feed broadcasts run inside each cluster that broadcasts them.
  part.recomputed =
      options.fuse ? recomputed_scalars(graph, live, readers, is_output_) : std::vector<bool>(n, false);
  const std::vector<bool>& recomputed = part.recomputed;
  std::vector<int32_t> recomputed_in(n, -1);  // the last cluster given the node's chain
  std::vector<int32_t> chain;                 // scratch: one broadcast's chain

  // Partition into kernel steps and clusters (see the header for the closing rules).
  std::vector<int32_t>& step_of = part.step_of;
  std::vector<int32_t>& cluster_of = part.cluster_of;  // index into `clusters`
  std::vector<std::shared_ptr<Cluster>>& clusters = part.clusters;
  step_of.assign(n, -1);
  cluster_of.assign(n, -1);
  std::vector<bool> open;
  auto open_cluster = [&](const std::vector<int64_t>& shape) {
    clusters.push_back(std::make_shared<Cluster>(shape));
    open.push_back(true);
    return static_cast<int32_t>(clusters.size()) - 1;
  };
  auto emit_kernel = [&](int32_t i) {
    step_of[i] = static_cast<int32_t>(steps_.size());
    auto concat = concat_shapes.find(i);
    auto product = products.find(i);
    steps_.push_back({i,
                      concat != concat_shapes.end() ? make_concat_kernel(graph, i, concat->second)
                      : unflipped.count(i)          ? make_unflipped_kernel(graph, i)
                      : product != products.end()   ? make_product_kernel(graph, i, product->second)
                                                    : make_kernel(graph, i),
                      nullptr,
                      {}});
  };
  auto close = [&](int32_t c) {
    if (!open[c]) return;
    open[c] = false;
    Cluster& cl = *clusters[c];
    if (cl.members().size() == 1) {
      emit_kernel(cl.members()[0]);
      cluster_of[cl.members()[0]] = -1;
      return;
    }
    // Later nodes can no longer join, so a reader outside the cluster is final.
    cl.finalize(graph, [&](int32_t m) {
      if (recomputed[m]) return false;  // every reader computes it again
      if (is_output_[m]) return true;
      return std::any_of(readers[m].begin(), readers[m].end(),
                         [&](int32_t r) { return cluster_of[r] != c; });
    });
    for (int32_t m : cl.members()) {
      if (!recomputed[m]) step_of[m] = static_cast<int32_t>(steps_.size());
    }
    steps_.push_back({cl.members().back(), {}, clusters[c], {}});
  };
  auto close_reading = [&](const ir::Node& node, int32_t except) {
    for (int32_t o : node.operands) {
      if (cluster_of[o] >= 0 && cluster_of[o] != except) close(cluster_of[o]);
    }
  };
  auto close_all = [&](int32_t except) {
    for (size_t c = 0; c < clusters.size(); ++c) {
      if (static_cast<int32_t>(c) != except) close(static_cast<int32_t>(c));
    }
  };
  // Memory classes (runtime.h) of the parameters and outputs, when the caller knows them.
  constexpr int32_t kUnknown = MemoryClasses::kUnknownMemory;
  std::vector<int32_t> memory_class;
  std::vector<bool> in_memory;  // a parameter, an output, or a view kernel's value of one of those
  if (options.memory != nullptr) {
    memory_class.assign(n, kUnknown);
    in_memory.assign(n, false);
    std::vector<bool> assigned(n, false);
    auto assign = [&](int32_t node, int32_t cls) {
      if (assigned[node] && memory_class[node] != cls) cls = kUnknown;  // two memories: either
      memory_class[node] = cls;
      assigned[node] = true;
    };
    for (int32_t i = 0; i < num_nodes_; ++i) {
      const ir::Node& node = graph.node(i);
      if (node.kind != ir::OpKind::kParameter) continue;
      const int64_t b = node.iattrs.at(0);
      const auto& bindings = options.memory->bindings;
      assign(i, b >= 0 && b < static_cast<int64_t>(bindings.size()) ? bindings[b] : kUnknown);
    }
    for (auto [node, cls] : options.memory->outputs) {
      if (node >= 0 && node < num_nodes_) assign(node, cls);
    }
    for (int32_t i = 0; i < num_nodes_; ++i) {
      const ir::Node& node = graph.node(i);
      in_memory[i] = node.kind == ir::OpKind::kParameter || is_output_[i];
      // Host kernels of these return views of their operand (a convert to the same dtype, the
      // operand itself): a cluster reading the value reads the operand's memory. The compile
      // backend's snapshot analysis uses the same list (lower_graph.py, _ALIASING_OPS).
      const bool view = node.kind == ir::OpKind::kReshape || node.kind == ir::OpKind::kTranspose ||
                        node.kind == ir::OpKind::kBroadcastInDim || node.kind == ir::OpKind::kSlice ||
                        node.kind == ir::OpKind::kDynamicSlice || node.kind == ir::OpKind::kConvert;
      if (view && !node.operands.empty() && in_memory[node.operands[0]]) {
        assign(i, memory_class[node.operands[0]]);
        in_memory[i] = true;
      }
    }
  }
  // Clusters write their outputs when they run, which is when they are closed. An output
  // therefore closes the other open clusters that read memory it may overwrite (a parameter,
  // or an output's value, of its memory class) or write memory it may overlap, so their reads
  // and writes keep their program order. Knowing nothing about memory, that is all of them;
  // knowing it, an optimizer's independent per-parameter chains stay open and fuse across ops.
  auto touches = [&](int32_t c, int32_t cls) {
    auto may_share = [&](int32_t v) {
      return cls == kUnknown || memory_class[v] == kUnknown || memory_class[v] == cls;
    };
    for (int32_t m : clusters[c]->members()) {
      if (is_output_[m] && may_share(m)) return true;
      for (int32_t o : graph.node(m).operands) {
        if (in_memory[o] && may_share(o)) return true;
      }
    }
    return false;
  };
  auto close_for_output = [&](int32_t i, int32_t except) {
    if (memory_class.empty()) return close_all(except);
    for (size_t c = 0; c < clusters.size(); ++c) {
      const auto k = static_cast<int32_t>(c);
      if (k != except && open[c] && touches(k, memory_class[i])) close(k);
    }
  };
  // Row clusters (tile_cluster.h): a reduction of a cluster member, the arithmetic on its result and
  // the broadcast back join that cluster instead of closing it. An open plain cluster of the
  // reduced shape that such a node reads (e.g. a broadcast constant divisor) is merged in.
  auto join_row_cluster = [&](int32_t i) {
    const ir::Node& node = graph.node(i);
    for (int32_t o : node.operands) {
      const int32_t c = cluster_of[o];
      if (c < 0 || !open[c] || clusters[c]->members().size() >= kMaxClusterNodes) continue;
      Cluster& cl = *clusters[c];
      if (!cl.add_row_member(graph, i, [&](int32_t v) { return cluster_of[v] == c; })) continue;
      for (int32_t p : node.operands) {
        const int32_t d = cluster_of[p];
        if (d < 0 || d == c || !open[d] || !cl.can_absorb(*clusters[d])) continue;
        const auto& ms = clusters[d]->members();
        if (std::any_of(ms.begin(), ms.end(), [&](int32_t m) { return is_output_[m]; })) continue;
        // The reduce member was just appended; the absorbed members precede it in the program.
        cl.absorb_before_last(*clusters[d]);
        for (int32_t m : ms) cluster_of[m] = c;
        open[d] = false;
      }
      close_reading(node, c);
      if (is_output_[i]) close_for_output(i, c);
      cluster_of[i] = c;
      return true;
    }
    return false;
  };
  // Before a kernel step closes an open plain cluster it reads, the next few elementwise nodes
  // of that cluster's shape whose operands are all computed by then (members of the cluster,
  // or values placed before the kernel) join the cluster first. Batch norm's backward summed a
  // cluster's value per channel (then a kernel; now a column sum, tile_cluster.h) and then
  // multiplied two of its values: the product ran as a kernel of its own, a pass over memory.
  // Any kernel reading an open cluster still gets this. Outputs never move (write order).
  constexpr int32_t kPullAhead = 8;
  std::vector<bool> pulled(n, false);
  auto pull_ahead = [&](int32_t c, int32_t at) {
    Cluster& cl = *clusters[c];
    if (cl.lead_rank() >= 0) return;
    for (int32_t j = at + 1; j < std::min(num_nodes_, at + 1 + kPullAhead); ++j) {
      const ir::Node& nj = graph.node(j);
      // A node already placed (pulled for another operand of the same kernel) joins nothing again.
      if (!live[j] || pulled[j] || cluster_of[j] >= 0 || is_output_[j] || nj.kind == ir::OpKind::kBroadcastInDim ||
          nj.shape != cl.shape() || !is_fusible(graph, j) || cl.members().size() >= kMaxClusterNodes) {
        continue;
      }
      bool reads_member = false, ready = true;
      for (int32_t o : nj.operands) {
        if (cluster_of[o] == c) {
          reads_member = true;
        } else if (o >= at || (cluster_of[o] >= 0 && open[cluster_of[o]])) {  // not computed yet, or still open
          ready = false;
        }
      }
      if (!ready || !reads_member) continue;
      cl.add(j);
      cluster_of[j] = c;
      pulled[j] = true;
    }
  };
  for (int32_t i = 0; i < num_nodes_; ++i) {
    const ir::Node& node = graph.node(i);
    node_dtype_[i] = to_aten(node.dtype);
    if (!live[i]) continue;
    node_names_[i] = "%" + std::to_string(i) + " " + ir::op_name(node.kind);
    if (pulled[i] || recomputed[i]) continue;  // placed in a cluster ahead of its position
    if (node.kind == ir::OpKind::kParameter) {
      params_.push_back({i, node.iattrs.at(0), to_aten(node.dtype), node.shape});
      if (int64_t b = node.iattrs.at(0); b >= 0) {
        if (reads_binding_.size() <= static_cast<size_t>(b)) reads_binding_.resize(b + 1, false);
        reads_binding_[b] = true;
      }
      continue;
    }
    if (options.fuse && (is_total_sum(graph, i) || column_sum_kept(graph, i))) {
      // A sum over everything, or over the dims around a kept range, of a plain cluster's
      // member ends that cluster (tile_cluster.h).
      const int32_t c = cluster_of[node.operands[0]];
      if (c >= 0 && open[c] && clusters[c]->add_closing_sum(graph, i, [&](int32_t v) { return cluster_of[v] == c; })) {
        cluster_of[i] = c;
        if (is_output_[i]) close_for_output(i, c);
        close(c);
        continue;
      }
    }
    if (options.fuse && join_row_cluster(i)) continue;
    if (options.fuse && row_reduce_lead_rank(graph, i) >= 0) {
      // A row reduce of a value no open cluster holds starts a row cluster of its own.
      close_reading(node, -1);
      if (is_output_[i]) close_for_output(i, -1);
      const int32_t c = open_cluster(graph.node(node.operands[0]).shape);
      TPU_CHECK(clusters[c]->start_row(graph, i), "host runtime: cannot start a row cluster at %", i);
      cluster_of[i] = c;
      continue;
    }
    if (!options.fuse || !is_fusible(graph, i)) {
      if (options.fuse) {
        for (int32_t o : node.operands) {
          if (cluster_of[o] >= 0 && open[cluster_of[o]]) pull_ahead(cluster_of[o], i);
        }
      }
      close_reading(node, -1);
      if (is_output_[i]) close_for_output(i, -1);
      emit_kernel(i);
      continue;
    }
    int32_t c = -1;
    for (size_t k = 0; k < clusters.size() && c < 0; ++k) {
      if (open[k] && clusters[k]->shape() == node.shape) c = static_cast<int32_t>(k);
    }
    // A broadcast reads its operand from full-size memory (stride 0), even in its own shape.
    if (node.kind == ir::OpKind::kBroadcastInDim && recomputed[node.operands[0]]) {
      // The chain of the 0-d value, in node order, minus what this cluster already computes.
      chain.assign(1, node.operands[0]);
      for (size_t k = 0; k < chain.size(); ++k) {
        for (int32_t o : graph.node(chain[k]).operands) {
          if (recomputed[o] && std::find(chain.begin(), chain.end(), o) == chain.end()) chain.push_back(o);
        }
      }
      std::sort(chain.begin(), chain.end());
      const auto missing =
          std::count_if(chain.begin(), chain.end(), [&](int32_t m) { return c < 0 || recomputed_in[m] != c; });
      if (c >= 0 && clusters[c]->members().size() + static_cast<size_t>(missing) + 1 > kMaxClusterNodes) {
        close(c);
        c = -1;
      }
      if (c < 0) c = open_cluster(node.shape);
      for (int32_t m : chain) {
        if (recomputed_in[m] == c) continue;
        close_reading(graph.node(m), c);  // its inputs computed first
        clusters[c]->add(m);
        recomputed_in[m] = c;
      }
    } else if (node.kind == ir::OpKind::kBroadcastInDim) {
      int32_t oc = cluster_of[node.operands[0]];
      // Never into an empty shape (Cluster::can_hold_scalars): var_mean's mean of an empty bf16
      // tensor, converted back to bf16 by a later node, was read uninitialized.
      const bool fold = oc >= 0 && oc != c && open[oc] && Cluster::can_hold_scalars(node.shape) &&
                        clusters[oc]->shape().empty() &&
                        std::none_of(clusters[oc]->members().begin(), clusters[oc]->members().end(),
                                     [&](int32_t m) { return is_output_[m]; });
      if (fold) {
        // A 0-d value (a Python scalar's convert, say) runs inside the cluster that broadcasts it.
        if (c >= 0 && !clusters[c]->can_absorb_scalars(*clusters[oc])) {
          close(c);
          c = -1;
        }
        if (c < 0) c = open_cluster(node.shape);
        clusters[c]->absorb(*clusters[oc]);
        for (int32_t m : clusters[oc]->members()) cluster_of[m] = c;
        open[oc] = false;
      } else {
        if (oc >= 0) close(oc);
        if (oc == c) c = -1;
      }
    }
    close_reading(node, c);
    if (c >= 0 && clusters[c]->members().size() >= kMaxClusterNodes) close(c);
    if (c >= 0 && !open[c]) c = -1;
    if (c < 0) c = open_cluster(node.shape);
    if (is_output_[i]) close_for_output(i, c);
    clusters[c]->add(i);
    cluster_of[i] = c;
  }
  close_all(-1);
  return part;
}

}  // namespace torch_tpu::runtime::host
