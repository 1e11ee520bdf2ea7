#include "runtime/pjrt/pjrt_runtime.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>

#include "common/check.h"
#include "common/config.h"
#include "common/fork_guard.h"
#include "ir/ops.h"
#include "runtime/completion.h"
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

static ir::DType ir_dtype(c10::ScalarType t) { return static_cast<ir::DType>(static_cast<int8_t>(t)); }

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

bool is_contiguous(const runtime::Binding& b) {
  int64_t expected = 1;
  for (size_t d = b.sizes.size(); d-- > 0;) {
    if (b.sizes[d] != 1 && b.strides[d] != expected) return false;
    expected *= b.sizes[d];
  }
  return true;
}

size_t span_bytes(const runtime::Binding& b) {
  return runtime::span_bytes(b.sizes, b.strides, c10::elementSize(b.dtype));
}

// The order of a view's dims in memory (outermost first) if its elements fill their span with no
// gap or overlap (a dense permuted view such as x.t()). False otherwise.
bool dense_order(const runtime::Binding& b, std::vector<int64_t>* order) {
  order->resize(b.sizes.size());
  std::iota(order->begin(), order->end(), 0);
  std::stable_sort(order->begin(), order->end(), [&](int64_t x, int64_t y) { return b.strides[x] > b.strides[y]; });
  int64_t expected = 1;
  for (size_t j = order->size(); j-- > 0;) {
    const auto d = static_cast<size_t>((*order)[j]);
    if (b.sizes[d] == 1) continue;
    if (b.strides[d] != expected) return false;
    expected *= b.sizes[d];
  }
  return true;
}

// The dims of an argument's device buffer: tensor bindings are flat (EmitOptions::flat_tensors).
std::vector<int64_t> buffer_dims(const stablehlo::Argument& a) {
  if (a.binding < 0) return a.shape;  // the RNG seed and offset (0-d)
  return {c10::multiply_integers(a.shape)};
}

// The resident buffer a view lies in: its first byte and size, and the view's element offset in
// it. For a result scattered into it, also whether it was donated and its argument slot.
struct Containing {
  std::shared_ptr<Buffer> buffer;  // null: the view lies in no resident buffer
  uintptr_t begin = 0;
  size_t bytes = 0;
  int64_t offset = 0;
  bool donated = false;
  size_t array_slot = 0;
};

// How one run differs from the plain executable: results scattered into resident buffers,
// arguments donated to (aliasing) results, resident arguments read in a permuted layout or
// gathered from a buffer, results returned in a permuted layout. Empty vectors: none.
struct Variant {
  std::vector<stablehlo::EmitOptions::ResultView> result_views;  // per result: scattered into a buffer
  std::vector<int32_t> aliases;               // per argument: the result it aliases, or -1
  std::vector<std::vector<int64_t>> layouts;  // per argument: dims in memory order, or empty
  std::vector<std::vector<int64_t>> result_layouts;        // per result: dims in memory order, or empty
  std::vector<stablehlo::EmitOptions::StridedView> views;  // per argument: gathered from a buffer
  auto operator<=>(const Variant&) const = default;
};

class PjrtExecutable final : public runtime::Executable {
 public:
  // `plain_text`: the module without variant options, compiled when a run first needs it (an
  // in-place program may only ever run as its donating variant).
  PjrtExecutable(PjrtRuntime* runtime, const ir::Graph& graph, std::vector<int32_t> outputs,
                 std::vector<stablehlo::Argument> args, std::string plain_text,
                 std::vector<stablehlo::IndexCheck> index_checks)
      : runtime_(runtime),
        graph_(graph),
        outputs_(std::move(outputs)),
        args_(std::move(args)),
        plain_text_(std::move(plain_text)),
        index_checks_(std::move(index_checks)) {
    for (size_t r = 0; r < outputs_.size(); ++r) {
      const int32_t o = outputs_[r];
      const auto n = static_cast<size_t>(o);
      if (n >= result_of_node_.size()) result_of_node_.resize(n + 1, -1);
      if (result_of_node_[n] < 0) result_of_node_[n] = static_cast<int32_t>(r);
      output_dtypes_.push_back(graph_.node(o).dtype);
      output_shapes_.push_back(graph_.node(o).shape);
      output_bytes_ += c10::multiply_integers(output_shapes_.back()) *
                       static_cast<int64_t>(c10::elementSize(scalar_type(output_dtypes_.back())));
    }
  }

  runtime::ExecutableStats stats() const override {
    runtime::ExecutableStats s;
    s.steps = 1;  // one PJRT executable per program
    return s;
  }
  bool reports_failure_fates() const override { return !index_checks_.empty(); }

  void run(const std::vector<runtime::Binding>& inputs, const std::vector<runtime::OutputTarget>& targets,
           runtime::RngState rng) const override {
    c10::InferenceMode no_autograd;
    if (!index_checks_.empty()) {  // fates are reported for index failures only
      runtime::mutable_last_run_fates().clear();
      runtime::set_last_failed_node(-1);
    }
    const Client& client = runtime_->client();
    ResidentBuffers* resident = runtime_->resident();
    TransferStats& transfers = runtime_->transfers();
    const auto device = static_cast<size_t>(runtime::execution_device());
    TPU_CHECK(device < client.devices().size(), "PJRT runtime: tpu:", device, " does not exist (the plugin has ",
              client.devices().size(), " devices)");
    // Outputs into dense destinations of their own dtype stay on the device (resident).
    // A dense permuted destination (x.transpose(1, 2) written by a program) stays too: the variant
    // returns the result in the destination's memory order.
    Variant variant;
    std::vector<Containing> result_into_of;         // per result written into a view with gaps: its buffer
    std::vector<uint8_t> stays(targets.size(), 0);  // 1: the buffer becomes the entry; 2: scattered
    for (size_t t = 0; t < targets.size(); ++t) {
      const runtime::Binding& d = targets[t].dest;
      const size_t r = result_index(targets[t].node);
      if (resident == nullptr || d.data == nullptr || d.dtype != scalar_type(output_dtypes_[r])) continue;
      std::vector<int64_t> order;
      if (is_contiguous(d)) {
        stays[t] = 1;
      } else if (std::count(outputs_.begin(), outputs_.end(), outputs_[r]) != 1 ||
                 targets_of(targets, outputs_[r]) != 1) {
        continue;
      } else if (dense_order(d, &order)) {
        stays[t] = 1;
        variant.result_layouts.resize(outputs_.size());
        variant.result_layouts[r] = std::move(order);
      } else if (Containing into = containing(d, device); into.buffer != nullptr) {
        // A view with gaps inside a resident buffer (cache[:, pos] = k): the variant scatters the
        // result into that buffer and returns the whole of it.
        stays[t] = 2;
        variant.result_views.resize(outputs_.size());
        variant.result_views[r] = {
            static_cast<int64_t>(into.bytes / c10::elementSize(d.dtype)), {d.strides.begin(), d.strides.end()}, false};
        result_into_of.resize(outputs_.size());
        result_into_of[r] = std::move(into);
      }
    }
    // A scatter replaces the whole buffer: only when no other output of this run writes into it.
    for (size_t t = 0; t < targets.size(); ++t) {
      if (stays[t] != 2) continue;
      const size_t r = result_index(targets[t].node);
      const Containing& into = result_into_of[r];
      for (size_t u = 0; u < targets.size(); ++u) {
        const auto begin = reinterpret_cast<uintptr_t>(targets[u].dest.data);
        if (u != t && begin < into.begin + into.bytes && begin + span_bytes(targets[u].dest) > into.begin) {
          stays[t] = 0;
          variant.result_views[r] = {};
          result_into_of[r] = {};
          break;
        }
      }
    }
    if (std::all_of(variant.result_views.begin(), variant.result_views.end(),
                    [](const stablehlo::EmitOptions::ResultView& v) { return v.strides.empty(); }))
      variant.result_views.clear();
    // 1. Start every upload, except of arguments already resident on the device. Host values
    //    (staging copies or views of the caller's memory) stay alive and unchanged until their
    //    transfer event is ready.
    std::vector<at::Tensor> staging;
    std::vector<Buffer> buffers;
    std::vector<std::shared_ptr<Buffer>> on_device(args_.size());
    std::vector<Event> uploaded(args_.size());
    AwaitOnExit uploads_done{uploaded};
    std::vector<std::shared_ptr<Buffer>> scalars;        // shared device copies of scalar operands
    std::vector<int64_t> view_offsets;                   // per argument gathered from a buffer: its offset
    std::vector<std::pair<size_t, size_t>> kept_inputs;  // (argument, buffers slot) uploaded in place
    std::vector<c::PJRT_Buffer*> raw;
    staging.reserve(args_.size());
    buffers.reserve(args_.size());
    for (size_t k = 0; k < args_.size(); ++k) {
      const stablehlo::Argument& a = args_[k];
      if ((on_device[k] = resident_argument(a, inputs, device, &variant, &view_offsets, k))) {
        raw.push_back(on_device[k]->get());
        continue;
      }
      if (const Buffer* twin = uploaded_twin(a, k, inputs, kept_inputs, buffers)) {
        raw.push_back(twin->get());  // the same bytes bound twice (fused graphs): one upload
        continue;
      }
      at::Tensor host = host_value(a, inputs, rng);
      if (is_scalar_operand(a, inputs)) {  // learning rates, eps, alpha: one upload per value
        scalars.push_back(runtime_->scalar_buffer(buffer_type(a.dtype), host, device));
        raw.push_back(scalars.back()->get());
        continue;
      }
      const void* data = host.numel() > 0 ? host.data_ptr() : &kEmpty;
      const int64_t nbytes = host.numel() * static_cast<int64_t>(host.element_size());
      buffers.push_back(runtime_->retry_out_of_memory(device, nbytes, /*execution=*/false, [&] {
        return client.upload(data, buffer_type(a.dtype), buffer_dims(a), {}, device, &uploaded[k]);
      }));
      raw.push_back(buffers.back().get());
      // The tensor's own bytes went up as they are: later programs reading them reuse the buffer.
      if (resident != nullptr && a.binding >= 0 && data == inputs[static_cast<size_t>(a.binding)].data)
        kept_inputs.emplace_back(k, buffers.size() - 1);
      transfers.uploads.fetch_add(1, std::memory_order_relaxed);
      transfers.upload_bytes.fetch_add(nbytes, std::memory_order_relaxed);
      staging.push_back(std::move(host));
    }
    // The offsets of the gathered views come last, in argument order (EmitOptions::argument_views).
    for (size_t k = 0; k < variant.views.size(); ++k) {
      if (variant.views[k].strides.empty()) continue;
      scalars.push_back(offset_buffer(view_offsets[k], device));
      raw.push_back(scalars.back()->get());
    }
    // Then, per result scattered into a resident buffer: that buffer (donated when nobody else
    // holds it: the variant aliases it with the result) and the view's offset.
    for (size_t r = 0; r < result_into_of.size(); ++r) {
      Containing& into = result_into_of[r];
      if (into.buffer == nullptr) continue;
      into.donated = resident->take_for_donation(reinterpret_cast<const void*>(into.begin), into.bytes, into.buffer);
      variant.result_views[r].alias = into.donated;
      into.array_slot = raw.size();
      raw.push_back(into.buffer->get());
      scalars.push_back(offset_buffer(into.offset, device));
      raw.push_back(scalars.back()->get());
    }
    // 2. In-place writes donate the resident buffer they overwrite (an executable variant whose
    //    argument aliases that result), then launch on the same device (the executable is
    //    portable); PJRT orders the launch after the uploads.
    std::vector<uint8_t> donated;
    variant.aliases = donations(inputs, targets, stays, on_device, &donated);
    for (const Containing& into : result_into_of) {
      if (into.buffer == nullptr || !into.donated) continue;
      donated.resize(raw.size(), 0);
      donated[into.array_slot] = 1;
    }
    const LoadedExecutable& exe = executable_for(variant);
    Event done;
    std::vector<Buffer> results;
    try {
      results = runtime_->retry_out_of_memory(device, output_bytes_, /*execution=*/true, [&] {
        return exe.execute(raw, client.devices()[device].handle, &done, donated, &client.device_bytes(device));
      });
    } catch (...) {
      // The program did not run: the buffers it was to consume hold their tensors' values again.
      restore_donated(inputs, on_device, donated, result_into_of, device);
      throw;
    }
    // A donated buffer's memory is now its output's, counted as that output.
    for (size_t k = 0; k < on_device.size() && k < donated.size(); ++k)
      if (donated[k] && on_device[k] != nullptr) on_device[k]->release_bytes();
    for (const Containing& into : result_into_of)
      if (into.buffer != nullptr && into.donated) into.buffer->release_bytes();
    runtime_->count_execution(device);
    const size_t checked = index_checks_.empty() ? 0 : 1;
    TPU_CHECK(results.size() == outputs_.size() + checked, "PJRT executable returned ", results.size(),
              " outputs, expected ", outputs_.size() + checked);
    // The index check's result, read back while the outputs' downloads start.
    int64_t check[2] = {0, 0};
    std::vector<Event> check_read(checked);
    AwaitOnExit check_done{check_read};
    if (checked) check_read[0] = client.download(results.back(), check, sizeof(check));
    // 3. Start the downloads of the outputs that do not stay, into dense host tensors.
    std::vector<at::Tensor> host_out(targets.size());
    std::vector<Event> downloaded(targets.size());
    AwaitOnExit downloads_done{downloaded};
    for (size_t t = 0; t < targets.size(); ++t) {
      if (stays[t]) continue;
      size_t r = result_index(targets[t].node);
      host_out[t] = at::empty(output_shapes_[r], at::TensorOptions().dtype(scalar_type(output_dtypes_[r])));
      if (host_out[t].numel() == 0) continue;  // (a null destination would ask PJRT for the size)
      const size_t nbytes = static_cast<size_t>(host_out[t].numel()) * host_out[t].element_size();
      downloaded[t] = client.download(results[r], host_out[t].data_ptr(), nbytes);
      transfers.downloads.fetch_add(1, std::memory_order_relaxed);
      transfers.download_bytes.fetch_add(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
    }
    // Nothing to write into host memory and a stream worker that awaits launched programs: the
    // run ends at the launch (runtime/completion.h); else it waits for the program here.
    const bool defer = runtime_->launched().enabled() && runtime::completion_deferred_here() && !checked &&
                       std::all_of(stays.begin(), stays.end(), [](uint8_t s) { return s != 0; });
    for (Event& e : uploaded) e.await("Client_BufferFromHostBuffer (transfer)");
    if (!defer) done.await("LoadedExecutable_Execute (execution)");
    for (Event& e : downloaded) e.await("Buffer_ToHostBuffer (transfer)");
    for (Event& e : check_read) e.await("Buffer_ToHostBuffer (index check)");
    const bool failed = check[0] != 0;
    if (checked) {
      runtime_->index_checks().checked_runs.fetch_add(1, std::memory_order_relaxed);
      if (failed) runtime_->index_checks().failures.fetch_add(1, std::memory_order_relaxed);
    }
    // 4. Record the uploaded tensors as current device copies, then the resident outputs (which
    //    replace those they overwrite; one buffer may back several destinations), and write each
    //    downloaded output into its destination view (strided, possibly another dtype).
    for (auto [k, slot] : kept_inputs) {
      const runtime::Binding& in = inputs[static_cast<size_t>(args_[k].binding)];
      resident->adopt(in.data, span_bytes(in), {buffer_type(args_[k].dtype), device},
                      std::make_shared<Buffer>(std::move(buffers[slot])), /*host_current=*/true);
    }
    std::vector<std::shared_ptr<Buffer>> kept(results.size());
    for (size_t t = 0; t < targets.size(); ++t) {
      const runtime::Binding& d = targets[t].dest;
      // A failed index check: nothing is written, except that the buffers the program consumed
      // (donated) come back as its results, holding their old values (EmitOptions::index_checks).
      if (failed && !consumed(variant, targets[t], stays[t], result_into_of)) continue;
      if (stays[t]) {
        size_t r = result_index(targets[t].node);
        if (kept[r] == nullptr) kept[r] = std::make_shared<Buffer>(std::move(results[r]));
        if (stays[t] == 2) {  // the whole buffer the view lies in, updated
          const Containing& into = result_into_of[r];
          resident->adopt(reinterpret_cast<const void*>(into.begin), into.bytes,
                          {buffer_type(output_dtypes_[r]), device}, kept[r], /*host_current=*/false);
        } else {
          resident->adopt(d.data, span_bytes(d), {buffer_type(output_dtypes_[r]), device}, kept[r],
                          /*host_current=*/false);
        }
        continue;
      }
      if (resident != nullptr) resident->before_host_write(d.data, span_bytes(d), is_contiguous(d));
      at::Tensor dest = at::from_blob(d.data, d.sizes, d.strides, at::TensorOptions().dtype(d.dtype));
      at::Tensor value = host_out[t];
      // An expanded destination (stride 0: `zeros(1).expand(4).fill_(2)`, which only fills and
      // zeros may write) holds one element per run of its broadcast dims: write the first.
      for (int64_t k = 0; k < dest.dim(); ++k) {
        if (dest.stride(k) == 0 && dest.size(k) > 1) {
          dest = dest.narrow(k, 0, 1);
          value = value.narrow(k, 0, 1);
        }
      }
      dest.copy_(value);
    }
    if (failed) raise_index_error(check, targets.size());
    if (defer) {  // the launched program keeps what it reads until it is done
      LaunchedProgram launched{std::move(done), std::move(scalars), std::move(buffers), {}};
      for (std::shared_ptr<Buffer>& b : on_device)
        if (b != nullptr) launched.held.push_back(std::move(b));
      for (Containing& into : result_into_of)
        if (into.buffer != nullptr) launched.held.push_back(std::move(into.buffer));
      runtime_->launched().add(device, std::move(launched));
    }
  }

 private:
  // Whether the run consumed the memory behind target `t`: a donated argument (aliased with the
  // target's result) or a donated buffer the result was scattered into.
  bool consumed(const Variant& variant, const runtime::OutputTarget& target, uint8_t stays,
                const std::vector<Containing>& result_into_of) const {
    if (!stays) return false;
    const auto r = static_cast<int32_t>(result_index(target.node));
    if (stays == 2) return result_into_of.at(static_cast<size_t>(r)).donated;
    return std::find(variant.aliases.begin(), variant.aliases.end(), r) != variant.aliases.end();
  }

  // After a failed index check (check = [k + 1, index]): every output holds its old value
  // (new results were not written, in-place targets kept theirs), then IndexError (RuntimeError
  // for torch.gather/scatter's own ops) naming the op, as the host runtime raises it.
  [[noreturn]] void raise_index_error(const int64_t check[2], size_t num_targets) const {
    const stablehlo::IndexCheck& c = index_checks_.at(static_cast<size_t>(check[0] - 1));
    runtime::mutable_last_run_fates().assign(num_targets, runtime::OutputFate::kUntouched);
    runtime::set_last_failed_node(c.node);
    if (c.runtime_error) {
      TPU_CHECK(false, c.op, ": index ", check[1], " is out of bounds for a dimension with size ", c.size);
    }
    TPU_CHECK_INDEX(false, c.op, ": index ", check[1], " is out of bounds for a dimension with size ", c.size);
  }

  // The first result that returns `node` (called per target and argument on every run: a table).
  size_t result_index(int32_t node) const {
    const auto n = static_cast<size_t>(node);
    if (node >= 0 && n < result_of_node_.size() && result_of_node_[n] >= 0)
      return static_cast<size_t>(result_of_node_[n]);
    TPU_CHECK(false, "PJRT executable: node ", node, " was not compiled as an output");
  }

  // The resident buffer holding argument `a`'s bytes as the program can take them, or null: a
  // view of the argument's dtype and shape that is dense (row-major, or permuted: then
  // variant->layouts[k] is its order in memory and the variant transposes it back) or lies
  // inside one resident buffer (variant->views[k]: the variant gathers it from there).
  std::shared_ptr<Buffer> resident_argument(const stablehlo::Argument& a, const std::vector<runtime::Binding>& inputs,
                                            size_t device, Variant* variant, std::vector<int64_t>* view_offsets,
                                            size_t k) const {
    ResidentBuffers* resident = runtime_->resident();
    if (resident == nullptr || a.binding < 0 || static_cast<size_t>(a.binding) >= inputs.size()) return nullptr;
    const runtime::Binding& in = inputs[static_cast<size_t>(a.binding)];
    if (in.kind != runtime::Binding::Kind::Tensor || in.data == nullptr || in.dtype != scalar_type(a.dtype) ||
        !std::equal(in.sizes.begin(), in.sizes.end(), a.shape.begin(), a.shape.end()))
      return nullptr;
    const size_t nbytes = static_cast<size_t>(c10::multiply_integers(a.shape)) * c10::elementSize(in.dtype);
    std::vector<int64_t> order;
    if (is_contiguous(in)) {
      if (std::shared_ptr<Buffer> buffer = resident->find(in.data, nbytes, {buffer_type(a.dtype), device}))
        return buffer;
    } else if (dense_order(in, &order)) {
      std::shared_ptr<Buffer> buffer = resident->find(in.data, nbytes, {buffer_type(a.dtype), device});
      if (buffer != nullptr) {
        variant->layouts.resize(args_.size());
        variant->layouts[k] = std::move(order);
        return buffer;
      }
    }
    // Any other view (a part of a buffer such as x[i], a slice with gaps, a broadcast) inside one
    // resident buffer: gathered there. (Not a 0-d one: an argument view needs one stride per dim,
    // and no strides means no view.)
    if (in.sizes.empty()) return nullptr;
    Containing c = containing(in, device);
    if (c.buffer == nullptr) return nullptr;
    variant->views.resize(args_.size());
    variant->views[k] = {static_cast<int64_t>(c.bytes / c10::elementSize(in.dtype)),
                         {in.strides.begin(), in.strides.end()}};
    view_offsets->resize(args_.size());
    (*view_offsets)[k] = c.offset;
    return c.buffer;
  }

  // After a failed execution: the resident entries taken out of the table for donation get
  // their buffers back (the plugin consumes a donated buffer only when the program runs).
  void restore_donated(const std::vector<runtime::Binding>& inputs, const std::vector<std::shared_ptr<Buffer>>& on_device,
                       const std::vector<uint8_t>& donated, const std::vector<Containing>& result_into_of,
                       size_t device) const {
    ResidentBuffers* resident = runtime_->resident();
    if (resident == nullptr) return;
    for (size_t k = 0; k < on_device.size() && k < donated.size(); ++k) {
      if (!donated[k] || on_device[k] == nullptr) continue;
      const runtime::Binding& in = inputs[static_cast<size_t>(args_[k].binding)];
      resident->adopt(in.data, span_bytes(in), {buffer_type(args_[k].dtype), device}, on_device[k],
                      /*host_current=*/false);
    }
    for (size_t r = 0; r < result_into_of.size(); ++r) {
      const Containing& into = result_into_of[r];
      if (into.buffer == nullptr || !into.donated) continue;
      resident->adopt(reinterpret_cast<const void*>(into.begin), into.bytes, {buffer_type(output_dtypes_[r]), device},
                      into.buffer, /*host_current=*/false);
    }
  }

  // A host scalar bound to a parameter (not tensor memory, not the RNG offset, which changes
  // with every draw).
  static bool is_scalar_operand(const stablehlo::Argument& a, const std::vector<runtime::Binding>& inputs) {
    if (a.binding == ir::kRngSeedBinding) return true;
    return a.binding >= 0 && static_cast<size_t>(a.binding) < inputs.size() &&
           inputs[static_cast<size_t>(a.binding)].kind == runtime::Binding::Kind::Scalar &&
           c10::multiply_integers(a.shape) == 1;
  }

  // The resident buffer of the view's dtype that holds all of view `b`, whole elements apart
  // (buffer null if none).
  Containing containing(const runtime::Binding& b, size_t device) const {
    Containing c;
    const size_t item = c10::elementSize(b.dtype);
    c.buffer = runtime_->resident()->find_containing(b.data, span_bytes(b), {buffer_type(ir_dtype(b.dtype)), device},
                                                     &c.begin, &c.bytes);
    const auto offset = reinterpret_cast<uintptr_t>(b.data) - c.begin;
    if (c.buffer == nullptr || offset % item != 0 || c.bytes % item != 0) return {};
    c.offset = static_cast<int64_t>(offset / item);
    return c;
  }

  // The shared device copy of a view's element offset (an i64 argument of gather/scatter variants).
  std::shared_ptr<Buffer> offset_buffer(int64_t offset, size_t device) const {
    return runtime_->scalar_buffer(c::PJRT_Buffer_Type_S64,
                                   at::scalar_tensor(offset, at::TensorOptions().dtype(at::kLong)), device);
  }

  // How many targets write node `node`.
  static size_t targets_of(const std::vector<runtime::OutputTarget>& targets, int32_t node) {
    return static_cast<size_t>(
        std::count_if(targets.begin(), targets.end(), [&](const runtime::OutputTarget& t) { return t.node == node; }));
  }

  // The buffer an earlier argument of this run uploaded from the same bytes, as the same dtype
  // and element count (the buffers are flat, so any shape of them), or null.
  const Buffer* uploaded_twin(const stablehlo::Argument& a, size_t k, const std::vector<runtime::Binding>& inputs,
                              const std::vector<std::pair<size_t, size_t>>& kept_inputs,
                              const std::vector<Buffer>& buffers) const {
    if (a.binding < 0 || static_cast<size_t>(a.binding) >= inputs.size()) return nullptr;
    const runtime::Binding& in = inputs[static_cast<size_t>(a.binding)];
    if (in.kind != runtime::Binding::Kind::Tensor || in.dtype != scalar_type(a.dtype) || !is_contiguous(in))
      return nullptr;
    for (auto [j, slot] : kept_inputs) {
      const stablehlo::Argument& b = args_[j];
      if (inputs[static_cast<size_t>(b.binding)].data == in.data && b.dtype == a.dtype &&
          c10::multiply_integers(b.shape) == c10::multiply_integers(a.shape))
        return &buffers[slot];
    }
    return nullptr;
  }

  // For each argument, the result it is donated to (-1: none): a resident argument whose bytes a
  // staying output of the same dtype overwrites entirely, when the table lets go of its buffer.
  // Sets donated[k] for those arguments. Empty when nothing is donated.
  std::vector<int32_t> donations(const std::vector<runtime::Binding>& inputs,
                                 const std::vector<runtime::OutputTarget>& targets, const std::vector<uint8_t>& stays,
                                 const std::vector<std::shared_ptr<Buffer>>& on_device,
                                 std::vector<uint8_t>* donated) const {
    std::vector<int32_t> aliases;
    std::vector<uint8_t> result_taken(outputs_.size(), 0);
    for (size_t k = 0; k < args_.size(); ++k) {
      if (on_device[k] == nullptr) continue;
      const runtime::Binding& in = inputs[static_cast<size_t>(args_[k].binding)];
      for (size_t t = 0; t < targets.size(); ++t) {
        const runtime::Binding& d = targets[t].dest;
        const size_t r = result_index(targets[t].node);
        if (stays[t] != 1 || result_taken[r] || d.data != in.data || output_dtypes_[r] != args_[k].dtype ||
            span_bytes(d) != span_bytes(in))
          continue;
        if (!runtime_->resident()->take_for_donation(in.data, span_bytes(in), on_device[k])) break;
        if (aliases.empty()) {
          aliases.assign(args_.size(), -1);
          donated->assign(args_.size(), 0);
        }
        aliases[k] = static_cast<int32_t>(r);
        (*donated)[k] = 1;
        result_taken[r] = 1;
        break;
      }
    }
    return aliases;
  }

  // The executable for a variant (the plain one when it has no aliases and no layouts), compiled
  // on first use. Thread-safe.
  const LoadedExecutable& executable_for(const Variant& variant) const {
    if (variant == Variant{}) {
      std::call_once(plain_once_, [&] {
        exe_ = runtime_->compile_text(plain_text_, outputs_.size() + (index_checks_.empty() ? 0 : 1));
        plain_text_ = std::string();  // (compiled: the text is not needed again)
      });
      return *exe_;
    }
    std::lock_guard<std::mutex> g(variants_mu_);
    std::unique_ptr<LoadedExecutable>& v = variants_[variant];
    if (v == nullptr) {
      stablehlo::EmitOptions emit;
      emit.argument_aliases = variant.aliases;
      emit.argument_layouts = variant.layouts;
      emit.argument_views = variant.views;
      emit.result_layouts = variant.result_layouts;
      emit.result_views = variant.result_views;
      v = runtime_->build(graph_, outputs_, std::move(emit));
    }
    return *v;
  }

  // The dense host value of one argument, in the argument's dtype.
  at::Tensor host_value(const stablehlo::Argument& a, const std::vector<runtime::Binding>& inputs,
                        runtime::RngState rng) const {
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
    if (ResidentBuffers* resident = runtime_->resident()) resident->sync_to_host(in.data, span_bytes(in));
    at::Tensor view = at::from_blob(in.data, in.sizes, in.strides, at::TensorOptions().dtype(in.dtype));
    TPU_CHECK(view.sizes().vec() == a.shape, "PJRT runtime: binding ", a.binding, " has shape ", view.sizes(),
              ", the program expects ", c10::IntArrayRef(a.shape));
    // Dense memory of the right dtype is uploaded in place: PJRT reads it asynchronously, but
    // run() awaits every upload before it writes any output, so no write of this program can
    // race the read. Strided views (and dtype mismatches) are gathered into a dense copy.
    if (view.scalar_type() == scalar_type(a.dtype) && view.is_contiguous()) return view;
    return view.to(opts.dtype(), /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
  }

  PjrtRuntime* runtime_;  // lives for the process
  ir::Graph graph_;       // kept to compile donation variants
  std::vector<int32_t> outputs_;
  std::vector<int32_t> result_of_node_;    // node id -> its first result index, or -1
  std::vector<stablehlo::Argument> args_;  // @main's arguments, in order
  mutable std::string plain_text_;
  // Non-empty: the executable's last result reports the first failed index check
  // (EmitOptions::index_checks), and run() waits for it.
  std::vector<stablehlo::IndexCheck> index_checks_;
  mutable std::once_flag plain_once_;
  mutable std::unique_ptr<LoadedExecutable> exe_;  // the plain executable, once compiled
  std::vector<ir::DType> output_dtypes_;
  std::vector<std::vector<int64_t>> output_shapes_;
  int64_t output_bytes_ = 0;  // what an execution allocates at least (out-of-memory messages)
  mutable std::mutex variants_mu_;
  mutable std::map<Variant, std::unique_ptr<LoadedExecutable>> variants_;
};

}  // namespace

stablehlo::Module PjrtRuntime::emit(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                                    stablehlo::EmitOptions options) {
  options.flat_tensors = true;
  options.live_arguments_only = true;  // an out= destination is not uploaded
  static const bool index_checks = config::get_bool("TORCH_TPU_PJRT_INDEX_CHECKS");
  options.index_checks = index_checks;
  return stablehlo::emit_module(graph, outputs, options);
}

std::unique_ptr<LoadedExecutable> PjrtRuntime::compile_text(const std::string& mlir, size_t num_outputs) {
  static const std::string options = compile_options_proto();
  std::unique_ptr<LoadedExecutable> exe = executable_cache_ ? executable_cache_->load(*client_, mlir) : nullptr;
  if (exe == nullptr) {
    exe = client_->compile(mlir, options);
    compiles_.fetch_add(1, std::memory_order_relaxed);
    if (executable_cache_) executable_cache_->store(*client_, mlir, *exe);
  }
  TPU_CHECK(exe->num_outputs() == num_outputs, "PJRT compiled a program with ", exe->num_outputs(),
            " outputs, expected ", num_outputs);
  return exe;
}

std::unique_ptr<LoadedExecutable> PjrtRuntime::build(const ir::Graph& graph, const std::vector<int32_t>& outputs,
                                                     stablehlo::EmitOptions options) {
  stablehlo::Module module = emit(graph, outputs, std::move(options));
  return compile_text(module.text, outputs.size() + (module.index_checks.empty() ? 0 : 1));
}

std::unique_ptr<runtime::Executable> PjrtRuntime::compile(const ir::Graph& graph, const std::vector<int32_t>& outputs) {
  // Emission checks every op and dtype here, at compile time; the plugin compiles on first run.
  stablehlo::Module module = emit(graph, outputs, {});
  return std::make_unique<PjrtExecutable>(this, graph, outputs, std::move(module.arguments), std::move(module.text),
                                          std::move(module.index_checks));
}

std::shared_ptr<Buffer> PjrtRuntime::scalar_buffer(c::PJRT_Buffer_Type type, const at::Tensor& value, size_t device) {
  uint64_t bits = 0;
  std::memcpy(&bits, value.data_ptr(), std::min<size_t>(sizeof(bits), value.element_size()));
  const ScalarKey key{type, bits, device};
  std::lock_guard<std::mutex> g(scalars_mu_);
  auto it = scalars_.find(key);
  if (it != scalars_.end()) return it->second;
  if (scalars_.size() >= kMaxScalars) scalars_.clear();  // values that change every call: start over
  Event uploaded;
  auto buffer = std::make_shared<Buffer>(client_->upload(value.data_ptr(), type, {1}, {}, device, &uploaded));
  uploaded.await("Client_BufferFromHostBuffer (scalar operand)");
  transfers_.uploads.fetch_add(1, std::memory_order_relaxed);
  transfers_.upload_bytes.fetch_add(value.element_size(), std::memory_order_relaxed);
  scalars_.emplace(key, buffer);
  return buffer;
}

int64_t PjrtRuntime::evict(size_t device) {
  launched_->settle(device);  // their held buffers go; a failure waits for the next sync
  const int64_t bytes = resident_ != nullptr ? resident_->evict(device) : 0;
  oom_.evictions.fetch_add(1, std::memory_order_relaxed);
  oom_.evicted_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return bytes;
}

void PjrtRuntime::inject_out_of_memory(int uploads, int executions) {
  inject_oom_uploads_.store(uploads, std::memory_order_relaxed);
  inject_oom_executions_.store(executions, std::memory_order_relaxed);
}

void PjrtRuntime::maybe_inject_out_of_memory(bool execution) {
  std::atomic<int>& pending = execution ? inject_oom_executions_ : inject_oom_uploads_;
  int n = pending.load(std::memory_order_relaxed);
  while (n > 0 && !pending.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
  }
  TORCH_CHECK_WITH(OutOfMemoryError, n <= 0, "torch_tpu: PJRT ",
                   execution ? "LoadedExecutable_Execute" : "Client_BufferFromHostBuffer",
                   " failed (RESOURCE_EXHAUSTED): injected by _C._pjrt_inject_out_of_memory");
}

void PjrtRuntime::raise_out_of_memory(size_t device, int64_t requested, bool execution, const c10::Error& error,
                                      int64_t evicted) {
  oom_.raised.fetch_add(1, std::memory_order_relaxed);
  std::string available = "the plugin reports no free-memory figure";
  try {
    DeviceMemoryStats m = client_->memory_stats(device);
    if (m.bytes_limit >= 0 && m.bytes_in_use >= 0)
      available = std::to_string(m.bytes_limit - m.bytes_in_use) + " bytes free of " + std::to_string(m.bytes_limit);
  } catch (const c10::Error&) {  // a plugin without memory statistics (XLA's CPU plugin)
  }
  TORCH_CHECK_WITH(OutOfMemoryError, false, "torch_tpu: out of memory on tpu:", device, " (", device_name(static_cast<int>(device)),
                   "): ", execution ? "a program's execution" : "an upload", " requested ", requested,
                   execution ? "+ bytes (its outputs)" : " bytes", "; available: ", available, "; this process holds ",
                   client_->device_bytes(device).current(), " bytes in device buffers there after evicting ", evicted,
                   " bytes of resident tensors to host memory and retrying once. The plugin said: ",
                   error.what_without_backtrace());
}

void PjrtRuntime::count_execution(size_t device) { (*executions_)[device].fetch_add(1, std::memory_order_relaxed); }

PjrtRuntime::PjrtRuntime(std::shared_ptr<Client> client)
    : client_(std::move(client)), executable_cache_(ExecutableCache::open(*client_, compile_options_proto())) {
  // The plugin's client runs threads of its own from here on: a child forked later cannot use
  // it (it waited forever for them) and raises instead (common/fork_guard.h).
  note_runtime_thread_started();
  if (config::get_bool("TORCH_TPU_PJRT_RESIDENT")) {
    resident_ = std::make_unique<ResidentBuffers>(client_);
    runtime::install_residency(resident_.get());
    resident_on_ = true;
  }
  launched_->set_enabled(config::get_bool("TORCH_TPU_PJRT_ASYNC"));
  runtime::install_await_launched([](c10::DeviceIndex device) {
    if (PjrtRuntime* rt = active_pjrt_runtime(); rt != nullptr && device >= 0)
      rt->launched().await_all(static_cast<size_t>(device));
  });
}

void PjrtRuntime::set_resident(bool on) {
  if (resident_ == nullptr) return;
  if (!on) resident_->sync_all_and_clear();
  resident_on_.store(on, std::memory_order_release);
}

ResidencyStats PjrtRuntime::residency_stats() const { return resident_ ? resident_->stats() : ResidencyStats{}; }

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
