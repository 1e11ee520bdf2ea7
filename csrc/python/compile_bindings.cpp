// torch.compile support: a whole FX graph, lowered by torch_tpu/compile/lower_graph.py into one
// IR graph, becomes one compiled Program that runs on tpu tensors with strict semantics.
//
// Design: lowering (Python) happens once per graph specialization; the object returned here
// holds the compiled Program and a plan mapping the graph's inputs to bindings and its outputs
// to tensors, so a repeated call (CompiledGraph.run) is C++ only: bindings, new tensors,
// random-number counters and one launch through exec/launch.h, the same steps as the per-op
// path's execute().
//
// Disk tier: the plan is expressed in the Program itself (outputs; returns as ReturnSpec: New,
// Binding = a graph input, Undefined = None), so a compiled graph is stored and loaded with the
// same serializer, directory, versioning and checks as per-op programs
// (compiler/program_serialize.h, compiler/disk_cache.h). The key is the caller's key text (the
// ATen graph's code and input signature; compile/backend.py) packed 8 bytes per key word behind
// a tag word, so two graphs never share an entry (key words are compared exactly). A graph that
// returns a Python number other than None is not stored (ReturnSpec cannot describe it).
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/check.h"
#include "compiler/disk_cache.h"
#include "compiler/program_serialize.h"
#include "device/device.h"
#include "device/stream.h"
#include "exec/call.h"
#include "exec/disk_tier.h"
#include "exec/launch.h"
#include "exec/mode.h"
#include "ir/verifier.h"
#include "python/bindings.h"
#include "python/ir_convert.h"
#include "runtime/runtime.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

// One result of the FX graph: a new tensor of the program, an input passed through, a view of
// an input or of a new tensor, or a Python constant (None, an int) the graph returns as is.
struct GraphReturn {
  enum class Kind : uint8_t { New, Input, InputView, Constant, NewView } kind = Kind::New;
  int32_t index = 0;
  py::object constant;
  compiler::BindingView view;  // InputView, NewView
};

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

// A ("v" or "w", index, sizes, strides, offset, base sizes, base strides) return's geometry.
compiler::BindingView binding_view(const py::tuple& t) {
  return {t[2].cast<std::vector<int64_t>>(), t[3].cast<std::vector<int64_t>>(), t[4].cast<int64_t>(),
          t[5].cast<std::vector<int64_t>>(), t[6].cast<std::vector<int64_t>>()};
}

class CompiledGraph {
 public:
  // channels_last: indices of new tensors to allocate channels-last (4-d ones only);
  // host_outputs: (node, input) pairs, the new values of mutated CPU scalar inputs.
  CompiledGraph(const py::list& nodes, const py::list& outputs, const py::list& returns, uint64_t rng_counters,
                int32_t num_inputs, const std::vector<int32_t>& channels_last,
                const std::vector<std::pair<int32_t, int32_t>>& host_outputs)
      : prog_(std::make_shared<compiler::Program>()), num_inputs_(num_inputs), snapshot_(num_inputs, 0) {
    prog_->graph = graph_from_python(nodes);
    std::vector<int32_t> output_nodes;
    int32_t new_count = 0;
    for (const auto& o : outputs) {
      auto t = o.cast<py::tuple>();
      compiler::OutputSpec spec;
      spec.node = t[0].cast<int32_t>();
      spec.target = t[1].cast<int32_t>();
      // The third item: for a mutated input, whether it is bound as a copy; for a new tensor,
      // the complex dtype it has (the node is its view_as_real).
      if (t.size() > 2 && spec.target >= 0) spec.snapshot = t[2].cast<bool>();
      TPU_CHECK_VALUE(spec.node >= 0 && spec.node < prog_->graph.size(), "compiled graph: output node ", spec.node,
                      " out of range");
      if (spec.target < 0) {
        spec.new_index = new_count++;
        std::optional<c10::ScalarType> complex_dtype;
        if (t.size() > 2) complex_dtype = static_cast<c10::ScalarType>(t[2].cast<int>());
        prog_->new_tensors.push_back(compiler::new_tensor_for(prog_->graph.node(spec.node), complex_dtype));
      } else {
        TPU_CHECK_VALUE(spec.target < num_inputs, "compiled graph: mutated input ", spec.target, " out of range");
        snapshot_[static_cast<size_t>(spec.target)] = spec.snapshot ? kAlways : kUnlessAliased;
      }
      prog_->outputs.push_back(spec);
      output_nodes.push_back(spec.node);
    }
    for (const auto& r : returns) {
      auto t = r.cast<py::tuple>();
      auto kind = t[0].cast<std::string>();
      GraphReturn g;
      if (kind == "n") {
        g.kind = GraphReturn::Kind::New;
        g.index = t[1].cast<int32_t>();
        TPU_CHECK_VALUE(g.index >= 0 && g.index < new_count, "compiled graph: return of new tensor ", g.index,
                        " out of range");
      } else if (kind == "i" || kind == "v") {
        g.kind = kind == "i" ? GraphReturn::Kind::Input : GraphReturn::Kind::InputView;
        g.index = t[1].cast<int32_t>();
        TPU_CHECK_VALUE(g.index >= 0 && g.index < num_inputs, "compiled graph: returned input ", g.index,
                        " out of range");
        if (kind == "v") g.view = binding_view(t);
      } else if (kind == "w") {
        g.kind = GraphReturn::Kind::NewView;
        g.index = t[1].cast<int32_t>();
        TPU_CHECK_VALUE(g.index >= 0 && g.index < new_count, "compiled graph: view of new tensor ", g.index,
                        " out of range");
        g.view = binding_view(t);
      } else {
        g.kind = GraphReturn::Kind::Constant;
        g.constant = py::reinterpret_borrow<py::object>(t[1]);
      }
      prog_->returns.push_back(return_spec(g));
      returns_.push_back(std::move(g));
    }
    for (int32_t k : channels_last) {
      TPU_CHECK_VALUE(k >= 0 && k < new_count, "compiled graph: channels-last new tensor ", k, " out of range");
      auto& spec = prog_->new_tensors[static_cast<size_t>(k)];
      spec.channels_last = spec.shape.size() == 4;
    }
    for (auto [node, target] : host_outputs) {
      TPU_CHECK_VALUE(node >= 0 && node < prog_->graph.size() && target >= 0 && target < num_inputs,
                      "compiled graph: bad host output (", node, ", ", target, ")");
      prog_->host_outputs.push_back({node, target, -1});
    }
    prog_->rng_counters = rng_counters;
    py::gil_scoped_release no_gil;
    finish();
  }

  // The graph stored under key_text by an earlier process, compiled and ready; None on a miss,
  // when the disk tier is off, or for an entry that fails any check (discarded as corrupt).
  static std::optional<CompiledGraph> load(const std::string& key_text, int32_t num_inputs) {
    compiler::DiskCache* disk = compiler::process_disk_cache();
    if (disk == nullptr) return std::nullopt;
    std::vector<int64_t> key = disk_key(key_text);
    std::optional<std::string> payload;
    {
      py::gil_scoped_release no_gil;
      payload = disk->load(key);
    }
    if (!payload) return std::nullopt;
    try {
      auto prog = std::make_shared<compiler::Program>(compiler::deserialize_program(*payload));
      CompiledGraph g(prog, num_inputs);
      py::gil_scoped_release no_gil;
      ir::verify(prog->graph);
      g.finish();
      return g;
    } catch (const std::exception& e) {
      std::string why = e.what();
      if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) why = c10e->what_without_backtrace();
      disk->discard(key, why);
      return std::nullopt;
    }
  }

  // Writes this graph under key_text; false when the disk tier is off, the graph returns a
  // constant ReturnSpec cannot describe, or the write failed (the tier is an optimization).
  bool store(const std::string& key_text) const {
    compiler::DiskCache* disk = compiler::process_disk_cache();
    if (disk == nullptr || !storable_) return false;
    std::string payload = compiler::serialize_program(*prog_);
    py::gil_scoped_release no_gil;
    return disk->store(disk_key(key_text), payload);
  }

  // Runs the program on `inputs` (tpu tensors, CPU 0-d tensors and Python numbers, in the
  // graph's placeholder order) and returns the graph's results.
  py::list run(const py::list& inputs) {
    TPU_CHECK_VALUE(static_cast<int32_t>(inputs.size()) == num_inputs_, "compiled graph takes ", num_inputs_,
                    " inputs, got ", inputs.size());
    std::vector<runtime::Binding> bindings;
    std::vector<at::Tensor> tensors;
    bindings.reserve(inputs.size());
    tensors.reserve(inputs.size());
    bool device_known = false;
    c10::DeviceIndex device = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      py::handle h = inputs[i];
      runtime::Binding b;
      at::Tensor t;
      if (THPVariable_Check(h.ptr())) {
        t = THPVariable_Unpack(h.ptr());
        if (t.device().type() == c10::DeviceType::PrivateUse1) {
          if (!device_known) {
            device = t.device().index();
            device_known = true;
          }
          TPU_CHECK(t.device().index() == device, "compiled graph: inputs on tpu:", static_cast<int>(device),
                    " and tpu:", static_cast<int>(t.device().index()));
          if (t.is_conj() || t.is_neg()) {  // the graph computes on values: bind the view's value
            TPU_CHECK(snapshot_[i] == 0, "compiled graph: input ", i,
                      " is a conj() or neg view the graph writes; "
                      "call resolve_conj() on it first");
            t = t.resolve_conj().resolve_neg();
          }
          b = exec::tensor_binding(t);
          b.snapshot = snapshot_[i] == kAlways;
        } else {
          TPU_CHECK(t.dim() == 0 && t.device().is_cpu(), "compiled graph: input ", i, " is on ", t.device().str(),
                    "; expected a tpu tensor");
          b = scalar_binding(t.item(), t.scalar_type());
          t = at::Tensor();
        }
      } else if (py::isinstance<py::bool_>(h)) {
        b = scalar_binding(c10::Scalar(h.cast<bool>()), c10::kBool);
      } else if (py::isinstance<py::int_>(h)) {
        b = scalar_binding(c10::Scalar(h.cast<int64_t>()), c10::kLong);
      } else if (py::isinstance<py::float_>(h)) {
        b = scalar_binding(c10::Scalar(h.cast<double>()), c10::kDouble);
      } else {
        TPU_CHECK_TYPE(h.is_none(), "compiled graph: unsupported input ", i, " of type ",
                       std::string(py::str(py::type::handle_of(h))));
        b.kind = runtime::Binding::Kind::Scalar;
      }
      bindings.push_back(std::move(b));
      tensors.push_back(std::move(t));
    }
    if (!device_known) device = device::current();
    // Written inputs sharing storage with other inputs: the memory classes do not hold.
    const std::shared_ptr<compiler::Program>& prog =
        writes_inputs_ && snapshot_shared(tensors, bindings) ? conservative() : prog_;
    std::vector<at::Tensor> host_tensors;
    std::vector<runtime::OutputTarget> host_outputs;
    if (host_exe_) host_outputs = host_targets(inputs, bindings, host_tensors);
    std::vector<at::Tensor> news;
    {
      py::gil_scoped_release no_gil;
      // Pending fused work may write what the graph reads: it runs first.
      if (exec::mode() == exec::Mode::Fused) device::flush_pending(device, device::FlushCause::kStreamEvent);
      runtime::RngState rng = exec::reserve_rng(*prog_, std::nullopt, device);
      news.reserve(prog_->new_tensors.size());
      for (const auto& spec : prog_->new_tensors) news.push_back(exec::new_device_tensor(spec, device));
      std::vector<runtime::OutputTarget> outputs;
      outputs.reserve(prog_->outputs.size());
      for (const auto& o : prog_->outputs) {
        if (o.target >= 0) {
          const at::Tensor& t = tensors[static_cast<size_t>(o.target)];
          TPU_CHECK(t.defined() && t.sizes().equals(prog_->graph.node(o.node).shape),
                    "compiled graph: mutated input ", o.target, " changed shape");
          outputs.push_back(runtime::OutputTarget{o.node, exec::tensor_binding(t)});
        } else {
          const at::Tensor& t = news[static_cast<size_t>(o.new_index)];
          outputs.push_back(runtime::OutputTarget{o.node, exec::tensor_binding(t)});
        }
      }
      // The scalars the host run reads: the launch moves the bindings away.
      std::vector<runtime::Binding> host_bindings(host_exe_ ? bindings.size() : 0);
      for (int32_t b : host_reads_) host_bindings[static_cast<size_t>(b)] = bindings[static_cast<size_t>(b)];
      exec::launch_program(prog, bindings, std::move(outputs), tensors, news, rng, device);
      // After the launch, so a launch that fails leaves the CPU scalars as they were; the
      // program read their old values when it was bound.
      if (host_exe_) host_exe_->run(host_bindings, host_outputs, {});
    }
    ++calls_;
    py::list out;
    for (const auto& r : returns_) {
      switch (r.kind) {
        case GraphReturn::Kind::New: out.append(py::cast(news[static_cast<size_t>(r.index)])); break;
        case GraphReturn::Kind::Input: out.append(inputs[static_cast<size_t>(r.index)]); break;
        case GraphReturn::Kind::InputView:
          out.append(py::cast(traced_view(tensors[static_cast<size_t>(r.index)], r.view, "input", r.index)));
          break;
        case GraphReturn::Kind::NewView:
          out.append(py::cast(traced_view(news[static_cast<size_t>(r.index)], r.view, "new tensor", r.index)));
          break;
        case GraphReturn::Kind::Constant: out.append(r.constant); break;
      }
    }
    return out;
  }

  uint64_t calls() const { return calls_; }

  // Compiles the program (and the host outputs' program): once the graph is verified.
  void finish() {
    note_written_inputs();
    // Inputs are distinct tensors and new tensors fresh memory: one memory class each, so the
    // host executor keeps independent per-parameter chains (an optimizer step's) fused across
    // each other's writes. Inputs that share memory at run time take conservative() instead.
    runtime::MemoryClasses memory;
    for (int32_t i = 0; i < num_inputs_; ++i) memory.bindings.push_back(i);
    int32_t fresh = num_inputs_;
    for (const auto& o : prog_->outputs) memory.outputs.emplace_back(o.node, o.target >= 0 ? o.target : fresh++);
    exec::finish_program(*prog_, compiler::output_nodes(*prog_), &memory);
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

  int32_t num_nodes() const { return prog_->graph.size(); }
  std::string describe() const { return prog_->executable->describe(); }

 private:
  // From a deserialized Program: rebuilds the plan from its outputs and returns, checking
  // every index against the graph's input count (payloads are untrusted).
  CompiledGraph(std::shared_ptr<compiler::Program> prog, int32_t num_inputs)
      : prog_(std::move(prog)), num_inputs_(num_inputs), snapshot_(num_inputs, 0) {
    const int32_t new_count = static_cast<int32_t>(prog_->new_tensors.size());
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
      GraphReturn g;
      switch (r.kind) {
        case compiler::ReturnSpec::Kind::New:
          TORCH_CHECK(r.index >= 0 && r.index < new_count, "compiled graph entry: return ", r.index, " out of range");
          g.kind = GraphReturn::Kind::New;
          break;
        case compiler::ReturnSpec::Kind::Binding:
        case compiler::ReturnSpec::Kind::View:
          TORCH_CHECK(r.index >= 0 && r.index < num_inputs, "compiled graph entry: input ", r.index, " out of range");
          g.kind = r.kind == compiler::ReturnSpec::Kind::View ? GraphReturn::Kind::InputView : GraphReturn::Kind::Input;
          g.view = r.view;
          break;
        case compiler::ReturnSpec::Kind::NewView:
          TORCH_CHECK(r.index >= 0 && r.index < new_count, "compiled graph entry: view of new tensor ", r.index,
                      " out of range");
          g.kind = GraphReturn::Kind::NewView;
          g.view = r.view;
          break;
        case compiler::ReturnSpec::Kind::Undefined:
          g.kind = GraphReturn::Kind::Constant;
          g.constant = py::none();
          break;
        case compiler::ReturnSpec::Kind::List: TORCH_CHECK(false, "compiled graph entry: a list return");
      }
      g.index = r.index;
      returns_.push_back(std::move(g));
    }
  }

  // The ReturnSpec stored for a return; marks the graph unstorable for a non-None constant.
  compiler::ReturnSpec return_spec(const GraphReturn& g) {
    compiler::ReturnSpec r;
    r.index = g.index;
    switch (g.kind) {
      case GraphReturn::Kind::New: r.kind = compiler::ReturnSpec::Kind::New; break;
      case GraphReturn::Kind::Input: r.kind = compiler::ReturnSpec::Kind::Binding; break;
      case GraphReturn::Kind::InputView:
        r.kind = compiler::ReturnSpec::Kind::View;
        r.view = g.view;
        break;
      case GraphReturn::Kind::NewView:
        r.kind = compiler::ReturnSpec::Kind::NewView;
        r.view = g.view;
        break;
      case GraphReturn::Kind::Constant:
        r.kind = compiler::ReturnSpec::Kind::Undefined;
        if (!g.constant.is_none()) storable_ = false;
        break;
    }
    return r;
  }

  // Where the new values of the CPU scalars the graph mutates go (tensors keeps them alive).
  // A host run on the calling thread writes them once the program is enqueued; their old
  // values are in the bindings already (read by value), so nobody waits for the device.
  std::vector<runtime::OutputTarget> host_targets(const py::list& inputs, const std::vector<runtime::Binding>& bindings,
                                                  std::vector<at::Tensor>& tensors) const {
    for (int32_t b : host_reads_) {
      TPU_CHECK(b >= 0 && static_cast<size_t>(b) < bindings.size() &&
                    bindings[static_cast<size_t>(b)].kind == runtime::Binding::Kind::Scalar,
                "compiled graph: a CPU scalar it writes depends on input ", b, ", which is not a scalar");
    }
    std::vector<runtime::OutputTarget> targets;
    for (const auto& o : prog_->host_outputs) {
      py::handle h = inputs[static_cast<size_t>(o.target)];
      TPU_CHECK(THPVariable_Check(h.ptr()), "compiled graph: input ", o.target, " it writes is not a tensor");
      at::Tensor t = THPVariable_Unpack(h.ptr());
      TPU_CHECK(t.device().is_cpu() && t.sizes().equals(prog_->graph.node(o.node).shape), "compiled graph: input ",
                o.target, " it writes is not the CPU tensor it was traced with");
      targets.push_back(runtime::OutputTarget{o.node, exec::tensor_binding(t)});
      tensors.push_back(std::move(t));
    }
    return targets;
  }

  // The program compiled knowing nothing about which memory its inputs share (built at the
  // first call whose written inputs share storage with other inputs).
  const std::shared_ptr<compiler::Program>& conservative() {
    if (!conservative_) {
      // The serializer's round trip copies every field of the plan (a list of them here would
      // drift from Program's).
      auto p = std::make_shared<compiler::Program>(compiler::deserialize_program(compiler::serialize_program(*prog_)));
      exec::finish_program(*p, compiler::output_nodes(*p));
      conservative_ = std::move(p);
    }
    return conservative_;
  }

  // Binds a copy of each written input (kUnlessAliased) whose storage another input shares;
  // true when some written input shares storage with another input.
  bool snapshot_shared(const std::vector<at::Tensor>& tensors, std::vector<runtime::Binding>& bindings) const {
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

  void note_written_inputs() {
    writes_inputs_ = std::any_of(snapshot_.begin(), snapshot_.end(), [](uint8_t s) { return s != kNever; });
  }

  // Tag word, byte count, then the key text 8 bytes per word (zero-padded).
  static std::vector<int64_t> disk_key(const std::string& text) {
    static const std::string kTag = "torch_tpu compiled graph 1";
    std::vector<int64_t> key;
    key.reserve(2 + (text.size() + 7) / 8);
    key.push_back(static_cast<int64_t>(compiler::fnv1a(kTag.data(), kTag.size())));
    key.push_back(static_cast<int64_t>(text.size()));
    for (size_t i = 0; i < text.size(); i += 8) {
      uint64_t w = 0;
      std::memcpy(&w, text.data() + i, std::min<size_t>(8, text.size() - i));
      key.push_back(static_cast<int64_t>(w));
    }
    return key;
  }

  static runtime::Binding scalar_binding(const c10::Scalar& s, c10::ScalarType dtype) {
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

  std::shared_ptr<compiler::Program> prog_;
  int32_t num_inputs_;
  // Per input: whether to bind a copy. A written input the program reads after the write is
  // always copied (lower_graph.py, _needs_snapshot); one it does not is copied only when
  // another input shares its memory (which the analysis cannot see).
  enum Snapshot : uint8_t { kNever, kAlways, kUnlessAliased };
  std::vector<uint8_t> snapshot_;
  bool writes_inputs_ = false;  // some input is written (not kNever)
  std::shared_ptr<compiler::Program> conservative_;
  std::vector<GraphReturn> returns_;
  std::shared_ptr<runtime::Executable> host_exe_;  // computes host_outputs (null: none)
  std::vector<int32_t> host_reads_;                // bindings host_exe_ reads
  bool storable_ = true;
  uint64_t calls_ = 0;
};

}  // namespace

// Registers the lowering path (exec::lowered_op_kernel) as the PrivateUse1 kernel of a user op
// (torch_tpu.lowering.register_lowering). The backend fallback already reaches every op
// without a kernel, but ops made with torch.library.custom_op carry a
// CompositeExplicitAutograd kernel (their Python implementation), which the dispatcher
// prefers over a backend fallback: a direct PrivateUse1 kernel ranks above it.
static void register_lowered_op(const std::string& qualname, const std::string& overload) {
  static std::vector<std::unique_ptr<torch::Library>> libraries;  // registrations live as long as the process
  static std::set<std::string> registered;
  std::string full = overload.empty() || overload == "default" ? qualname : qualname + "." + overload;
  if (!registered.insert(full).second) return;
  auto sep = qualname.find("::");
  TPU_CHECK_VALUE(sep != std::string::npos, "register_lowering: '", qualname, "' is not a qualified op name");
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, qualname.substr(0, sep), c10::DispatchKey::PrivateUse1,
                                              __FILE__, __LINE__);
  const std::string name = full.substr(sep + 2);  // the dispatcher copies it
  lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&exec::lowered_op_kernel>());
  libraries.push_back(std::move(lib));
}

void init_compile_bindings(py::module_& m) {
  m.def("_register_lowered_op", &register_lowered_op, py::arg("qualname"), py::arg("overload"),
        "Makes tpu calls of a user op go through its registered lowering.");
  m.def("_set_lowering_fingerprint", &exec::disk_tier::set_lowering_fingerprint, py::arg("name"), py::arg("overload"),
        py::arg("fingerprint"),
        "Keys an op's programs in the disk tier by its user lowering's code (schema overload name: '' for default).");
  py::class_<CompiledGraph>(m, "_CompiledGraph", "One FX graph compiled as one program (torch.compile(backend='tpu')).")
      .def(py::init<const py::list&, const py::list&, const py::list&, uint64_t, int32_t, const std::vector<int32_t>&,
                    const std::vector<std::pair<int32_t, int32_t>>&>(),
           py::arg("nodes"), py::arg("outputs"), py::arg("returns"), py::arg("rng_counters"), py::arg("num_inputs"),
           py::arg("channels_last") = std::vector<int32_t>{},
           py::arg("host_outputs") = std::vector<std::pair<int32_t, int32_t>>{})
      .def("run", &CompiledGraph::run, py::arg("inputs"))
      .def_static("load", &CompiledGraph::load, py::arg("key"), py::arg("num_inputs"),
                  "The graph an earlier process stored under key (disk tier), or None.")
      .def("store", &CompiledGraph::store, py::arg("key"), "Writes the graph to the disk tier under key.")
      .def_property_readonly("calls", &CompiledGraph::calls)
      .def_property_readonly("num_nodes", &CompiledGraph::num_nodes)
      .def("describe", &CompiledGraph::describe);
}

}  // namespace torch_tpu::python
