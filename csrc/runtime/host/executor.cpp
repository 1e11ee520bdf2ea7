#include "runtime/host/executor.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <string>

#include "common/check.h"
#include "ir/printer.h"

namespace torch_tpu::runtime {
namespace host {
namespace {

static_assert(static_cast<int>(ir::DType::kBF16) == static_cast<int>(at::ScalarType::BFloat16));
static_assert(static_cast<int>(ir::DType::kBool) == static_cast<int>(at::ScalarType::Bool));
static_assert(static_cast<int>(ir::DType::kF16) == static_cast<int>(at::ScalarType::Half));
static_assert(static_cast<int>(ir::DType::kU8) == static_cast<int>(at::ScalarType::Byte));

// Keeps the runtime's internal ATen calls away from autograd and from Python dispatch modes
// (a user's TorchDispatchMode must see the TPU ops, not our CPU kernels).
struct InternalDispatchGuard {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  c10::impl::ExcludeDispatchKeyGuard no_python{c10::python_ks};
};

std::string shape_str(c10::IntArrayRef s) { return c10::str(s); }

// A CPU tensor over a Tensor binding's memory (no copy).
at::Tensor wrap_binding(const Binding& b) {
  auto opts = at::TensorOptions().dtype(b.dtype);
  TPU_CHECK(b.sizes.size() == b.strides.size(), "host runtime: binding has ", b.sizes.size(),
            " sizes but ", b.strides.size(), " strides");
  int64_t numel = 1;
  for (int64_t s : b.sizes) numel *= s;
  if (numel == 0) return at::empty(b.sizes, opts);
  TPU_CHECK(b.data != nullptr, "host runtime: tensor binding with null data");
  return at::from_blob(b.data, b.sizes, b.strides, opts);
}

// [first, last] bytes a non-empty tensor binding can touch.
std::pair<uintptr_t, uintptr_t> byte_range(const Binding& b) {
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < b.sizes.size(); ++d) {
    int64_t ext = (b.sizes[d] - 1) * b.strides[d];
    (ext < 0 ? lo : hi) += ext;
  }
  auto base = reinterpret_cast<uintptr_t>(b.data);
  int64_t item = c10::elementSize(b.dtype);
  return {base + lo * item, base + hi * item + item - 1};
}

bool overlaps(std::pair<uintptr_t, uintptr_t> a, std::pair<uintptr_t, uintptr_t> b) {
  return a.first <= b.second && b.first <= a.second;
}

Kernel make_kernel(const ir::Graph& g, int32_t id) {
  for (auto make : {make_elementwise_kernel, make_rng_kernel, make_data_kernel, make_reduce_kernel,
                    make_contract_kernel}) {
    if (Kernel k = make(g, id)) return k;
  }
  TPU_CHECK_NOT_IMPLEMENTED(false, "host runtime: no kernel for ", ir::node_to_string(g, id));
}

}  // namespace

HostExecutable::HostExecutable(const ir::Graph& graph, const std::vector<int32_t>& outputs)
    : num_nodes_(graph.size()) {
  InternalDispatchGuard guard;
  const auto n = static_cast<size_t>(num_nodes_);
  node_dtype_.resize(n);
  output_shape_.resize(n);
  is_output_.assign(n, false);
  for (int32_t o : outputs) {
    TPU_CHECK(o >= 0 && o < num_nodes_, "host runtime: output node ", o, " not in a graph of ",
              num_nodes_, " nodes");
    is_output_[o] = true;
    output_shape_[o] = graph.node(o).shape;
  }
  // Liveness: walk backwards from the outputs; record each value's last reader.
  std::vector<bool> live = is_output_;
  std::vector<int32_t> last_use(n, -1);
  for (int32_t i = num_nodes_ - 1; i >= 0; --i) {
    if (!live[i]) continue;
    for (int32_t o : graph.node(i).operands) {
      live[o] = true;
      last_use[o] = std::max(last_use[o], i);
    }
  }
  std::vector<int32_t> step_of(n, -1);
  for (int32_t i = 0; i < num_nodes_; ++i) {
    const ir::Node& node = graph.node(i);
    node_dtype_[i] = to_aten(node.dtype);
    if (!live[i]) continue;
    if (node.kind == ir::OpKind::kParameter) {
      params_.push_back({i, node.iattrs.at(0), to_aten(node.dtype), node.shape});
      continue;
    }
    step_of[i] = static_cast<int32_t>(steps_.size());
    steps_.push_back({i, make_kernel(graph, i), {}});
  }
  for (int32_t v = 0; v < num_nodes_; ++v) {
    if (!live[v]) continue;
    // A value nobody reads (an output only) dies right after it is defined and written out.
    int32_t at_node = last_use[v] >= 0 ? last_use[v] : v;
    if (step_of[at_node] >= 0) steps_[step_of[at_node]].release.push_back(v);
  }
}

at::Tensor HostExecutable::bind_param(const Param& p, const std::vector<Binding>& inputs,
                                      RngState rng) const {
  if (p.binding < 0) {
    uint64_t v = p.binding == ir::kRngSeedBinding ? rng.seed : rng.offset;
    return at::scalar_tensor(static_cast<int64_t>(v), at::kLong);
  }
  TPU_CHECK(p.binding < static_cast<int64_t>(inputs.size()), "host runtime: parameter %", p.node,
            " reads binding ", p.binding, " but only ", inputs.size(), " were given");
  const Binding& b = inputs[p.binding];
  at::Tensor t;
  if (b.kind == Binding::Kind::Scalar) {
    t = at::isFloatingType(b.dtype) ? at::scalar_tensor(b.d, b.dtype)
                                    : at::scalar_tensor(b.i, at::kLong).to(b.dtype);
  } else {
    t = wrap_binding(b);
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

void HostExecutable::run(const std::vector<Binding>& inputs,
                         const std::vector<OutputTarget>& outputs, RngState rng) const {
  InternalDispatchGuard guard;
  Values values(static_cast<size_t>(num_nodes_));

  // Destinations: which node each goes to, and which one (if any) a kernel may write into.
  struct Dest {
    at::Tensor tensor;
    bool direct = false;
  };
  std::vector<Dest> dests(outputs.size());
  std::vector<int32_t> first_dest(static_cast<size_t>(num_nodes_), -1);
  std::vector<int32_t> next_dest(outputs.size(), -1);  // chains several dests of one node
  for (size_t k = outputs.size(); k-- > 0;) {
    const OutputTarget& o = outputs[k];
    TPU_CHECK(o.node >= 0 && o.node < num_nodes_ && is_output_[o.node], "host runtime: node ",
              o.node, " was not compiled as an output");
    TPU_CHECK(o.dest.kind == Binding::Kind::Tensor, "host runtime: output destination of %", o.node,
              " must be a tensor");
    TPU_CHECK(c10::IntArrayRef(o.dest.sizes).equals(output_shape_[o.node]),
              "host runtime: destination shape ", shape_str(o.dest.sizes), " != shape ",
              shape_str(output_shape_[o.node]), " of %", o.node);
    dests[k].tensor = wrap_binding(o.dest);
    next_dest[k] = first_dest[o.node];
    first_dest[o.node] = static_cast<int32_t>(k);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const OutputTarget& o = outputs[k];
    if (dests[k].tensor.numel() == 0 || o.dest.dtype != node_dtype_[o.node] ||
        first_dest[o.node] != static_cast<int32_t>(k)) {
      continue;
    }
    // Writing early into memory another binding still reads (or another output writes)
    // would corrupt the program; those outputs are computed aside and copied at the end.
    auto range = byte_range(o.dest);
    bool clash = false;
    for (const Binding& in : inputs) {
      clash |= in.kind == Binding::Kind::Tensor && in.data && overlaps(range, byte_range(in));
    }
    for (size_t j = 0; j < outputs.size() && !clash; ++j) {
      clash = j != k && outputs[j].dest.data && dests[j].tensor.numel() > 0 &&
              overlaps(range, byte_range(outputs[j].dest));
    }
    dests[k].direct = !clash && o.allow_direct;
  }
  auto write_outputs = [&](int32_t node) {
    for (int32_t k = first_dest[node]; k >= 0; k = next_dest[k]) {
      Dest& d = dests[k];
      if (d.tensor.numel() > 0 && !(d.direct && values[node].is_same(d.tensor))) {
        d.tensor.copy_(values[node]);
      }
    }
  };

  set_last_failed_node(-1);
  for (const Param& p : params_) {
    values[p.node] = bind_param(p, inputs, rng);
    write_outputs(p.node);
  }
  for (const Step& s : steps_) {
    int32_t k = first_dest[s.node];
    at::Tensor* out = k >= 0 && dests[k].direct ? &dests[k].tensor : nullptr;
    try {
      values[s.node] = s.kernel(values, out);
      write_outputs(s.node);
    } catch (...) {
      set_last_failed_node(s.node);
      throw;
    }
    for (int32_t v : s.release) values[v].reset();
  }
}

std::unique_ptr<Executable> HostRuntime::compile(const ir::Graph& graph,
                                                 const std::vector<int32_t>& outputs) {
  return std::make_unique<HostExecutable>(graph, outputs);
}

}  // namespace host

namespace {
thread_local int32_t t_last_failed_node = -1;
}  // namespace
int32_t last_failed_node() { return t_last_failed_node; }
void set_last_failed_node(int32_t node) { t_last_failed_node = node; }

Runtime& host_runtime() {
  static host::HostRuntime* runtime = new host::HostRuntime();  // leaked: lives forever
  return *runtime;
}

}  // namespace torch_tpu::runtime
