#include "runtime/pjrt/pjrt_runtime.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <map>

#include "common/check.h"
#include "common/config.h"
#include "ir/ops.h"
#include "stablehlo/emitter.h"

namespace torch_tpu::pjrt {

std::string compile_options_proto() {
  // CompileOptionsProto field 3 (executable_build_options, length-delimited, 4 bytes) holding
  // ExecutableBuildOptionsProto fields 4 (num_replicas) = 1 and 5 (num_partitions) = 1, varints;
  // then field 4 (compile_portable_executable) = true: one executable runs on any device.
  static const char kBytes[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};
  return std::string(kBytes, sizeof(kBytes));
}

static c::PJRT_Buffer_Type buffer_type(ir::DType t) {
  switch (t) {
    case ir::DType::kU8:
      return c::PJRT_Buffer_Type_U8;
    case ir::DType::kI8:
      return c::PJRT_Buffer_Type_S8;
    case ir::DType::kI16:
      return c::PJRT_Buffer_Type_S16;
    case ir::DType::kI32:
      return c::PJRT_Buffer_Type_S32;
    case ir::DType::kI64:
      return c::PJRT_Buffer_Type_S64;
    case ir::DType::kF16:
      return c::PJRT_Buffer_Type_F16;
    case ir::DType::kF32:
      return c::PJRT_Buffer_Type_F32;
    case ir::DType::kF64:
      return c::PJRT_Buffer_Type_F64;
    case ir::DType::kBool:
      return c::PJRT_Buffer_Type_PRED;
    case ir::DType::kBF16:
      return c::PJRT_Buffer_Type_BF16;
  }
  return c::PJRT_Buffer_Type_INVALID;
}

static c10::ScalarType scalar_type(ir::DType t) { return static_cast<c10::ScalarType>(static_cast<int8_t>(t)); }

namespace {

// Awaits a set of transfer events when it goes out of scope, so that an exception thrown while
// transfers are in flight never frees host memory they still read or write. Declared after the
// host memory it protects (destroyed before it).
struct AwaitOnExit {
  std::vector<Event>& events;
  ~AwaitOnExit() {
    for (Event& e : events) e.await_quietly();
  }
};

// A non-null address for zero-element transfers (PJRT reads nothing from it).
const int64_t kEmpty = 0;

// One argument of the compiled function, in the emitter's order.
struct Argument {
  int64_t binding = 0;  // >= 0, or ir::kRngSeedBinding / ir::kRngOffsetBinding
  ir::DType dtype = ir::DType::kF32;
  std::vector<int64_t> shape;
};

class PjrtExecutable final : public runtime::Executable {
 public:
  PjrtExecutable(std::shared_ptr<Client> client, std::shared_ptr<std::vector<std::atomic<int64_t>>> executions,
                 std::unique_ptr<LoadedExecutable> exe, std::vector<Argument> args, std::vector<int32_t> outputs,
                 std::vector<ir::DType> output_dtypes, std::vector<std::vector<int64_t>> output_shapes)
      : client_(std::move(client)),
        executions_(std::move(executions)),
        exe_(std::move(exe)),
        args_(std::move(args)),
        outputs_(std::move(outputs)),
        output_dtypes_(std::move(output_dtypes)),
        output_shapes_(std::move(output_shapes)) {}

  runtime::ExecutableStats stats() const override {
    runtime::ExecutableStats s;
    s.steps = 1;  // one PJRT executable per program
    return s;
  }

  void run(const std::vector<runtime::Binding>& inputs, const std::vector<runtime::OutputTarget>& targets,
           runtime::RngState rng) const override {
    c10::InferenceMode no_autograd;
    const auto device = static_cast<size_t>(runtime::execution_device());
    TPU_CHECK(device < client_->devices().size(), "PJRT runtime: tpu:", device, " does not exist (the plugin has ",
              client_->devices().size(), " devices)");
    // 1. Start every upload. Host values (staging copies or views of the caller's memory) stay
    //    alive and unchanged until their transfer event is ready.
    std::vector<at::Tensor> staging;
    std::vector<Buffer> buffers;
    std::vector<Event> uploaded(args_.size());
    AwaitOnExit uploads_done{uploaded};
    std::vector<c::PJRT_Buffer*> raw;
    staging.reserve(args_.size());
    buffers.reserve(args_.size());
    for (size_t k = 0; k < args_.size(); ++k) {
      const Argument& a = args_[k];
      at::Tensor host = host_value(a, inputs, rng);
      const void* data = host.numel() > 0 ? host.data_ptr() : &kEmpty;
      buffers.push_back(client_->upload(data, buffer_type(a.dtype), a.shape, {}, device, &uploaded[k]));
      raw.push_back(buffers.back().get());
      staging.push_back(std::move(host));
    }
    // 2. Launch on the same device (the executable is portable); PJRT orders it after the uploads.
    Event done;
    std::vector<Buffer> results = exe_->execute(raw, client_->devices()[device].handle, &done);
    (*executions_)[device].fetch_add(1, std::memory_order_relaxed);
    TPU_CHECK(results.size() == outputs_.size(), "PJRT executable returned ", results.size(), " outputs, expected ",
              outputs_.size());
    // 3. Start the downloads of the requested outputs into dense host tensors.
    std::vector<at::Tensor> host_out(targets.size());
    std::vector<Event> downloaded(targets.size());
    AwaitOnExit downloads_done{downloaded};
    for (size_t t = 0; t < targets.size(); ++t) {
      size_t r = result_index(targets[t].node);
      host_out[t] = at::empty(output_shapes_[r], at::TensorOptions().dtype(scalar_type(output_dtypes_[r])));
      if (host_out[t].numel() == 0) continue;  // (a null destination would ask PJRT for the size)
      downloaded[t] = client_->download(results[r], host_out[t].data_ptr(),
                                        static_cast<size_t>(host_out[t].numel()) * host_out[t].element_size());
    }
    for (Event& e : uploaded) e.await("Client_BufferFromHostBuffer (transfer)");
    done.await("LoadedExecutable_Execute (execution)");
    for (Event& e : downloaded) e.await("Buffer_ToHostBuffer (transfer)");
    // 4. Write each output into its destination view (strided, possibly another dtype).
    for (size_t t = 0; t < targets.size(); ++t) {
      const runtime::Binding& d = targets[t].dest;
      at::Tensor dest = at::from_blob(d.data, d.sizes, d.strides, at::TensorOptions().dtype(d.dtype));
      dest.copy_(host_out[t]);
    }
  }

 private:
  size_t result_index(int32_t node) const {
    for (size_t r = 0; r < outputs_.size(); ++r)
      if (outputs_[r] == node) return r;
    TPU_CHECK(false, "PJRT executable: node ", node, " was not compiled as an output");
  }

  // The dense host value of one argument, in the argument's dtype.
  static at::Tensor host_value(const Argument& a, const std::vector<runtime::Binding>& inputs, runtime::RngState rng) {
    auto opts = at::TensorOptions().dtype(scalar_type(a.dtype));
    if (a.binding == ir::kRngSeedBinding || a.binding == ir::kRngOffsetBinding) {
      uint64_t v = a.binding == ir::kRngSeedBinding ? rng.seed : rng.offset;
      return at::scalar_tensor(static_cast<int64_t>(v), at::TensorOptions().dtype(at::kLong));
    }
    auto b = static_cast<size_t>(a.binding);
    if (b >= inputs.size() || (inputs[b].kind == runtime::Binding::Kind::Tensor && inputs[b].data == nullptr)) {
      // A parameter no node reads (fused mode binds only what is read): any value will do.
      return at::zeros(a.shape, opts);
    }
    const runtime::Binding& in = inputs[b];
    if (in.kind == runtime::Binding::Kind::Scalar) {
      bool floating = c10::isFloatingType(in.dtype) || c10::isComplexType(in.dtype);
      at::Scalar s = floating ? at::Scalar(in.d) : in.dtype == c10::kBool ? at::Scalar(in.i != 0) : at::Scalar(in.i);
      return at::full(a.shape, s, opts);
    }
    at::Tensor view = at::from_blob(in.data, in.sizes, in.strides, at::TensorOptions().dtype(in.dtype));
    TPU_CHECK(view.sizes().vec() == a.shape, "PJRT runtime: binding ", a.binding, " has shape ", view.sizes(),
              ", the program expects ", c10::IntArrayRef(a.shape));
    // Dense memory of the right dtype is uploaded in place: PJRT reads it asynchronously, but
    // run() awaits every upload before it writes any output, so no write of this program can
    // race the read. Strided views (and dtype mismatches) are gathered into a dense copy.
    if (view.scalar_type() == scalar_type(a.dtype) && view.is_contiguous()) return view;
    return view.to(opts.dtype(), /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
  }

  std::shared_ptr<Client> client_;
  std::shared_ptr<std::vector<std::atomic<int64_t>>> executions_;
  std::unique_ptr<LoadedExecutable> exe_;
  std::vector<Argument> args_;
  std::vector<int32_t> outputs_;
  std::vector<ir::DType> output_dtypes_;
  std::vector<std::vector<int64_t>> output_shapes_;
};

}  // namespace

std::unique_ptr<runtime::Executable> PjrtRuntime::compile(const ir::Graph& graph, const std::vector<int32_t>& outputs) {
  // The argument list, exactly as the emitter orders it (see stablehlo/emitter.h).
  std::map<int64_t, const ir::Node*> params;
  bool rng = false;
  for (const ir::Node& n : graph.nodes()) {
    if (n.kind != ir::OpKind::kParameter) continue;
    int64_t b = n.iattrs.at(0);
    if (b < 0)
      rng = true;
    else
      params.emplace(b, &n);
  }
  std::vector<Argument> args;
  for (const auto& [b, n] : params) args.push_back({b, n->dtype, n->shape});
  if (rng) {
    args.push_back({ir::kRngSeedBinding, ir::DType::kI64, {}});
    args.push_back({ir::kRngOffsetBinding, ir::DType::kI64, {}});
  }
  std::vector<ir::DType> dtypes;
  std::vector<std::vector<int64_t>> shapes;
  for (int32_t o : outputs) {
    dtypes.push_back(graph.node(o).dtype);
    shapes.push_back(graph.node(o).shape);
  }
  std::string mlir = stablehlo::emit_stablehlo(graph, outputs);
  static const std::string options = compile_options_proto();
  std::unique_ptr<LoadedExecutable> exe = executable_cache_ ? executable_cache_->load(*client_, mlir) : nullptr;
  if (exe == nullptr) {
    exe = client_->compile(mlir, options);
    compiles_.fetch_add(1, std::memory_order_relaxed);
    if (executable_cache_) executable_cache_->store(*client_, mlir, *exe);
  }
  TPU_CHECK(exe->num_outputs() == outputs.size(), "PJRT compiled a program with ", exe->num_outputs(),
            " outputs, expected ", outputs.size());
  return std::make_unique<PjrtExecutable>(client_, executions_, std::move(exe), std::move(args), outputs,
                                          std::move(dtypes), std::move(shapes));
}

PjrtRuntime::PjrtRuntime(std::shared_ptr<Client> client)
    : client_(std::move(client)), executable_cache_(ExecutableCache::open(*client_, compile_options_proto())) {}

ExecutableCacheStats PjrtRuntime::executable_cache_stats() const {
  return executable_cache_ ? executable_cache_->stats() : ExecutableCacheStats{};
}

std::string PjrtRuntime::device_name(int index) const {
  const DeviceInfo& d = client_->devices().at(static_cast<size_t>(index));
  return d.kind + " (" + client_->platform_name() + " via PJRT)";
}

std::vector<int64_t> PjrtRuntime::executions_per_device() const {
  std::vector<int64_t> out;
  for (const auto& n : *executions_) out.push_back(n.load(std::memory_order_relaxed));
  return out;
}

static PjrtRuntime* g_runtime = nullptr;

PjrtRuntime* active_pjrt_runtime() { return g_runtime; }

PjrtRuntime* pjrt_runtime(bool required) {
  if (g_runtime != nullptr) return g_runtime;
  required = required || !config::get("TORCH_TPU_PJRT_PLUGIN").empty();
  std::string path;
  if (required) {
    path = plugin_path();  // throws, naming what was looked for
  } else {
    for (const std::string& p : discover_plugins()) {
      if (p.find("libtpu") != std::string::npos && !tpu_device_present()) continue;  // see tpu_device_present
      path = p;
      break;
    }
    if (path.empty()) return nullptr;
  }
  try {
    auto plugin = Plugin::load(path);
    auto client = Client::create(plugin, parse_client_options(config::get("TORCH_TPU_PJRT_OPTIONS")));
    g_runtime = new PjrtRuntime(std::move(client));  // lives for the process, like the host runtime
  } catch (const c10::Error& e) {
    if (required) throw;
    TORCH_WARN("torch_tpu: found the PJRT plugin ", path, " but cannot use it, so the host runtime runs programs (",
               e.msg(),
               "). Set TORCH_TPU_RUNTIME=host to silence this, or TORCH_TPU_RUNTIME=pjrt to make it an error.");
    return nullptr;
  }
  return g_runtime;
}

}  // namespace torch_tpu::pjrt
