// Running a planned host program (executor.h): bindings, destinations, steps, failure containment.
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
#include "common/config.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/run_state.h"
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

}  // namespace

HostOptions HostOptions::from_env() {
  HostOptions o;
  o.fuse = config::get("TORCH_TPU_HOST_FUSION") != "0";  // unset: the default "1"
  o.verify = config::get_bool("TORCH_TPU_VERIFY");
  return o;
}

namespace {

// Whether input binding `in` (read as it is, not a snapshot) names exactly the elements of
// destination `d`: same element, same address; and no two elements share one (a stride-0 dim
// would).
bool same_elements(const Binding& in, const Binding& d) {
  if (in.data != d.data || in.dtype != d.dtype || in.snapshot || in.sizes != d.sizes) return false;
  for (size_t k = 0; k < d.sizes.size(); ++k) {
    if (d.sizes[k] > 1 && (in.strides[k] != d.strides[k] || d.strides[k] == 0)) return false;
  }
  return true;
}

}  // namespace

bool HostExecutable::inplace_ok(const OutputTarget& o, const Binding& in, int64_t binding) const {
  const int32_t c = store_cluster_[o.node];
  return c >= 0 && reader_cluster_[binding] == c && same_elements(in, o.dest);
}

bool HostExecutable::scatter_in_place_ok(const OutputTarget& o, const Binding& in, int64_t binding) const {
  return scatter_binding_[o.node] == binding && same_elements(in, o.dest);
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

void HostExecutable::RunState::write_outputs(int32_t node) {
  for (int32_t k = first_dest[node]; k >= 0; k = next_dest[k]) {
    Dest& d = dests[k];
    if (!d.tensor.defined()) continue;  // released after an earlier write
    if (d.tensor.numel() > 0 && !same_memory(values[node], d.tensor)) copy_to_output(d.tensor, values[node]);
    if (d.lent) values[node] = d.tensor;
    // Written: a lent memory's reference now stays only with the values that view it.
    if (owned) d.tensor.reset();
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
    } else if (scatter_in_place_ok(outputs[d.index], inputs[other.index], other.index)) {
      // The scatter's own operand: it writes its indexed elements there (no overlap to order).
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
    run_shared(st, barriers);
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
