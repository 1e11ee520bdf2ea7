// The per-op path: every ATen op without a dedicated tpu kernel lands here (the PrivateUse1
// boxed fallback). One pass over the arguments writes the cache key and the bindings
// (gather.h); a hit runs the cached program on the current stream (strict) or inline (debug).
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "common/check.h"
#include "compiler/program_cache.h"
#include "device/allocator.h"
#include "device/device.h"
#include "device/generator.h"
#include "device/stream.h"
#include "exec/call.h"
#include "exec/disk_tier.h"
#include "exec/fused.h"
#include "exec/gather.h"
#include "exec/recompiles.h"
#include "exec/launch.h"
#include "exec/metrics.h"
#include "exec/mode.h"
#include "exec/poison.h"
#include "exec/profiler.h"

namespace torch_tpu::exec {
namespace {

CompileHook g_compile_hook = nullptr;

// Queued execution of one program: owns the bindings and the tensors they point into.
struct ProgramWork final : device::Work {
  std::shared_ptr<compiler::Program> program;
  std::vector<runtime::Binding> inputs;
  std::vector<runtime::OutputTarget> outputs;
  // Storages, not tensors: the worker drops these, and dropping a tensor reference that has a
  // Python object takes the GIL (common/blocking_wait.h); storages seldom have one. Measured:
  // TinyGPT strict step 9% faster than with tensors (bench/ab_switch.py, 2 runs of 11 rounds).
  std::vector<c10::Storage> keep_alive;
  runtime::RngState rng;
  const OpInfo* op = nullptr;  // for the error message (null: a compiled graph)
  c10::DeviceIndex device = 0;
  c10::StreamId stream_id = 0;
  bool launch_only() const override { return true; }  // runtime/completion.h
  void run() override {
    const int64_t start = profiler::enabled() ? profiler::now_ns() : 0;
    run_program();
    if (start != 0) {
      profiler::record_program(op, nullptr, "", device, stream_id, start,
                               profiler::binding_bytes(inputs, outputs, &program->reads_binding));
    }
  }
  void run_program() {
    // A program queued before an earlier one failed may read its lost values (exec/poison.h):
    // what depends on them is lost; a runtime that cannot tell skips the program.
    std::optional<Loss> input_loss;
    if (any_poisoned()) {
      for (const c10::Storage& s : keep_alive) {
        auto loss = lost_value(s.unsafeGetStorageImpl());
        if (!loss) continue;
        for (runtime::Binding& b : inputs) b.lost = b.lost || in_storage(b.data, s);
        if (!input_loss) input_loss = std::move(loss);
      }
      if (input_loss && !program->executable->reports_fates()) {
        poison_outputs(written_storages(), fresh_outputs(),
                       std::vector<runtime::OutputFate>(outputs.size(), runtime::OutputFate::kUntouched), *input_loss);
        return;
      }
    }
    try {
      program->executable->run(inputs, outputs, rng);
    } catch (c10::Error& e) {
      // Raised at the next synchronization, far from the call: say which op it was.
      e.add_context("torch_tpu: raised when a queued " +
                    (op != nullptr ? op->qualname + (op->overload.empty() ? "" : "." + op->overload) : "compiled graph") +
                    " ran (errors of queued work surface at the next synchronization; "
                    "TORCH_TPU_LAUNCH_BLOCKING=1 raises them at the call)");
      poison_outputs(written_storages(), fresh_outputs(), failure_fates(), loss_of(e));
      throw;
    }
    if (input_loss) poison_outputs(written_storages(), fresh_outputs(), fates(), *input_loss);
  }

  static bool in_storage(const void* data, const c10::Storage& s) {
    const char* lo = static_cast<const char*>(s.data());
    const char* p = static_cast<const char*>(data);
    return p != nullptr && lo != nullptr && p >= lo && p < lo + s.nbytes();
  }
  // Per output: the kept storage it writes (found on failure only: nothing on the hot path).
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> written_storages() const {
    std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> written;
    for (const runtime::OutputTarget& o : outputs) {
      auto it = std::find_if(keep_alive.begin(), keep_alive.end(),
                             [&](const c10::Storage& s) { return in_storage(o.dest.data, s); });
      written.emplace_back(it != keep_alive.end() ? it->getWeakStorageImpl()
                                                  : c10::weak_intrusive_ptr<c10::StorageImpl>(
                                                        c10::intrusive_ptr<c10::StorageImpl>()));
    }
    return written;
  }
  // Per output: the program does not read its memory (a new result, an out= or copy_ target), so
  // it holds no value the op keeps; an in-place update reads its target.
  std::vector<uint8_t> fresh_outputs() const {
    std::vector<uint8_t> fresh;
    for (const runtime::OutputTarget& o : outputs) {
      bool read = false;
      for (size_t b = 0; b < inputs.size() && !read; ++b) {
        read = b < program->reads_binding.size() && program->reads_binding[b] && inputs[b].kind == runtime::Binding::Kind::Tensor &&
               same_storage(inputs[b].data, o.dest.data);
      }
      fresh.push_back(read ? 0 : 1);
    }
    return fresh;
  }
  bool same_storage(const void* a, const void* b) const {
    for (const c10::Storage& s : keep_alive) {
      if (in_storage(a, s)) return in_storage(b, s);
    }
    return false;
  }
  const std::vector<runtime::OutputFate>& fates() const {
    static const std::vector<runtime::OutputFate> unknown;  // every output lost
    return program->executable->reports_fates() ? runtime::last_run_fates() : unknown;
  }
  const std::vector<runtime::OutputFate>& failure_fates() const {
    static const std::vector<runtime::OutputFate> unknown;  // every output lost
    return program->executable->reports_failure_fates() ? runtime::last_run_fates() : unknown;
  }
};

void push_return(const compiler::ReturnSpec& r, const std::vector<at::Tensor>& news, const CallState& st,
                 torch::jit::Stack* stack) {
  switch (r.kind) {
    case compiler::ReturnSpec::Kind::New: torch::jit::push(*stack, news[static_cast<size_t>(r.index)]); break;
    case compiler::ReturnSpec::Kind::Binding: torch::jit::push(*stack, st.tensors[static_cast<size_t>(r.index)]); break;
    case compiler::ReturnSpec::Kind::Undefined: torch::jit::push(*stack, at::Tensor()); break;
    case compiler::ReturnSpec::Kind::View:
    case compiler::ReturnSpec::Kind::NewView:
      TORCH_CHECK(false, "a per-op program returns a view");
      break;
    case compiler::ReturnSpec::Kind::List: {
      std::vector<at::Tensor> items;
      for (const auto& item : r.items) {
        items.push_back(item.kind == compiler::ReturnSpec::Kind::New ? news[static_cast<size_t>(item.index)]
                                                                    : st.tensors[static_cast<size_t>(item.index)]);
      }
      torch::jit::push(*stack, c10::List<at::Tensor>(items));
      break;
    }
  }
}

// The memory format of an op's k-th new result (OutputLayout): for a 4-d or 5-d result, the
// suggested format of the op's first (convolutions: any channels-last) 4-d or 5-d tensor
// argument, or of the k-th tensor of a `_foreach_` op's first list. Programs do not depend on
// it (bindings carry strides), so it is decided per call, not keyed.
at::MemoryFormat result_format(const OpInfo& info, const CallState& st, c10::ArrayRef<c10::IValue> args, size_t k,
                               c10::IntArrayRef shape) {
  if ((shape.size() != 4 && shape.size() != 5) || info.layout == OutputLayout::kContiguous) {
    return at::MemoryFormat::Contiguous;
  }
  if (info.layout == OutputLayout::kPerListElement) {
    const bool matched = k < st.tensors.size() && st.tensors[k].defined() && st.tensors[k].sizes().equals(shape);
    return matched ? st.tensors[k].suggest_memory_format() : at::MemoryFormat::Contiguous;
  }
  for (const at::Tensor& t : st.tensors) {
    if (!t.defined() || t.dim() < info.layout_min_rank || t.dim() > 5) continue;
    const at::MemoryFormat f = t.suggest_memory_format();
    if (info.layout == OutputLayout::kFirstInput || f != at::MemoryFormat::Contiguous) {
      const bool transposed = info.transposed_arg >= 0 && args[static_cast<size_t>(info.transposed_arg)].toBool();
      return f == at::MemoryFormat::ChannelsLast3d && transposed ? at::MemoryFormat::Contiguous : f;
    }
  }
  return at::MemoryFormat::Contiguous;
}

// An out= tensor of another shape is resized as ATen's out= kernels do: to the layout the
// functional op would give its result (a channels-last input gives a channels-last result, so
// `torch.abs(x)`, whose composite calls abs.out on an empty tensor, keeps x's layout). Resizing
// flushes fused work first, or waits for queued work, when the memory may move.
void resize_out(at::Tensor& t, const std::vector<int64_t>& node_shape, const OpInfo& info, const CallState& st,
                c10::ArrayRef<c10::IValue> args, size_t k) {
  // A complex tensor is written through its view_as_real: the node has a trailing dim of 2.
  const c10::IntArrayRef shape =
      t.is_complex() ? c10::IntArrayRef(node_shape).slice(0, node_shape.size() - 1) : c10::IntArrayRef(node_shape);
  if (t.sizes().equals(shape)) return;
  // Resizing may move the memory that an argument sharing it is read from (`torch.cat([a, a], out=a)`).
  for (const at::Tensor& other : st.tensors) {
    if (other.defined() && &other != &t && other.numel() > 0 && other.storage().is_alias_of(t.storage())) {
      TORCH_CHECK(false, "unsupported operation: the out= tensor of ", info.qualname,
                  " must be resized but shares memory with an input. Please clone() the input first.");
    }
  }
  t.resize_(shape, result_format(info, st, args, k, shape));
}

// A written tensor may not share only part of its memory with another argument (`a[1:].copy_(a[:-1])`,
// `torch.add(a[1:], a[:-1], out=a[:-1])`): the result would depend on the order elements are
// written in. Raised as CPU's TensorIterator ops raise it; a full alias (in-place ops) is fine.
// A `_foreach_` op is checked as the per-tensor ops it stands for: element k of a list against
// element k of the other lists (and single tensors), not every pair: all pairs cost 1.7 ms per
// call of a 3-list op over 200 parameters.
void check_no_partial_overlap(const at::Tensor& written, int32_t target, const CallState& st, const OpInfo& info) {
  if (written.numel() == 0) return;
  if (!info.writes_overlapping) at::assert_no_internal_overlap(written);
  const c10::StorageImpl* storage = written.storage().unsafeGetStorageImpl();
  auto check = [&](const at::Tensor& t) {
    if (!t.defined() || t.storage().unsafeGetStorageImpl() != storage || t.is_same(written) ||
        (info.value_read_first && t.dim() == 0)) {
      return;
    }
    TORCH_CHECK(at::get_overlap_status(written, t) != at::MemOverlapStatus::Partial,
                "unsupported operation: some elements of the input tensor and the written-to tensor refer "
                "to a single memory location. Please clone() the tensor before performing the operation.");
  };
  if (info.layout != OutputLayout::kPerListElement) {
    for (const at::Tensor& t : st.tensors) check(t);
    return;
  }
  const auto end_of = [&](size_t arg) {
    return arg + 1 < st.first_binding.size() ? st.first_binding[arg + 1] : static_cast<int32_t>(st.tensors.size());
  };
  size_t list = 0;
  while (list + 1 < st.first_binding.size() && end_of(list) <= target) ++list;
  const int32_t k = target - st.first_binding[list];
  for (size_t arg = 0; arg < st.first_binding.size(); ++arg) {
    const int32_t begin = st.first_binding[arg], count = end_of(arg) - begin;
    if (count > k) check(st.tensors[static_cast<size_t>(begin + k)]);
    if (count == 1 && k > 0) check(st.tensors[static_cast<size_t>(begin)]);
  }
}

void execute(const std::shared_ptr<compiler::Program>& prog, const OpInfo& info, CallState& st, size_t nargs,
             torch::jit::Stack* stack) {
  runtime::RngState rng = reserve_rng(*prog, st.generator, st.device.index());
  std::vector<at::Tensor> news;
  news.reserve(prog->new_tensors.size());
  const auto args = torch::jit::last(*stack, nargs);
  for (size_t k = 0; k < prog->new_tensors.size(); ++k) {
    const auto& spec = prog->new_tensors[k];
    news.push_back(new_device_tensor(spec, st.device.index(), result_format(info, st, args, k, spec.shape)));
  }
  if (mode() == Mode::Fused) {
    for (size_t k = 0; k < prog->outputs.size(); ++k) {
      const auto& o = prog->outputs[k];
      if (o.target < 0) continue;
      resize_out(st.tensors[static_cast<size_t>(o.target)], prog->graph.node(o.node).shape, info, st, args, k);
      check_no_partial_overlap(st.tensors[static_cast<size_t>(o.target)], o.target, st, info);
    }
    fused_record(prog, info, st, news, rng);
    torch::jit::drop(*stack, nargs);
    for (const auto& r : prog->returns) push_return(r, news, st, stack);
    return;
  }
  std::vector<runtime::OutputTarget> outputs;
  outputs.reserve(prog->outputs.size());
  for (size_t k = 0; k < prog->outputs.size(); ++k) {
    const auto& o = prog->outputs[k];
    if (o.target >= 0) {
      at::Tensor& t = st.tensors[static_cast<size_t>(o.target)];
      resize_out(t, prog->graph.node(o.node).shape, info, st, args, k);
      check_no_partial_overlap(t, o.target, st, info);
      outputs.push_back(runtime::OutputTarget{o.node, tensor_binding(t)});
    } else {
      outputs.push_back(runtime::OutputTarget{o.node, tensor_binding(news[static_cast<size_t>(o.new_index)])});
    }
  }
  launch_program(prog, st.bindings, std::move(outputs), st.tensors, news, rng, st.device.index(), &info);
  torch::jit::drop(*stack, nargs);
  for (const auto& r : prog->returns) push_return(r, news, st, stack);
}

void run_cpu_fallback(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack) {
  std::string name = info.qualname + (info.overload.empty() ? "" : "." + info.overload);
  if (profiler::enabled()) profiler::record_fallback(name);
  if (record_fallback(name)) {
    TORCH_WARN("torch_tpu: '", name, "' has no tpu lowering; running it on the CPU (TORCH_TPU_FALLBACK=cpu). "
               "This copies its inputs to the host and back.");
  }
  device::synchronize_device(-1);
  at::native::cpu_fallback(op, stack);
}

thread_local CallState t_call;

}  // namespace

runtime::Binding tensor_binding(const at::Tensor& t) {
  runtime::Binding b;
  b.kind = runtime::Binding::Kind::Tensor;
  b.dtype = t.scalar_type();
  b.data = t.numel() ? static_cast<char*>(t.storage().mutable_data()) + t.storage_offset() * t.itemsize() : nullptr;
  b.sizes.assign(t.sizes().begin(), t.sizes().end());
  b.strides.assign(t.strides().begin(), t.strides().end());
  if (c10::isComplexType(b.dtype)) {  // bound as its view_as_real: the runtimes are real-only
    b.dtype = c10::toRealValueType(b.dtype);
    for (auto& s : b.strides) s *= 2;
    b.sizes.push_back(2);
    b.strides.push_back(1);
  }
  return b;
}

void set_compile_hook(CompileHook hook) { g_compile_hook = hook; }

runtime::RngState reserve_rng(const compiler::Program& prog, const std::optional<at::Generator>& gen,
                              c10::DeviceIndex device) {
  if (prog.rng_counters == 0) return {};
  at::Generator g = gen.has_value() && gen->defined() ? *gen : device::default_generator(device);
  auto [seed, offset] = g.get<device::TpuGenerator>()->reserve(prog.rng_counters);
  return runtime::RngState{seed, offset};
}

at::Tensor new_device_tensor(const compiler::NewTensorSpec& spec, c10::DeviceIndex device, at::MemoryFormat format) {
  auto& alloc = device::DeviceAllocator::get();
  int64_t n = 1;
  for (auto s : spec.shape) n *= s;
  size_t bytes = static_cast<size_t>(n) * c10::elementSize(spec.dtype);
  auto storage = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), bytes,
                                                       alloc.allocate_on(device, bytes), &alloc, /*resizable=*/true);
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                    c10::scalarTypeToTypeMeta(spec.dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(spec.shape);
  const size_t rank = spec.shape.size();
  if (rank == 4 && (spec.channels_last || format == at::MemoryFormat::ChannelsLast)) {
    t.unsafeGetTensorImpl()->empty_tensor_restride(at::MemoryFormat::ChannelsLast);
  } else if (rank == 5 && format == at::MemoryFormat::ChannelsLast3d) {
    t.unsafeGetTensorImpl()->empty_tensor_restride(at::MemoryFormat::ChannelsLast3d);
  }
  return t;
}

void launch_program(const std::shared_ptr<compiler::Program>& prog, std::vector<runtime::Binding>& inputs,
                    std::vector<runtime::OutputTarget>&& outputs, const std::vector<at::Tensor>& keep,
                    const std::vector<at::Tensor>& news, runtime::RngState rng, c10::DeviceIndex device,
                    const OpInfo* op) {
  metrics().programs_executed++;
  c10::Stream stream = device::current_stream(device);
  const bool debug = mode() == Mode::Debug;
  if (debug) device::synchronize_stream(stream);
  if (debug || (prog->run_inline_when_idle && device::query_stream(stream))) {
    // On the calling thread: nothing is queued ahead of it, so the order is the queue's, and
    // the caller's references keep every tensor alive for the duration. The stream's last work
    // may have failed since this op was called: its error is raised here, as enqueue would, and
    // a value it lost raises when this op would read or write it, instead of being used.
    device::raise_pending_error(stream);
    if (any_poisoned()) {
      for (const at::Tensor& t : keep) check_not_poisoned(t);
    }
    runtime::ExecutionDeviceGuard on(device);
    const int64_t start = profiler::enabled() ? profiler::now_ns() : 0;
    prog->executable->run(inputs, outputs, rng);
    if (start != 0) {
      profiler::record_program(op, nullptr, "", device, stream.id(), start,
                               profiler::binding_bytes(inputs, outputs, &prog->reads_binding));
    }
  } else {
    auto work = std::make_unique<ProgramWork>();
    work->program = prog;
    work->rng = rng;
    work->op = op;
    work->device = device;
    work->stream_id = stream.id();
    work->outputs = std::move(outputs);
    work->inputs = std::move(inputs);
    work->keep_alive.reserve(keep.size() + news.size());
    for (const auto& t : keep) {
      if (t.defined()) work->keep_alive.push_back(t.storage());
    }
    for (const auto& t : news) work->keep_alive.push_back(t.storage());
    device::enqueue(stream, std::move(work));
  }
}

namespace {

// An op whose lowering needed concrete scalars keys on them from now on: in every call, or
// only in calls with complex tensors when this one had some.
void learn_bakes_scalars(OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  (has_complex_tensor(args) ? info.bake_scalars_complex : info.bake_scalars) = true;
}

}  // namespace

void run_lowered(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo& info = op_info(op);
  if (info.layout == OutputLayout::kPerListElement && run_foreach_across_devices(op, stack)) return;
  TPU_CHECK_NOT_IMPLEMENTED(!info.is_view, "view op '", info.qualname, ".", info.overload,
                            "' has no tpu kernel (views must be registered as metadata kernels)");
  const size_t nargs = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, nargs);
  // The thread's reusable state, unless a kernel re-enters this path (then a fresh one).
  static thread_local int depth = 0;
  CallState local;
  CallState& st = depth == 0 ? t_call : local;
  struct DepthGuard {
    DepthGuard() { ++depth; }
    ~DepthGuard() { --depth; }
  } depth_guard;
  // The thread's CallState outlives the call: drop its tensor references when the call ends
  // (normally or by an exception), or the last op's inputs would stay alive (and their device
  // memory allocated) until the thread's next op.
  struct ReleaseGuard {
    CallState& st;
    ~ReleaseGuard() {
      st.tensors.clear();
      st.bindings.clear();
      st.generator.reset();
    }
  } release_guard{st};
  gather(st, info, args);
  metrics().ops_dispatched++;
  auto& cache = compiler::eager_cache();
  std::shared_ptr<compiler::Program> prog = cache.find(st.key, st.hash);
  if (prog) {
    metrics().cache_hits++;
  } else {
    metrics().cache_misses++;
    note_eager_miss(info, st);  // the recompile explainer: only on a miss
    TPU_CHECK(g_compile_hook != nullptr, "torch_tpu is not initialised: import torch_tpu first");
    auto start = std::chrono::steady_clock::now();
    auto add_compile_time = [&] {
      metrics().compile_ns += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    };
    // The disk tier first (exec/disk_tier.h): a program an earlier process compiled.
    disk_tier::Lookup found = disk_tier::load(op, info, st);
    if (found.bakes_scalars && !st.bake) {
      learn_bakes_scalars(info, args);  // an earlier process learned this op keys on its scalar values
      gather(st, info, args);
      prog = cache.find(st.key, st.hash);
      if (!prog) found = disk_tier::load(op, info, st);
    }
    if (!prog) prog = std::move(found.program);
    if (!prog) {
      prog = g_compile_hook(op, info, args, st);
      if (!prog) {
        add_compile_time();
        run_cpu_fallback(op, info, stack);
        return;
      }
      metrics().programs_compiled++;
      std::vector<int64_t> unbaked_key;
      if (prog->baked_scalars && !st.bake) {
        if (disk_tier::enabled()) unbaked_key = disk_tier::stable_key(op, st);
        learn_bakes_scalars(info, args);  // from now on this op keys on its scalar values
        gather(st, info, args);
      }
      disk_tier::store(op, st, *prog, unbaked_key);
    }
    add_compile_time();
    cache.insert(st.key, st.hash, prog);
  }
  execute(prog, info, st, nargs, stack);
}

void lowered_op_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/, torch::jit::Stack* stack) {
  run_lowered(op, stack);
}

}  // namespace torch_tpu::exec

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_tpu::exec::lowered_op_kernel>());
}
