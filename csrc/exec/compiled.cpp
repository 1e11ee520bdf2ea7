// Compiled mode's engine (see compiled.h).
#include "exec/compiled.h"

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>

#include "common/check.h"
#include "common/hash.h"
#include "compiler/disk_cache.h"
#include "compiler/program_serialize.h"
#include "device/device.h"
#include "device/stream.h"
#include "exec/call.h"
#include "exec/launch.h"
#include "exec/mode.h"
#include "ir/verifier.h"

namespace torch_tpu::exec {
namespace {

// The traced view of `base` (input or new tensor `index`). A base laid out otherwise than traced
// (a saved tensor an earlier graph returned in another layout) is first copied into the traced
// layout: the view then has the traced values, without the aliasing.
at::Tensor traced_view(const at::Tensor& base, const compiler::BindingView& v, const char* what, int32_t index) {
  TPU_CHECK(base.defined() && base.sizes().equals(v.base_sizes), "compiled graph: ", what, " ", index,
            " is not the tensor its returned view was traced on");
  if (base.strides().equals(v.base_strides))
    return base.as_strided(v.sizes, v.strides, base.storage_offset() + v.offset);
  at::Tensor copy = at::empty_strided(v.base_sizes, v.base_strides, base.options());
  copy.copy_(base);
  return copy.as_strided(v.sizes, v.strides, v.offset);
}

// Tag word, byte count, then the key text 8 bytes per word (zero-padded).
std::vector<int64_t> disk_key(const std::string& text) {
  static const std::string kTag = "torch_tpu compiled graph 1";
  std::vector<int64_t> key;
  key.reserve(2 + (text.size() + 7) / 8);
  key.push_back(static_cast<int64_t>(fnv1a(kTag.data(), kTag.size())));
  key.push_back(static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, text.data() + i, std::min<size_t>(8, text.size() - i));
    key.push_back(static_cast<int64_t>(w));
  }
  return key;
}

runtime::Binding scalar_binding(const c10::Scalar& s, c10::ScalarType dtype) {
  runtime::Binding b;
  b.kind = runtime::Binding::Kind::Scalar;
  b.dtype = dtype;
  TPU_CHECK_TYPE(!c10::isComplexType(dtype), "complex inputs are not supported by compiled graphs");
  if (c10::isFloatingType(dtype)) {
    b.d = s.toDouble();
  } else {
    b.i = s.toLong();
  }
  return b;
}

}  // namespace

CompiledGraph::CompiledGraph(ir::Graph graph, const OutputPlan& plan, int32_t num_inputs,
                             const std::vector<int32_t>& channels_last)
    : prog_(program_from_plan(std::move(graph), plan, num_inputs, "compiled graph")),
      num_inputs_(num_inputs),
      snapshot_(num_inputs, 0),
      constants_(plan.constants) {
  constants_.resize(prog_->returns.size());
  for (size_t k = 0; k < prog_->returns.size(); ++k) {
    TPU_CHECK_VALUE(prog_->returns[k].kind != compiler::ReturnSpec::Kind::List, "compiled graph: return ", k,
                    " is a list");
    storable_ = storable_ && constants_[k].isNone();
  }
  for (const auto& o : prog_->outputs) {
    if (o.target >= 0) snapshot_[static_cast<size_t>(o.target)] = o.snapshot ? kAlways : kUnlessAliased;
  }
  const auto new_count = static_cast<int32_t>(prog_->new_tensors.size());
  for (int32_t k : channels_last) {
    TPU_CHECK_VALUE(k >= 0 && k < new_count, "compiled graph: channels-last new tensor ", k, " out of range");
    auto& spec = prog_->new_tensors[static_cast<size_t>(k)];
    spec.channels_last = spec.shape.size() == 4;
  }
  finish();
}

// From a deserialized Program: checks every index of its plan against the graph's input count
// (payloads are untrusted).
CompiledGraph::CompiledGraph(std::shared_ptr<compiler::Program> prog, int32_t num_inputs)
    : prog_(std::move(prog)), num_inputs_(num_inputs), snapshot_(num_inputs, 0) {
  const auto new_count = static_cast<int32_t>(prog_->new_tensors.size());
  for (int32_t i = 0; i < prog_->graph.size(); ++i) {
    const ir::Node& n = prog_->graph.node(i);
    if (n.kind != ir::OpKind::kParameter) continue;
    const int64_t b = n.iattrs.size() == 1 ? n.iattrs[0] : INT64_MIN;
    TORCH_CHECK((b >= 0 && b < num_inputs) ||
                    ((b == ir::kRngSeedBinding || b == ir::kRngOffsetBinding) && prog_->rng_counters > 0),
                "compiled graph entry: parameter %", i, " reads input ", b, " of ", num_inputs);
  }
  for (const auto& o : prog_->outputs) {
    TORCH_CHECK(o.target < num_inputs, "compiled graph entry: output target ", o.target, " out of range");
    if (o.target >= 0) snapshot_[static_cast<size_t>(o.target)] = o.snapshot ? kAlways : kUnlessAliased;
  }
  for (const auto& r : prog_->returns) {
    switch (r.kind) {
      case compiler::ReturnSpec::Kind::New:
        TORCH_CHECK(r.index >= 0 && r.index < new_count, "compiled graph entry: return ", r.index, " out of range");
        break;
      case compiler::ReturnSpec::Kind::Binding:
      case compiler::ReturnSpec::Kind::View:
        TORCH_CHECK(r.index >= 0 && r.index < num_inputs, "compiled graph entry: input ", r.index, " out of range");
        break;
      case compiler::ReturnSpec::Kind::NewView:
        TORCH_CHECK(r.index >= 0 && r.index < new_count, "compiled graph entry: view of new tensor ", r.index,
                    " out of range");
        break;
      case compiler::ReturnSpec::Kind::Undefined: break;
      case compiler::ReturnSpec::Kind::List: TORCH_CHECK(false, "compiled graph entry: a list return");
    }
  }
  constants_.resize(prog_->returns.size());
}

std::unique_ptr<CompiledGraph> CompiledGraph::load(const std::string& key_text, int32_t num_inputs) {
  DiskCache* disk = compiler::process_disk_cache();
  if (disk == nullptr) return nullptr;
  std::vector<int64_t> key = disk_key(key_text);
  std::optional<std::string> payload = disk->load(key);
  if (!payload) return nullptr;
  try {
    auto prog = std::make_shared<compiler::Program>(compiler::deserialize_program(*payload));
    std::unique_ptr<CompiledGraph> g(new CompiledGraph(prog, num_inputs));
    ir::verify(prog->graph);
    g->finish();
    return g;
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) why = c10e->what_without_backtrace();
    disk->discard(key, why);
    return nullptr;
  }
}

bool CompiledGraph::store(const std::string& key_text) const {
  DiskCache* disk = compiler::process_disk_cache();
  if (disk == nullptr || !storable_) return false;
  return disk->store(disk_key(key_text), compiler::serialize_program(*prog_));
}

std::vector<c10::IValue> CompiledGraph::run(const std::vector<c10::IValue>& inputs) {
  TPU_CHECK_VALUE(static_cast<int32_t>(inputs.size()) == num_inputs_, "compiled graph takes ", num_inputs_,
                  " inputs, got ", inputs.size());
  std::vector<runtime::Binding> bindings;
  std::vector<at::Tensor> tensors;
  bindings.reserve(inputs.size());
  tensors.reserve(inputs.size());
  bool device_known = false;
  c10::DeviceIndex device = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const c10::IValue& v = inputs[i];
    runtime::Binding b;
    at::Tensor t;
    if (v.isTensor()) {
      t = v.toTensor();
      if (t.device().type() == c10::DeviceType::PrivateUse1) {
        if (!device_known) {
          device = t.device().index();
          device_known = true;
        }
        TPU_CHECK(t.device().index() == device, "compiled graph: inputs on tpu:", static_cast<int>(device),
                  " and tpu:", static_cast<int>(t.device().index()));
        if (t.is_conj() || t.is_neg()) {  // the graph computes on values: bind the view's value
          TPU_CHECK(snapshot_[i] == kNever, "compiled graph: input ", i,
                    " is a conj() or neg view the graph writes; "
                    "call resolve_conj() on it first");
          t = t.resolve_conj().resolve_neg();
        }
        b = tensor_binding(t);
        b.snapshot = snapshot_[i] == kAlways;
      } else {
        TPU_CHECK(t.dim() == 0 && t.device().is_cpu(), "compiled graph: input ", i, " is on ", t.device().str(),
                  "; expected a tpu tensor");
        b = scalar_binding(t.item(), t.scalar_type());
        t = at::Tensor();
      }
    } else if (v.isBool()) {
      b = scalar_binding(c10::Scalar(v.toBool()), c10::kBool);
    } else if (v.isInt()) {
      b = scalar_binding(c10::Scalar(v.toInt()), c10::kLong);
    } else if (v.isDouble()) {
      b = scalar_binding(c10::Scalar(v.toDouble()), c10::kDouble);
    } else {
      TPU_CHECK_TYPE(v.isNone(), "compiled graph: unsupported input ", i, " of type ", v.tagKind());
      b.kind = runtime::Binding::Kind::Scalar;
    }
    bindings.push_back(std::move(b));
    tensors.push_back(std::move(t));
  }
  if (!device_known) device = device::current();
  // Written inputs sharing storage with other inputs: the memory classes do not hold.
  const std::shared_ptr<compiler::Program> prog =
      writes_inputs_ && snapshot_shared(tensors, bindings) ? conservative() : prog_;
  std::vector<at::Tensor> host_tensors;
  std::vector<runtime::OutputTarget> host_outputs;
  if (host_exe_) host_outputs = host_targets(inputs, bindings, host_tensors);
  // Pending fused work may write what the graph reads: it runs first.
  if (mode() == Mode::Fused) device::flush_pending(device, device::FlushCause::kStreamEvent);
  runtime::RngState rng = reserve_rng(*prog_, std::nullopt, device);
  std::vector<at::Tensor> news;
  news.reserve(prog_->new_tensors.size());
  for (const auto& spec : prog_->new_tensors) news.push_back(new_device_tensor(spec, device));
  std::vector<runtime::OutputTarget> outputs;
  outputs.reserve(prog_->outputs.size());
  for (const auto& o : prog_->outputs) {
    if (o.target >= 0) {
      const at::Tensor& t = tensors[static_cast<size_t>(o.target)];
      TPU_CHECK(t.defined() && t.sizes().equals(prog_->graph.node(o.node).shape), "compiled graph: mutated input ",
                o.target, " changed shape");
      outputs.push_back(runtime::OutputTarget{o.node, tensor_binding(t)});
    } else {
      const at::Tensor& t = news[static_cast<size_t>(o.new_index)];
      outputs.push_back(runtime::OutputTarget{o.node, tensor_binding(t)});
    }
  }
  // The scalars the host run reads: the launch moves the bindings away.
  std::vector<runtime::Binding> host_bindings(host_exe_ ? bindings.size() : 0);
  for (int32_t b : host_reads_) host_bindings[static_cast<size_t>(b)] = bindings[static_cast<size_t>(b)];
  launch_program(prog, bindings, std::move(outputs), tensors, news, rng, device);
  // After the launch, so a launch that fails leaves the CPU scalars as they were; the program
  // read their old values when it was bound.
  if (host_exe_) host_exe_->run(host_bindings, host_outputs, {});
  calls_.fetch_add(1, std::memory_order_relaxed);
  std::vector<c10::IValue> out;
  out.reserve(prog_->returns.size());
  for (size_t k = 0; k < prog_->returns.size(); ++k) {
    const compiler::ReturnSpec& r = prog_->returns[k];
    const auto i = static_cast<size_t>(r.index);
    switch (r.kind) {
      case compiler::ReturnSpec::Kind::New: out.emplace_back(news[i]); break;
      case compiler::ReturnSpec::Kind::Binding: out.push_back(inputs[i]); break;
      case compiler::ReturnSpec::Kind::View: out.emplace_back(traced_view(tensors[i], r.view, "input", r.index)); break;
      case compiler::ReturnSpec::Kind::NewView:
        out.emplace_back(traced_view(news[i], r.view, "new tensor", r.index));
        break;
      case compiler::ReturnSpec::Kind::Undefined: out.push_back(constants_[k]); break;
      case compiler::ReturnSpec::Kind::List: TORCH_CHECK(false, "compiled graph: a list return");  // rejected when built
    }
  }
  return out;
}

// Compiles the program (and the host outputs' program): once the graph is verified.
void CompiledGraph::finish() {
  note_written_inputs();
  // Inputs are distinct tensors and new tensors fresh memory: one memory class each, so the
  // host executor keeps independent per-parameter chains (an optimizer step's) fused across
  // each other's writes. Inputs that share memory at run time take conservative() instead.
  runtime::MemoryClasses memory;
  for (int32_t i = 0; i < num_inputs_; ++i) memory.bindings.push_back(i);
  int32_t fresh = num_inputs_;
  for (const auto& o : prog_->outputs) memory.outputs.emplace_back(o.node, o.target >= 0 ? o.target : fresh++);
  finish_program(*prog_, compiler::output_nodes(*prog_), &memory);
  if (prog_->host_outputs.empty()) return;
  std::vector<int32_t> nodes;
  for (const auto& o : prog_->host_outputs) {
    TORCH_CHECK(o.target < num_inputs_, "compiled graph: host output target ", o.target, " out of range");
    nodes.push_back(o.node);
  }
  host_exe_ = runtime::host_runtime().compile(prog_->graph, nodes);
  // The bindings that run reads: each must be a scalar (a CPU tensor's value), checked per run.
  std::vector<uint8_t> needed(static_cast<size_t>(prog_->graph.size()), 0);
  for (int32_t n : nodes) needed[static_cast<size_t>(n)] = 1;
  for (int32_t i = prog_->graph.size() - 1; i >= 0; --i) {
    if (!needed[static_cast<size_t>(i)]) continue;
    const ir::Node& node = prog_->graph.node(i);
    if (node.kind == ir::OpKind::kParameter) host_reads_.push_back(static_cast<int32_t>(node.iattrs.at(0)));
    for (int32_t o : node.operands) needed[static_cast<size_t>(o)] = 1;
  }
}

// Where the new values of the CPU scalars the graph mutates go (tensors keeps them alive).
// A host run on the calling thread writes them once the program is enqueued; their old
// values are in the bindings already (read by value), so nobody waits for the device.
std::vector<runtime::OutputTarget> CompiledGraph::host_targets(const std::vector<c10::IValue>& inputs,
                                                               const std::vector<runtime::Binding>& bindings,
                                                               std::vector<at::Tensor>& tensors) const {
  for (int32_t b : host_reads_) {
    TPU_CHECK(b >= 0 && static_cast<size_t>(b) < bindings.size() &&
                  bindings[static_cast<size_t>(b)].kind == runtime::Binding::Kind::Scalar,
              "compiled graph: a CPU scalar it writes depends on input ", b, ", which is not a scalar");
  }
  std::vector<runtime::OutputTarget> targets;
  for (const auto& o : prog_->host_outputs) {
    const c10::IValue& v = inputs[static_cast<size_t>(o.target)];
    TPU_CHECK(v.isTensor(), "compiled graph: input ", o.target, " it writes is not a tensor");
    at::Tensor t = v.toTensor();
    TPU_CHECK(t.device().is_cpu() && t.sizes().equals(prog_->graph.node(o.node).shape), "compiled graph: input ",
              o.target, " it writes is not the CPU tensor it was traced with");
    targets.push_back(runtime::OutputTarget{o.node, tensor_binding(t)});
    tensors.push_back(std::move(t));
  }
  return targets;
}

// The program compiled knowing nothing about which memory its inputs share (built at the first
// call whose written inputs share storage with other inputs).
std::shared_ptr<compiler::Program> CompiledGraph::conservative() {
  std::lock_guard<std::mutex> lock(conservative_mutex_);
  if (!conservative_) {
    // The serializer's round trip copies every field of the plan (a list of them here would
    // drift from Program's).
    auto p = std::make_shared<compiler::Program>(compiler::deserialize_program(compiler::serialize_program(*prog_)));
    finish_program(*p, compiler::output_nodes(*p));
    conservative_ = std::move(p);
  }
  return conservative_;
}

// Binds a copy of each written input (kUnlessAliased) whose storage another input shares;
// true when some written input shares storage with another input.
bool CompiledGraph::snapshot_shared(const std::vector<at::Tensor>& tensors,
                                    std::vector<runtime::Binding>& bindings) const {
  c10::SmallVector<std::pair<const void*, int32_t>, 64> storages;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].defined()) storages.emplace_back(tensors[i].storage().data(), static_cast<int32_t>(i));
  }
  std::sort(storages.begin(), storages.end());
  bool shared = false;
  for (size_t a = 0; a < storages.size();) {
    size_t z = a + 1;
    while (z < storages.size() && storages[z].first == storages[a].first) ++z;
    for (size_t k = a; z - a > 1 && k < z; ++k) {
      const auto i = static_cast<size_t>(storages[k].second);
      if (snapshot_[i] == kUnlessAliased) bindings[i].snapshot = true;
      shared = shared || snapshot_[i] != kNever;
    }
    a = z;
  }
  return shared;
}

void CompiledGraph::note_written_inputs() {
  writes_inputs_ = std::any_of(snapshot_.begin(), snapshot_.end(), [](uint8_t s) { return s != kNever; });
}

}  // namespace torch_tpu::exec
