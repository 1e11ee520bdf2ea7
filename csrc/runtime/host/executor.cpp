#include "runtime/host/executor.h"

#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorUtils.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/check.h"
#include "ir/printer.h"
#include "ir/view_chains.h"
#include "runtime/host/concat_reshapes.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/scratch_allocator.h"
#include "runtime/host/strided_copy.h"
#include "runtime/internal_dispatch.h"

namespace torch_tpu::runtime {
namespace host {
namespace {

static_assert(static_cast<int>(ir::DType::kBF16) == static_cast<int>(at::ScalarType::BFloat16));
static_assert(static_cast<int>(ir::DType::kBool) == static_cast<int>(at::ScalarType::Bool));
static_assert(static_cast<int>(ir::DType::kF16) == static_cast<int>(at::ScalarType::Half));
static_assert(static_cast<int>(ir::DType::kU8) == static_cast<int>(at::ScalarType::Byte));

std::string shape_str(c10::IntArrayRef s) { return c10::str(s); }

// Tensors of earlier runs, recycled per thread: at::from_blob allocates a StorageImpl and a
// TensorImpl for each binding of each run, and a 0-d scalar is an allocated tensor too (a
// compiled AdamW step binds ~300 of them). A tensor that only the pool still references (its
// storage too: the run's values, views and outputs that used it are gone) is reused: a
// binding's wrapper is pointed at the new memory, a scalar's value is written into it.
class RecycledTensors {
 public:
  at::Tensor wrapper(const Binding& b) {
    if (at::Tensor* t = free_one(wrappers_[slot(b.dtype)])) {
      c10::StorageImpl* storage = t->storage().unsafeGetStorageImpl();
      storage->set_data_ptr_noswap(c10::DataPtr(b.data, c10::Device(c10::kCPU)));
      storage->set_nbytes(at::detail::computeStorageNbytes(b.sizes, b.strides, c10::elementSize(b.dtype)));
      t->unsafeGetTensorImpl()->set_sizes_and_strides(b.sizes, b.strides, /*storage_offset=*/0);
      return *t;
    }
    return keep(wrappers_[slot(b.dtype)],
                at::from_blob(b.data, b.sizes, b.strides, at::TensorOptions().dtype(b.dtype)));
  }
  at::Tensor scalar(const Binding& b) {
    const c10::Scalar value = at::isFloatingType(b.dtype) ? c10::Scalar(b.d) : c10::Scalar(b.i);
    const bool writable = rewritable(b.dtype);
    if (at::Tensor* t = writable ? free_one(scalars_[slot(b.dtype)]) : nullptr) {
      AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, b.dtype, "host scalar binding",
                                 [&] { *t->mutable_data_ptr<scalar_t>() = value.to<scalar_t>(); });
      return *t;
    }
    // ATen's own non-dispatching path for CPU scalars (at::scalar_tensor is a dispatched
    // empty + fill_, ~1 us). A dtype never rewritten is not pooled either.
    at::Tensor fresh = at::detail::scalar_tensor_static(value, b.dtype, at::kCPU);
    return writable ? keep(scalars_[slot(b.dtype)], std::move(fresh)) : fresh;
  }

 private:
  struct Pool {
    std::vector<at::Tensor> tensors;
    size_t next = 0;  // where the search starts: runs bind in the same order every time
  };
  static constexpr size_t kProbes = 8;        // pool entries looked at before making a new one
  static constexpr size_t kMaxPooled = 4096;  // per dtype
  static constexpr size_t kDtypes = 64;       // > every ScalarType a binding may have
  static size_t slot(c10::ScalarType t) { return static_cast<size_t>(t) % kDtypes; }
  // The dtypes scalar() writes in place (those AT_DISPATCH_ALL_TYPES_AND3 covers).
  static bool rewritable(c10::ScalarType t) {
    for (c10::ScalarType d : {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kBool, at::kFloat, at::kDouble,
                              at::kHalf, at::kBFloat16}) {
      if (t == d) return true;
    }
    return false;
  }
  at::Tensor* free_one(Pool& pool) {
    const size_t n = pool.tensors.size();
    for (size_t k = 0; k < std::min(n, kProbes); ++k) {
      const size_t i = (pool.next + k) % n;
      at::Tensor& t = pool.tensors[i];
      if (t.use_count() == 1 && t.storage().use_count() == 1) {
        pool.next = (i + 1) % n;
        return &t;
      }
    }
    return nullptr;
  }
  static at::Tensor keep(Pool& pool, at::Tensor t) {
    if (pool.tensors.size() < kMaxPooled) pool.tensors.push_back(t);
    return t;
  }
  std::array<Pool, kDtypes> wrappers_, scalars_;
};

RecycledTensors& recycled_tensors() {
  thread_local RecycledTensors pools;
  return pools;
}

// A CPU tensor over a Tensor binding's memory (no copy).
at::Tensor wrap_binding(const Binding& b) {
  TPU_CHECK(b.sizes.size() == b.strides.size(), "host runtime: binding has ", b.sizes.size(),
            " sizes but ", b.strides.size(), " strides");
  int64_t numel = 1;
  for (int64_t s : b.sizes) numel *= s;
  if (numel == 0) return at::empty(b.sizes, at::TensorOptions().dtype(b.dtype));
  TPU_CHECK(b.data != nullptr, "host runtime: tensor binding with null data");
  return recycled_tensors().wrapper(b);
}

void drop_owner(void* ref) {
  c10::intrusive_ptr<c10::intrusive_ptr_target>::reclaim(static_cast<c10::intrusive_ptr_target*>(ref));
}

// A CPU tensor over a Tensor binding's memory holding a reference to the binding's owner until it
// and every view of it are gone (run_and_release): the memory's last reader in the run lets it
// go. Not recycled: the pool would keep the reference.
at::Tensor wrap_owned(const Binding& b) {
  if (c10::multiply_integers(b.sizes) == 0) return wrap_binding(b);
  TPU_CHECK(b.data != nullptr, "host runtime: tensor binding with null data");
  c10::intrusive_ptr_target* ref = c10::intrusive_ptr<c10::intrusive_ptr_target>(b.owner).release();
  return at::for_blob(b.data, b.sizes)
      .strides(b.strides)
      .context(ref, &drop_owner)
      .options(at::TensorOptions().dtype(b.dtype))
      .make_tensor();
}

// A scalar binding as a 0-d tensor of its dtype. Integer values come from an int64 Python
// number or a 0-d tensor of the binding's dtype, so they are in range.
at::Tensor scalar_value(const Binding& b) { return recycled_tensors().scalar(b); }

// [first, last] bytes a non-empty tensor binding can touch.
std::pair<uintptr_t, uintptr_t> byte_range(const Binding& b) {
  return byte_extent(b.data, b.sizes, b.strides, static_cast<int64_t>(c10::elementSize(b.dtype)));
}

// Whether a step is large enough that its kernel splits across the kernel threads
// (kernel_threads.h), by the size its kernel passes to split_parts: a cluster's split_work, a
// contraction's multiply-adds / kMultiplyAddsPerElement, any other kernel's output elements.
bool splits(const ir::Graph& g, int32_t id, const Cluster* cluster) {
  if (cluster != nullptr) return cluster->split_work() >= kSplitMinElements;
  const int64_t macs = contraction_macs(g, id);
  const int64_t work = macs > 0 ? macs / kMultiplyAddsPerElement : c10::multiply_integers(g.node(id).shape);
  return work >= kSplitMinElements;
}

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

Kernel make_kernel(const ir::Graph& g, int32_t id) {
  for (auto make : {make_elementwise_kernel, make_rng_kernel, make_data_kernel, make_reduce_kernel,
                    make_contract_kernel, make_linalg_kernel}) {
    if (Kernel k = make(g, id)) return k;
  }
  TPU_CHECK_NOT_IMPLEMENTED(false, "host runtime: no kernel for ", ir::node_to_string(g, id));
}

}  // namespace

HostOptions HostOptions::from_env() {
  // Registered in common/config.cpp (documentation); read directly because the runtime does
  // not link the core.
  const char* v = std::getenv("TORCH_TPU_HOST_FUSION");
  HostOptions o;
  o.fuse = v == nullptr || std::string(v) != "0";
  return o;
}

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
  // Each view node left is a step: collapse chains of them first, then let concatenates copy
  // their reshaped operands' sources (concat_reshapes.h). Node ids are kept.
  ConcatOperandShapes concat_shapes;
  std::unordered_set<int32_t> unflipped;  // absorb_weight_flips (kernels.h)
  ProductForms products;                  // absorb_bias_adds, product_layouts (kernels.h)
  const ir::Graph graph = absorb_bias_adds(
      absorb_weight_flips(
          absorb_concat_reshapes(ir::collapse_view_chains(input_graph, is_output_), is_output_, concat_shapes),
          is_output_, unflipped),
      is_output_, products);
  product_layouts(graph, is_output_, products);
  // Liveness: walk backwards from the outputs; record each value's live readers.
  std::vector<bool> live = is_output_;
  std::vector<std::vector<int32_t>> readers(n);
  for (int32_t i = num_nodes_ - 1; i >= 0; --i) {
    if (!live[i]) continue;
    for (int32_t o : graph.node(i).operands) {
      live[o] = true;
      if (readers[o].empty() || readers[o].back() != i) readers[o].push_back(i);
    }
  }

  // 0-d chains that only feed broadcasts run inside each cluster that broadcasts them.
  const std::vector<bool> recomputed =
      options.fuse ? recomputed_scalars(graph, live, readers, is_output_) : std::vector<bool>(n, false);
  std::vector<int32_t> recomputed_in(n, -1);  // the last cluster given the node's chain
  std::vector<int32_t> chain;                 // scratch: one broadcast's chain

  // Partition into kernel steps and clusters (see the header for the closing rules).
  std::vector<int32_t> step_of(n, -1);
  std::vector<int32_t> cluster_of(n, -1);  // index into `clusters`
  std::vector<std::shared_ptr<Cluster>> clusters;
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
  fold_constants(graph, step_of);

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

bool HostExecutable::inplace_ok(const OutputTarget& o, const Binding& in, int64_t binding) const {
  const int32_t c = store_cluster_[o.node];
  if (c < 0 || reader_cluster_[binding] != c) return false;
  const Binding& d = o.dest;
  if (in.data != d.data || in.dtype != d.dtype || in.snapshot || in.sizes != d.sizes) return false;
  for (size_t k = 0; k < d.sizes.size(); ++k) {
    // Same element, same address; and no two elements share one (a stride-0 dim would).
    if (d.sizes[k] > 1 && (in.strides[k] != d.strides[k] || d.strides[k] == 0)) return false;
  }
  return true;
}

at::Tensor HostExecutable::bind_param(const Param& p, const std::vector<Binding>& inputs, RngState rng,
                                      bool owned) const {
  if (p.binding < 0) {
    uint64_t v = p.binding == ir::kRngSeedBinding ? rng.seed : rng.offset;
    return at::scalar_tensor(static_cast<int64_t>(v), at::kLong);
  }
  TPU_CHECK(p.binding < static_cast<int64_t>(inputs.size()), "host runtime: parameter %", p.node,
            " reads binding ", p.binding, " but only ", inputs.size(), " were given");
  const Binding& b = inputs[p.binding];
  at::Tensor t;
  if (b.kind == Binding::Kind::Scalar) {
    t = scalar_value(b);
  } else {
    t = owned && b.owner ? wrap_owned(b) : wrap_binding(b);
    // A later write of this program overwrites the memory: read it now.
    if (b.snapshot) t = t.clone();
  }
  if (!t.sizes().equals(p.shape)) {
    TPU_CHECK(t.numel() == c10::multiply_integers(p.shape), "host runtime: binding ", p.binding,
              " has shape ", shape_str(t.sizes()), ", parameter %", p.node, " expects ",
              shape_str(p.shape));
    t = t.reshape(p.shape);
  }
  return t.scalar_type() == p.dtype ? t : t.to(p.dtype);
}

at::Tensor HostExecutable::ViewRoute::source_view(const at::Tensor& dest) const {
  at::Tensor t = dest;
  for (const Undo& u : undo) {
    if (!u.reshape) {
      t = t.permute(u.dims);
      continue;
    }
    std::optional<std::vector<int64_t>> strides = at::detail::computeStride(t.sizes(), t.strides(), u.dims);
    if (!strides) return {};
    t = t.as_strided(u.dims, *strides);
  }
  return t;
}

namespace {

// Whether a and b are the same elements of the same memory (copying one into the other is a
// no-op): a view of a destination lent to the step that computed it (ViewRoute). A size-1
// dim's stride addresses nothing, so views that differ only there (a channels-last
// destination with a size-1 height seen through a reshape) are the same elements.
bool same_memory(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_same(b)) return true;
  if (!a.defined() || a.data_ptr() != b.data_ptr() || !a.sizes().equals(b.sizes()) ||
      a.scalar_type() != b.scalar_type()) {
    return false;
  }
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

}  // namespace

// dst = src for an output: a plain strided copy (strided_copy.h) where dtypes match and the
// memory is disjoint, else ATen's copy_ (dtype conversion; memory shared with the value).
static void copy_to_output(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.scalar_type() == src.scalar_type() && dst.sizes().equals(src.sizes()) && src.numel() > 0) {
    const auto [dlo, dhi] = byte_extent(dst.const_data_ptr(), dst.sizes(), dst.strides(), dst.element_size());
    const auto [slo, shi] = byte_extent(src.const_data_ptr(), src.sizes(), src.strides(), src.element_size());
    if (dhi < slo || shi < dlo) return copy_into(dst, src);
  }
  dst.copy_(src);
}

// One run's values and output destinations.
struct HostExecutable::RunState {
  // An output's destination, and whether a kernel may write into it.
  struct Dest {
    at::Tensor tensor;
    bool direct = false;
    // Lent by an output that views this node's value (ViewRoute): the value is read from it
    // once written, so the view is taken of the destination's memory.
    bool lent = false;
  };
  Values values;
  std::vector<Dest> dests;
  std::vector<int32_t> first_dest;  // per node: its first destination, -1 if none
  std::vector<int32_t> next_dest;   // chains several destinations of one node
  bool owned = false;               // the destinations hold their memory's owners (run_and_release)
  // Failure containment (executor.h): per node, 1 when its value depends on a failed step or a
  // lost input; empty until a run has either. The first error and the step that threw it.
  std::vector<uint8_t> tainted;
  std::exception_ptr error;
  int32_t failed_node = -1;
  int32_t failed_step = -1;

  void write_outputs(int32_t node) {
    for (int32_t k = first_dest[node]; k >= 0; k = next_dest[k]) {
      Dest& d = dests[k];
      if (!d.tensor.defined()) continue;  // released after an earlier write
      if (d.tensor.numel() > 0 && !same_memory(values[node], d.tensor)) copy_to_output(d.tensor, values[node]);
      if (d.lent) values[node] = d.tensor;
      // Written: a lent memory's reference now stays only with the values that view it.
      if (owned) d.tensor.reset();
    }
  }
};

// Constant folding: a kernel step whose operands are all folded values (a constant or an iota
// has none) computes the same value on every run. It runs once here; run() binds the result
// like a parameter. In a TinyGPT training step that removed ~130 steps of ~1 us each (scalar
// constants read by kernels, the causal mask's iotas and compare). Results larger than
// kMaxFoldedBytes stay steps: a broadcast constant materialized once per executable would
// hold its memory for the executable's lifetime.
void HostExecutable::fold_constants(const ir::Graph& graph, std::vector<int32_t>& step_of) {
  auto foldable = [](ir::OpKind k) {
    return k == ir::OpKind::kConstant || k == ir::OpKind::kIota || ir::is_elementwise(k) ||
           k == ir::OpKind::kBroadcastInDim || k == ir::OpKind::kReshape || k == ir::OpKind::kTranspose ||
           k == ir::OpKind::kSlice || k == ir::OpKind::kReverse;
  };
  Values values(static_cast<size_t>(num_nodes_));
  std::vector<int32_t> new_index(steps_.size(), -1);
  std::vector<Step> kept;
  kept.reserve(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& s = steps_[i];
    const ir::Node& node = graph.node(s.node);
    bool fold = !s.cluster && foldable(node.kind) &&
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

void HostExecutable::run_step(RunState& st, const Step& s) const {
  try {
    if (s.cluster) {
      // Stored members with a direct destination are written straight into it.
      const auto& stores = s.cluster->stores();
      thread_local std::vector<at::Tensor*> cluster_outs;  // reused: no allocation per step
      cluster_outs.assign(stores.size(), nullptr);
      for (size_t j = 0; j < stores.size(); ++j) {
        int32_t k = st.first_dest[stores[j]];
        if (k >= 0 && st.dests[k].direct) cluster_outs[j] = &st.dests[k].tensor;
      }
      s.cluster->run(st.values, cluster_outs);
      for (int32_t m : stores) st.write_outputs(m);
      return;
    }
    int32_t k = st.first_dest[s.node];
    at::Tensor* out = k >= 0 && st.dests[k].direct ? &st.dests[k].tensor : nullptr;
    st.values[s.node] = s.kernel(st.values, out);
    st.write_outputs(s.node);
  } catch (...) {
    set_last_failed_node(s.node);
    throw;
  }
}

void HostExecutable::run_contained(RunState& st, int32_t i, std::mutex* error_mu) const {
  bool taint = false;
  for (int32_t k = read_begin_[i]; k < read_begin_[i + 1] && !taint; ++k) taint = st.tainted[reads_[k]] != 0;
  if (taint && steps_[static_cast<size_t>(i)].cluster) {
    try {
      run_cluster_contained(st, i);
    } catch (...) {
      std::unique_lock<std::mutex> lock;
      if (error_mu != nullptr) lock = std::unique_lock<std::mutex>(*error_mu);
      fail_step(st, i);
    }
    return;
  }
  if (taint) {
    taint_step(st, i);
    return;
  }
  try {
    run_step(st, steps_[static_cast<size_t>(i)]);
  } catch (...) {
    std::unique_lock<std::mutex> lock;
    if (error_mu != nullptr) lock = std::unique_lock<std::mutex>(*error_mu);
    fail_step(st, i);
  }
}

void HostExecutable::fail_step(RunState& st, int32_t i) const {
  if (!st.error) {
    st.error = std::current_exception();
    st.failed_node = last_failed_node();
    st.failed_step = i;
  }
  if (st.tainted.empty()) st.tainted.assign(static_cast<size_t>(num_nodes_), 0);
  taint_step(st, i);
}

void HostExecutable::taint_step(RunState& st, int32_t i) const {
  const Step& s = steps_[static_cast<size_t>(i)];
  if (s.cluster) {
    for (int32_t m : s.cluster->members()) st.tainted[m] = 1;
  } else {
    st.tainted[s.node] = 1;
  }
}

void HostExecutable::run_cluster_contained(RunState& st, int32_t i) const {
  const Step& s = steps_[static_cast<size_t>(i)];
  for (const auto& [m, operands] : s.deps->member_operands) {
    for (int32_t v : operands) st.tainted[m] |= st.tainted[v];
  }
  const auto& stores = s.cluster->stores();
  if (std::all_of(stores.begin(), stores.end(), [&](int32_t m) { return st.tainted[m] != 0; })) return;
  // Zeros stand in for the tainted inputs (their values were never computed); the members
  // computed from them are not stored, and nothing is written straight into their destinations.
  std::vector<std::pair<int32_t, at::Tensor>> stand_ins;
  for (const ClusterDeps::Input& in : s.deps->inputs) {
    if (!st.tainted[in.node]) continue;
    stand_ins.emplace_back(in.node, std::move(st.values[in.node]));
    st.values[in.node] = at::zeros(in.shape, at::TensorOptions().dtype(in.dtype));
  }
  std::vector<at::Tensor*> outs(stores.size(), nullptr);
  for (size_t j = 0; j < stores.size(); ++j) {
    const int32_t k = st.first_dest[stores[j]];
    if (!st.tainted[stores[j]] && k >= 0 && st.dests[k].direct) outs[j] = &st.dests[k].tensor;
  }
  try {
    s.cluster->run(st.values, outs);
  } catch (...) {
    for (auto& [node, value] : stand_ins) st.values[node] = std::move(value);
    throw;
  }
  for (auto& [node, value] : stand_ins) st.values[node] = std::move(value);
  for (int32_t m : stores) {
    if (!st.tainted[m]) st.write_outputs(m);
  }
}

void HostExecutable::report_fates(const RunState& st, const std::vector<OutputTarget>& outputs) const {
  std::vector<OutputFate>& fates = mutable_last_run_fates();
  fates.assign(outputs.size(), OutputFate::kWritten);
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int32_t node = outputs[k].node;
    if (!st.tainted[node]) continue;
    fates[k] = st.failed_step >= 0 && step_of_node_[node] == st.failed_step ? OutputFate::kLost : OutputFate::kUntouched;
  }
}

// A run whose independent steps a thread waiting for this stream may take (kernel_threads.h,
// "Waiting threads"). The worker and the waiting thread each claim the earliest ready step
// (one whose operands' steps have finished) within kLookahead of the earliest unclaimed one;
// with nobody waiting, that is the worker running the steps in order. A value is released
// when its last reading step finishes, whichever thread ran it.
class HostExecutable::SharedRun final : public HelpOffer {
 public:
  // How far past the earliest unclaimed step a step may start: enough to find the independent
  // branch of a backward pass (a weight gradient beside an input gradient), few enough that
  // running ahead keeps peak memory near a plain run's.
  static constexpr int32_t kLookahead = 128;

  SharedRun(const HostExecutable& exe, RunState& st, c10::ArrayRef<int32_t> barriers)
      : exe_(exe),
        st_(st),
        n_(static_cast<int32_t>(exe.steps_.size())),
        state_(new std::atomic<uint8_t>[static_cast<size_t>(n_)]),
        remaining_(new std::atomic<int32_t>[exe.value_readers_.size()]),
        device_(execution_device()),
        contained_(!st.tainted.empty()) {
    for (int32_t i = 0; i < n_; ++i) state_[i].store(kFree, std::memory_order_relaxed);
    if (!barriers.empty()) barrier_.assign(static_cast<size_t>(n_), 0);  // rare: no allocation otherwise
    for (int32_t b : barriers) barrier_[static_cast<size_t>(b)] = 1;
    for (size_t v = 0; v < exe.value_readers_.size(); ++v) {
      remaining_[v].store(exe.value_readers_[v], std::memory_order_relaxed);
    }
  }

  bool help() override {
    ScratchScope scratch;
    ExecutionDeviceGuard device(device_);
    bool ran = false;
    for (int32_t i; (i = claim_ready(/*worker=*/false)) >= 0; ran = true) {
      execute(i);
    }
    return ran;
  }

  // On the worker: runs ready steps, the earliest first, until every step is claimed; then
  // waits for those the waiting thread runs. A failed step taints what depends on it and the
  // rest runs on (run_contained); the caller rethrows the first error.
  void run_all() {
    {
      OfferScope offer(OfferScope::kProgramSteps, this);
      while (first_free() < n_) {
        if (const int32_t i = claim_ready(/*worker=*/true); i >= 0) {
          worker_running_.store(true, std::memory_order_relaxed);
          execute(i);
          worker_running_.store(false, std::memory_order_relaxed);
        } else {
          cpu_relax();  // the next steps wait for one the waiting thread runs
        }
      }
    }  // withdrawn: the waiting thread has left help(), so every claimed step has finished
  }

 private:
  enum : uint8_t { kFree, kClaimed, kDone };

  bool claim(int32_t i) {
    uint8_t free = kFree;
    return state_[i].compare_exchange_strong(free, kClaimed);
  }
  // The earliest step nobody has claimed (n_ when all are).
  int32_t first_free() {
    int32_t i = low_.load(std::memory_order_relaxed);
    while (i < n_ && state_[i].load(std::memory_order_relaxed) != kFree) ++i;
    low_.store(i, std::memory_order_relaxed);  // a hint: racing stores only make a scan longer
    return i;
  }
  // Claims the earliest ready step within kLookahead of the earliest free one; -1 if none.
  // The waiting thread leaves large steps to the worker, which splits them with its help (run
  // there, such a step would take the single thread a part gets), and, while the worker is
  // between steps, the earliest ready step too: the worker is about to take it, and splits it
  // if it is mid-sized. Taken by the waiting thread, the next step of a chain (most of an
  // inference or forward pass) ran on one thread while the worker spun waiting for it.
  int32_t claim_ready(bool worker) {
    const int32_t from = first_free(), to = std::min(n_, from + kLookahead);
    bool leave = !worker && !worker_running_.load(std::memory_order_relaxed);
    for (int32_t i = from; i < to; ++i) {
      if (state_[i].load(std::memory_order_relaxed) != kFree || !(worker || exe_.helper_may_run_[i]) || !ready(i)) {
        continue;
      }
      if (leave) {
        leave = false;
        continue;
      }
      if (claim(i)) return i;
    }
    return -1;
  }
  bool done(int32_t j) const { return state_[j].load(std::memory_order_acquire) == kDone; }
  // Every step this one reads from (a barrier: every earlier step) has finished.
  bool ready(int32_t i) {
    if (!barrier_.empty() && barrier_[static_cast<size_t>(i)]) {
      int32_t j = low_done_.load(std::memory_order_relaxed);
      while (j < i && done(j)) ++j;
      low_done_.store(j, std::memory_order_relaxed);  // a hint, like low_
      return j == i;
    }
    for (int32_t k = exe_.dep_begin_[i]; k < exe_.dep_begin_[i + 1]; ++k) {
      if (!done(exe_.deps_[k])) return false;
    }
    return true;
  }
  void execute(int32_t i) {
    if (!contained_.load(std::memory_order_acquire)) {
      // The common case: no failure so far. A step that throws records the error and taints
      // under the lock (allocating the taint vector once); steps that read its values start
      // after it is done, so they see contained_ and the taint.
      try {
        exe_.run_step(st_, exe_.steps_[static_cast<size_t>(i)]);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu_);
        exe_.fail_step(st_, i);
        contained_.store(true, std::memory_order_release);
      }
    } else {
      // Each node's taint is written by the one step that defines it, and read by steps that
      // start after it finished (done's acquire): only the error needs the lock.
      exe_.run_contained(st_, i, &error_mu_);
    }
    for (int32_t k = exe_.read_begin_[i]; k < exe_.read_begin_[i + 1]; ++k) {
      const int32_t v = exe_.reads_[k];
      if (remaining_[v].fetch_sub(1) == 1) st_.values[v].reset();
    }
    for (int32_t k = exe_.orphan_begin_[i]; k < exe_.orphan_begin_[i + 1]; ++k) st_.values[exe_.orphans_[k]].reset();
    state_[i].store(kDone, std::memory_order_release);
  }

  const HostExecutable& exe_;
  RunState& st_;
  const int32_t n_;
  std::unique_ptr<std::atomic<uint8_t>[]> state_;
  std::vector<uint8_t> barrier_;                       // per step: waits for all earlier steps (or empty)
  std::unique_ptr<std::atomic<int32_t>[]> remaining_;  // per value: reading steps not yet finished
  const c10::DeviceIndex device_;
  std::atomic<int32_t> low_{0};       // no step before it is free (a hint, see first_free)
  std::atomic<int32_t> low_done_{0};  // every step before it has finished (a hint, see ready)
  std::atomic<bool> worker_running_{false};  // the worker is inside a step (see claim_ready)
  std::mutex error_mu_;                      // guards st_'s error and taint once a step failed
  std::atomic<bool> contained_;              // st_.tainted is allocated (set under error_mu_)
};

void HostExecutable::run(const std::vector<Binding>& inputs, const std::vector<OutputTarget>& outputs,
                         RngState rng) const {
  run_impl(inputs, outputs, rng, nullptr, nullptr);
}

void HostExecutable::run_and_release(std::vector<Binding>& inputs, std::vector<OutputTarget>& outputs,
                                     RngState rng) const {
  run_impl(inputs, outputs, rng, &inputs, &outputs);
}

void HostExecutable::run_impl(const std::vector<Binding>& inputs, const std::vector<OutputTarget>& outputs,
                              RngState rng, std::vector<Binding>* lent_inputs,
                              std::vector<OutputTarget>* lent_outputs) const {
  mutable_last_run_fates().clear();
  InternalDispatchGuard guard;
  ScratchScope scratch;  // intermediates come from (and go back to) the scratch cache
  RunState st;
  st.values.resize(static_cast<size_t>(num_nodes_));
  Values& values = st.values;
  auto& dests = st.dests;
  auto& first_dest = st.first_dest;
  auto& next_dest = st.next_dest;
  dests.resize(outputs.size());
  first_dest.assign(static_cast<size_t>(num_nodes_), -1);
  next_dest.assign(outputs.size(), -1);
  for (size_t k = outputs.size(); k-- > 0;) {
    const OutputTarget& o = outputs[k];
    TPU_CHECK(o.node >= 0 && o.node < num_nodes_ && is_output_[o.node], "host runtime: node ",
              o.node, " was not compiled as an output");
    TPU_CHECK(o.dest.kind == Binding::Kind::Tensor, "host runtime: output destination of %", o.node,
              " must be a tensor");
    TPU_CHECK(c10::IntArrayRef(o.dest.sizes).equals(output_shape_[o.node]),
              "host runtime: destination shape ", shape_str(o.dest.sizes), " != shape ",
              shape_str(output_shape_[o.node]), " of %", o.node);
    dests[k].tensor = lent_outputs != nullptr && o.dest.owner ? wrap_owned(o.dest) : wrap_binding(o.dest);
    next_dest[k] = first_dest[o.node];
    first_dest[o.node] = static_cast<int32_t>(k);
  }
  // Writing early into memory another binding still reads (or another output writes) would
  // corrupt the program; those outputs are computed aside and copied at the end. Only bindings
  // that a live parameter reads count: an op's `out=` argument is passed as a binding too, and
  // is usually the very memory the output goes to.
  // One sorted sweep over the byte ranges finds the overlapping pairs (overlaps are rare, so
  // each range meets about one neighbour): O(n log n), where comparing every output with every
  // read and every other output was quadratic (_fused_adamw_ and fused optimizer graphs over
  // TinyGPT's 28 parameters: ~85 outputs, ~110 reads).
  struct Span {
    uintptr_t lo, hi;
    int64_t index;  // output k, or binding b for reads
    bool dest;
  };
  c10::SmallVector<Span, 64> spans;
  for (size_t b = 0; b < inputs.size() && b < reads_binding_.size(); ++b) {
    const Binding& in = inputs[b];
    if (reads_binding_[b] && in.kind == Binding::Kind::Tensor && in.data) {
      auto [lo, hi] = byte_range(in);
      spans.push_back({lo, hi, static_cast<int64_t>(b), false});
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].dest.data && dests[k].tensor.numel() > 0) {
      auto [lo, hi] = byte_range(outputs[k].dest);
      spans.push_back({lo, hi, static_cast<int64_t>(k), true});
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.lo < y.lo; });
  c10::SmallVector<uint8_t, 64> clash(outputs.size(), 0);
  c10::SmallVector<uint8_t, 64> reads_overlap(outputs.size(), 0);  // overlaps an input binding the program reads
  auto meet = [&](const Span& d, const Span& other) {  // d is an output's span
    if (other.dest) {
      clash[d.index] = clash[other.index] = 1;
    } else {
      reads_overlap[d.index] = 1;
      if (!inplace_ok(outputs[d.index], inputs[other.index], other.index)) clash[d.index] = 1;
    }
  };
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size() && spans[j].lo <= spans[i].hi; ++j) {
      if (spans[i].dest) {
        meet(spans[i], spans[j]);
      } else if (spans[j].dest) {
        meet(spans[j], spans[i]);
      }
    }
  }
  // Steps that write an output overlapping memory another step reads or writes (clash) wait,
  // in a shared run, for every earlier step: the reads and writes before them keep program
  // order. Later readers of that memory are snapshots (see the header), so need no order.
  c10::SmallVector<int32_t, 8> barriers;
  bool shareable = static_cast<int32_t>(steps_.size()) >= kMinSharedSteps && help_while_waiting_enabled();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const OutputTarget& o = outputs[k];
    if (clash[k]) {
      barriers.push_back(step_of_node_[o.node]);
      shareable = shareable && step_of_node_[o.node] >= 0;  // a parameter's output is written at bind time
    }
    if (dests[k].tensor.numel() == 0 || o.dest.dtype != node_dtype_[o.node] ||
        first_dest[o.node] != static_cast<int32_t>(k)) {
      continue;
    }
    dests[k].direct = !clash[k] && o.allow_direct;
  }
  // Destinations lent to the steps whose values the outputs view (ViewRoute): written then,
  // earlier than the output's own step, so only memory no input of the program overlaps.
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int32_t r = view_route_of_[outputs[k].node];
    if (r < 0 || !dests[k].direct || reads_overlap[k] || dests[k].tensor.numel() == 0) continue;
    const ViewRoute& route = view_routes_[static_cast<size_t>(r)];
    if (first_dest[route.source] >= 0) continue;  // the source is an output itself, or lent already
    at::Tensor lent = route.source_view(dests[k].tensor);
    if (!lent.defined()) continue;
    first_dest[route.source] = static_cast<int32_t>(dests.size());
    dests.push_back({std::move(lent), true, true});
    next_dest.push_back(-1);
  }

  set_last_failed_node(-1);
  st.owned = lent_outputs != nullptr;
  for (const Param& p : params_) {
    if (p.binding >= 0 && inputs[static_cast<size_t>(p.binding)].lost) {  // failure containment (header)
      if (st.tainted.empty()) st.tainted.assign(static_cast<size_t>(num_nodes_), 0);
      st.tainted[p.node] = 1;
    }
  }
  for (const Param& p : params_) {
    values[p.node] = bind_param(p, inputs, rng, lent_inputs != nullptr);
    if (st.tainted.empty() || !st.tainted[p.node]) st.write_outputs(p.node);
  }
  // The wrappers hold the lent memory now (one reference each, a binding read by several
  // parameters has several): the caller's references go.
  if (lent_inputs != nullptr) {
    for (Binding& b : *lent_inputs) b.owner.reset();
  }
  if (lent_outputs != nullptr) {
    for (OutputTarget& o : *lent_outputs) o.dest.owner.reset();
  }
  for (const auto& [node, value] : folded_) {
    values[node] = value;
    st.write_outputs(node);
  }
  if (shareable) {
    SharedRun(*this, st, barriers).run_all();
  } else {
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      if (st.tainted.empty()) {
        try {
          run_step(st, s);
        } catch (...) {
          fail_step(st, static_cast<int32_t>(i));
        }
      } else {
        run_contained(st, static_cast<int32_t>(i));
      }
      for (int32_t v : s.release) values[v].reset();
    }
  }
  if (!st.tainted.empty()) report_fates(st, outputs);
  if (st.error) {
    set_last_failed_node(st.failed_node);
    std::rethrow_exception(st.error);
  }
}

std::string HostExecutable::describe() const {
  std::string s;
  if (!folded_.empty()) {
    s += "folded:";
    for (const auto& [node, value] : folded_) s += " " + node_names_[static_cast<size_t>(node)] + ",";
    s.back() = '\n';
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& st = steps_[i];
    s += "step " + std::to_string(i) + ": " +
         (st.cluster ? st.cluster->describe() : node_names_[static_cast<size_t>(st.node)]) + "\n";
  }
  return s;
}

ExecutableStats HostExecutable::stats() const {
  ExecutableStats st;
  st.steps = static_cast<int32_t>(steps_.size());
  for (const Step& s : steps_) {
    if (!s.cluster) continue;
    ++st.clusters;
    st.fused_nodes += static_cast<int32_t>(s.cluster->members().size());
  }
  return st;
}

std::unique_ptr<Executable> HostRuntime::compile(const ir::Graph& graph,
                                                 const std::vector<int32_t>& outputs) {
  return std::make_unique<HostExecutable>(graph, outputs);
}

std::unique_ptr<Executable> HostRuntime::compile_with_memory(const ir::Graph& graph,
                                                             const std::vector<int32_t>& outputs,
                                                             const MemoryClasses& memory) {
  HostOptions options = HostOptions::from_env();
  options.memory = &memory;
  return std::make_unique<HostExecutable>(graph, outputs, options);
}

}  // namespace host

namespace {
thread_local int32_t t_last_failed_node = -1;
}  // namespace
int32_t last_failed_node() { return t_last_failed_node; }
void set_last_failed_node(int32_t node) { t_last_failed_node = node; }
std::vector<OutputFate>& mutable_last_run_fates() {
  thread_local std::vector<OutputFate> fates;  // keeps its capacity: no allocation per run
  return fates;
}
const std::vector<OutputFate>& last_run_fates() { return mutable_last_run_fates(); }

Runtime& host_runtime() {
  static host::HostRuntime* runtime = new host::HostRuntime();  // leaked: lives forever
  return *runtime;
}

}  // namespace torch_tpu::runtime
