// Planning a host program (executor.h): the constructor runs the planning passes in order, and
// the later ones (constant folding, view routes, in-place writes, releases and shared-run
// tables) are here; the partition into steps and clusters is step_partition.cpp.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_set>
#include <vector>

#include "common/check.h"
#include "compiler/passes/constant_values.h"
#include "compiler/passes/liveness.h"
#include "compiler/passes/verify_pass.h"
#include "compiler/passes/view_chains.h"
#include "runtime/host/concat_reshapes.h"
#include "runtime/host/executor.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/internal_dispatch.h"

namespace torch_tpu::runtime::host {
namespace {

// Whether a step is large enough that its kernel splits across the kernel threads
// (kernel_threads.h), by the size its kernel passes to split_parts: a cluster's split_work, a
// contraction's multiply-adds / kMultiplyAddsPerElement, any other kernel's output elements.
bool splits(const ir::Graph& g, int32_t id, const Cluster* cluster) {
  if (cluster != nullptr) return cluster->split_work() >= kSplitMinElements;
  const int64_t macs = contraction_macs(g, id);
  const int64_t work = macs > 0 ? macs / kMultiplyAddsPerElement : c10::multiply_integers(g.node(id).shape);
  return work >= kSplitMinElements;
}

}  // namespace

HostExecutable::HostExecutable(const ir::Graph& input_graph, const std::vector<int32_t>& outputs, HostOptions options)
    : num_nodes_(input_graph.size()) {
  InternalDispatchGuard guard;
  const auto n = static_cast<size_t>(num_nodes_);
  node_dtype_.resize(n);
  output_shape_.resize(n);
  is_output_.assign(n, false);
  node_names_.resize(n);
  for (int32_t o : outputs) {
    TPU_CHECK(o >= 0 && o < num_nodes_, "host runtime: output node ", o, " not in a graph of ",
              num_nodes_, " nodes");
    is_output_[o] = true;
    output_shape_[o] = input_graph.node(o).shape;
  }
  KernelForms forms;
  const ir::Graph graph = rewrite(input_graph, forms, options.verify);  // view chains collapsed, host rewrites
  // Only live nodes become steps; each value is released after its last live reader.
  const compiler::passes::Liveness liveness = compiler::passes::liveness(graph, is_output_);
  Partition part = partition(graph, liveness, forms, options);  // kernel steps and clusters
  fold_constants(graph, part.step_of);                     // steps of constant values run once, here
  plan_view_routes(graph, outputs, part.step_of);          // outputs that view a step's value
  plan_in_place(graph, liveness, part);                    // in-place elementwise updates
  plan_in_place_scatters(graph, liveness, outputs, part);  // scatters into their own operand
  schedule(graph, liveness, part);                         // releases, and the shared runs' tables
}

// Each view node left is a step: collapse chains of them first (compiler/passes/view_chains.h),
// then let concatenates copy their reshaped operands' sources (concat_reshapes.h), transposed
// convolutions read their weights unflipped, products take their bias adds and their readers'
// layouts (kernels.h). Node ids are kept. Only the collapse is verified: the host rewrites
// write forms the IR verifier rejects by design (a concatenate reading a reshape's source, a
// dot_general with a bias operand), which only the kernels of `forms` read.
ir::Graph HostExecutable::rewrite(const ir::Graph& input_graph, KernelForms& forms, bool verify) const {
  ir::Graph graph = compiler::passes::collapse_view_chains(input_graph, is_output_);
  if (verify) compiler::passes::verify_pass_output(graph, "collapse_view_chains");
  graph = absorb_concat_reshapes(graph, is_output_, forms.concat_shapes);
  graph = absorb_weight_flips(graph, is_output_, forms.unflipped);
  graph = absorb_bias_adds(graph, is_output_, forms.products);
  product_layouts(graph, is_output_, forms.products);
  return graph;
}

// Constant folding: a kernel step whose operands are all folded values (a constant or an iota
// has none) computes the same value on every run. It runs once here; run() binds the result
// like a parameter. In a TinyGPT training step that removed ~130 steps of ~1 us each (scalar
// constants read by kernels, the causal mask's iotas and compare). Results larger than
// kMaxFoldedBytes stay steps: a broadcast constant materialized once per executable would
// hold its memory for the executable's lifetime.
void HostExecutable::fold_constants(const ir::Graph& graph, std::vector<int32_t>& step_of) {
  // Candidates: the graph's constant values (compiler/passes/constant_values.h). A candidate
  // kernel step folds when its operands did (each evaluated here without error, small enough).
  const std::vector<bool> constant = compiler::passes::constant_values(graph);
  Values values(static_cast<size_t>(num_nodes_));
  std::vector<int32_t> new_index(steps_.size(), -1);
  std::vector<Step> kept;
  kept.reserve(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& s = steps_[i];
    const ir::Node& node = graph.node(s.node);
    bool fold = !s.cluster && constant[static_cast<size_t>(s.node)] &&
                std::all_of(node.operands.begin(), node.operands.end(), [&](int32_t o) { return values[o].defined(); });
    if (fold) {
      at::Tensor v;
      try {
        v = s.kernel(values, nullptr);
      } catch (const std::exception&) {  // raised again at run time, where it belongs
        fold = false;
      }
      fold = fold && v.defined() && v.storage().nbytes() <= kMaxFoldedBytes;
      if (fold && is_output_[static_cast<size_t>(s.node)]) {
        // An output stays a step (later constants still fold from its value): a folded
        // output would be written when the run starts, before earlier steps read or write
        // the memory it shares with them (a fused `y[1:].zero_()` after `a = y * 2`).
        values[s.node] = std::move(v);
        fold = false;
      }
      if (fold) {
        values[s.node] = v;
        folded_.emplace_back(s.node, std::move(v));
        step_of[s.node] = -1;
        continue;
      }
    }
    new_index[i] = static_cast<int32_t>(kept.size());
    kept.push_back(std::move(s));
  }
  steps_ = std::move(kept);
  for (int32_t& st : step_of) {
    if (st >= 0) st = new_index[static_cast<size_t>(st)];
  }
}

void HostExecutable::plan_view_routes(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                                      const std::vector<int32_t>& step_of) {
  const auto n = static_cast<size_t>(num_nodes_);
  // Outputs that view a value some step computes (ViewRoute).
  view_route_of_.assign(n, -1);
  auto is_view = [&](int32_t i) {
    const ir::OpKind k = graph.node(i).kind;
    return step_of[i] >= 0 && (k == ir::OpKind::kReshape || k == ir::OpKind::kTranspose);
  };
  for (int32_t o : outputs) {
    if (view_route_of_[o] >= 0 || !is_view(o)) continue;
    ViewRoute route;
    int32_t x = o;
    for (; is_view(x); x = graph.node(x).operands[0]) {
      const ir::Node& xn = graph.node(x);
      if (xn.kind == ir::OpKind::kReshape) {
        route.undo.push_back({true, graph.node(xn.operands[0]).shape});
      } else {
        std::vector<int64_t> inverse(xn.iattrs.size());
        for (size_t d = 0; d < inverse.size(); ++d)
          inverse[static_cast<size_t>(xn.iattrs[d])] = static_cast<int64_t>(d);
        route.undo.push_back({false, std::move(inverse)});
      }
    }
    if (step_of[x] < 0) continue;  // a parameter or a folded value: nothing to compute
    route.source = x;
    view_route_of_[o] = static_cast<int32_t>(view_routes_.size());
    view_routes_.push_back(std::move(route));
  }
}

void HostExecutable::plan_in_place(const ir::Graph& graph, const compiler::passes::Liveness& liveness,
                                   const Partition& part) {
  const auto n = static_cast<size_t>(num_nodes_);
  const std::vector<std::vector<int32_t>>& readers = liveness.readers;
  const std::vector<int32_t>& cluster_of = part.cluster_of;
  const std::vector<std::shared_ptr<Cluster>>& clusters = part.clusters;
  // In-place elementwise updates (`x.mul_(y)`, an optimizer's `p.add_(u)`): an output stored by a
  // plain cluster may be written straight into memory that an input binding also names, with
  // the same layout, when every reader of that input is an elementwise member of the same
  // cluster. Each tile then reads its elements before it writes the same elements, so the
  // result is that of computing aside and copying, without the copy.
  store_cluster_.assign(n, -1);
  for (const Step& s : steps_) {
    if (!s.cluster || s.cluster->lead_rank() >= 0) continue;
    for (int32_t m : s.cluster->stores()) store_cluster_[m] = cluster_of[m];
  }
  constexpr int32_t kUnseen = -2;
  reader_cluster_.assign(reads_binding_.size(), kUnseen);
  for (const Param& p : params_) {
    if (p.binding < 0) continue;
    const auto& rs = readers[p.node];
    int32_t c = rs.empty() || is_output_[p.node] ? -1 : cluster_of[rs.front()];
    for (int32_t r : rs) {
      if (cluster_of[r] != c || graph.node(r).kind == ir::OpKind::kBroadcastInDim) c = -1;
    }
    if (c >= 0 && (clusters[c]->lead_rank() >= 0 || p.shape != clusters[c]->shape())) c = -1;
    // A binding several parameters read qualifies only when all of them name the same cluster.
    int32_t& rc = reader_cluster_[p.binding];
    rc = rc == kUnseen || rc == c ? c : -1;
  }
}

// In-place scatters (`cache.index_put_(idx, v)`, `index_copy_`): the output is a scatter's value,
// or a reshape / transpose chain of it, and the scatter's operand is a parameter (or such a chain
// of one) that nothing else reads. When the parameter's binding is exactly the output's
// destination (decided per run, scatter_in_place_ok), the output is written directly (lent
// through its ViewRoute when it views the scatter) and the scatter kernel updates only the
// indexed elements of that memory (kernels_data.cpp, scatter_target). Computing aside instead
// copied the whole tensor twice per call: a vLLM KV cache write of a few rows copied 32 MiB
// per layer. Nothing else reads the old contents, so writing them early changes no result; a
// scatter whose index or updates read the operand's chain, or a binding that other parameters
// read too, is left alone.
void HostExecutable::plan_in_place_scatters(const ir::Graph& graph, const compiler::passes::Liveness& liveness,
                                            const std::vector<int32_t>& outputs, const Partition& part) {
  scatter_binding_.assign(static_cast<size_t>(num_nodes_), -1);
  const std::vector<std::vector<int32_t>>& readers = liveness.readers;
  auto is_view = [&](int32_t i) {
    const ir::OpKind k = graph.node(i).kind;
    return part.step_of[i] >= 0 && part.cluster_of[i] < 0 && (k == ir::OpKind::kReshape || k == ir::OpKind::kTranspose);
  };
  std::vector<int64_t> binding_of(static_cast<size_t>(num_nodes_), -1);  // per parameter node
  std::vector<int32_t> params_of_binding(reads_binding_.size(), 0);
  for (const Param& p : params_) {
    if (p.binding < 0) continue;
    binding_of[p.node] = p.binding;
    ++params_of_binding[p.binding];
  }
  for (int32_t o : outputs) {
    int32_t s = o;
    while (is_view(s)) s = graph.node(s).operands[0];
    const ir::Node& scatter = graph.node(s);
    if (scatter.kind != ir::OpKind::kScatter || part.step_of[s] < 0 || part.cluster_of[s] >= 0) continue;
    const int32_t operand = scatter.operands[0];
    if (scatter.operands[1] == operand || scatter.operands[2] == operand) continue;
    int32_t x = operand, reader = s;
    bool alone = true;  // each link of the chain read by the next one only, and no output
    for (;; reader = x, x = graph.node(x).operands[0]) {
      alone = alone && !is_output_[x] && readers[x].size() == 1 && readers[x][0] == reader;
      if (!alone || !is_view(x)) break;
    }
    const int64_t b = binding_of[x];
    if (alone && b >= 0 && params_of_binding[b] == 1) scatter_binding_[o] = b;
  }
}

void HostExecutable::schedule(const ir::Graph& graph, const compiler::passes::Liveness& liveness,
                              const Partition& part) {
  const auto n = static_cast<size_t>(num_nodes_);
  const std::vector<bool>& live = liveness.live;
  const std::vector<std::vector<int32_t>>& readers = liveness.readers;
  const std::vector<int32_t>& step_of = part.step_of;
  const std::vector<bool>& recomputed = part.recomputed;
  // The steps that read a value through a node: its own step, or for a recomputed scalar
  // every cluster that computes it (never materialized, so no value of its own).
  std::vector<std::vector<int32_t>> recomputed_steps(n);
  for (size_t k = 0; k < steps_.size(); ++k) {
    if (!steps_[k].cluster) continue;
    for (int32_t m : steps_[k].cluster->members()) {
      if (recomputed[m]) recomputed_steps[m].push_back(static_cast<int32_t>(k));
    }
  }
  auto for_each_reading_step = [&](int32_t r, auto fn) {
    if (!recomputed[r]) return fn(step_of[r]);
    for (int32_t k : recomputed_steps[r]) fn(k);
  };

  // Release each value after the last step (in run order) that reads it; a value nobody reads
  // (an output only) right after the step that defines it.
  for (int32_t v = 0; v < num_nodes_; ++v) {
    if (!live[v] || recomputed[v]) continue;
    int32_t at_step = step_of[v];
    for (int32_t r : readers[v]) for_each_reading_step(r, [&](int32_t k) { at_step = std::max(at_step, k); });
    if (at_step >= 0) steps_[at_step].release.push_back(v);
  }

  // For runs shared with a waiting thread (SharedRun): per step, the values it reads from
  // other steps or parameters and the steps that define them; per value, how many steps read
  // it; values no other step reads go with their own step (released when it finishes).
  step_of_node_ = step_of;
  for (Step& st : steps_) {  // failure containment (run_cluster_contained)
    if (!st.cluster) continue;
    auto deps = std::make_shared<ClusterDeps>();
    std::vector<int32_t> seen;
    for (int32_t m : st.cluster->members()) {
      const auto& ops = graph.node(m).operands;
      deps->member_operands.emplace_back(m, std::vector<int32_t>(ops.begin(), ops.end()));
      for (int32_t v : ops) {
        const auto& members = st.cluster->members();
        if (std::find(members.begin(), members.end(), v) != members.end() ||
            std::find(seen.begin(), seen.end(), v) != seen.end()) {
          continue;
        }
        seen.push_back(v);
        const ir::Node& in = graph.node(v);
        deps->inputs.push_back({v, std::vector<int64_t>(in.shape.begin(), in.shape.end()), node_dtype_[v]});
      }
    }
    st.deps = std::move(deps);
  }
  value_readers_.assign(n, 0);
  std::vector<std::vector<int32_t>> step_reads(steps_.size());
  for (int32_t v = 0; v < num_nodes_; ++v) {
    if (!live[v] || recomputed[v]) continue;
    for (int32_t r : readers[v]) {
      for_each_reading_step(r, [&](int32_t rs) {
        if (rs < 0 || rs == step_of[v]) return;
        auto& reads = step_reads[static_cast<size_t>(rs)];
        if (reads.empty() || reads.back() != v) reads.push_back(v);
      });
    }
  }
  for (const Step& st : steps_) helper_may_run_.push_back(!splits(graph, st.node, st.cluster.get()));
  dep_begin_.push_back(0);
  read_begin_.push_back(0);
  orphan_begin_.push_back(0);
  for (size_t i = 0; i < steps_.size(); ++i) {
    std::vector<int32_t> deps;
    for (int32_t v : step_reads[i]) {
      reads_.push_back(v);
      ++value_readers_[v];
      if (step_of[v] >= 0) deps.push_back(step_of[v]);
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    deps_.insert(deps_.end(), deps.begin(), deps.end());
    dep_begin_.push_back(static_cast<int32_t>(deps_.size()));
    read_begin_.push_back(static_cast<int32_t>(reads_.size()));
  }
  std::vector<std::vector<int32_t>> orphans(steps_.size());
  for (int32_t v = 0; v < num_nodes_; ++v) {
    if (live[v] && step_of[v] >= 0 && value_readers_[v] == 0) orphans[static_cast<size_t>(step_of[v])].push_back(v);
  }
  for (const auto& o : orphans) {
    orphans_.insert(orphans_.end(), o.begin(), o.end());
    orphan_begin_.push_back(static_cast<int32_t>(orphans_.size()));
  }
}

}  // namespace torch_tpu::runtime::host
