// Copies between host and device and between devices, and host reads of device values.
//
// host -> device: when no queued work can touch the destination the data is written at once:
//   its tensor and storage are referenced only here (the fresh tensor of `x.to("tpu")`), or no
//   stream of its device has unfinished work (a live buffer refilled between steps, as vLLM's
//   CpuGpuBuffer.copy_to_gpu does every step). Otherwise a converted staging copy is made now
//   and the write is queued on the destination's stream, so the caller may reuse its CPU
//   tensor immediately (blocking-copy semantics, non_blocking too) without stalling the device
//   queue.
// device -> host: waits for the source device's current stream, then reads.
// device -> device (same device): an IR program (aten::copy lowered), like any other op.
// device -> other device: waits for the source, stages on the host, queues the write.
#include <mutex>
#include <string_view>
#include <unordered_set>

#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/DeviceGuard.h>

#include "aten/kernels.h"
#include "common/check.h"
#include "device/stream.h"
#include "exec/call.h"
#include "exec/metrics.h"
#include "exec/mode.h"
#include "exec/poison.h"
#include "exec/profiler.h"
#include "runtime/residency.h"
#include "runtime/select.h"

namespace torch_tpu::aten {
namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

bool is_tpu(const at::Tensor& t) { return t.device().type() == kTpu; }

// Whether zero_ meets this shape and dtype for the first time (a bounded memory of hashes).
bool first_zero_fill_of_shape(const at::Tensor& t) {
  uint64_t h = static_cast<uint64_t>(t.scalar_type()) + 0x9e3779b97f4a7c15ull;
  for (int64_t d : t.sizes()) h = (h ^ static_cast<uint64_t>(d)) * 0x100000001b3ull;
  static std::mutex mu;
  static std::unordered_set<uint64_t> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.size() >= 4096) seen.clear();
  return seen.insert(h).second;
}

}  // namespace

at::Tensor host_view(const at::Tensor& t, Access access) {
  void* data = static_cast<char*>(t.storage().mutable_data()) + t.storage_offset() * t.itemsize();
  if (runtime::residency() != nullptr) {  // (host runtime: nothing to bring back or drop)
    const size_t span = runtime::span_bytes(t.sizes(), t.strides(), t.itemsize());
    if (access == Access::kRead)
      runtime::before_host_read(data, span);
    else
      runtime::before_host_write(data, span, t.is_non_overlapping_and_dense());
  }
  return at::from_blob(data, t.sizes(), t.strides(), at::TensorOptions().dtype(t.scalar_type()).device(c10::kCPU));
}

at::Tensor detached_alias(const at::Tensor& t) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(t.storage()), t.key_set(), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return at::Tensor(std::move(impl));
}

namespace {

// op: the ATen op whose host read waits (exec/profiler.h records it with the user's line).
void wait_for(const at::Tensor& t, const char* op) {
  device::note_host_sync();
  device::FlushCauseScope cause(device::FlushCause::kHostRead);
  const int64_t start = exec::profiler::enabled() ? exec::profiler::now_ns() : 0;
  device::synchronize_stream(device::current_stream(t.device().index()));
  if (start != 0) exec::profiler::record_host_sync(op, exec::profiler::now_ns() - start);
  exec::metrics().host_syncs++;
  if (exec::any_poisoned()) exec::check_not_poisoned(t);
}

void write_to_device(const at::Tensor& dst, const at::Tensor& src_cpu) {
  if (dst.numel() == 0) return;
  if (exec::any_poisoned()) exec::unpoison_if_covered(dst);
  // Pending fused ops may write dst (and hold no reference to it): order the copy after them.
  device::flush_pending(dst.device().index(), device::FlushCause::kCopy);
  exec::metrics().bytes_to_device += static_cast<uint64_t>(dst.numel()) * dst.itemsize();
  const bool untouched = dst.use_count() == 1 && dst.storage().use_count() == 1;
  // An idle device (checked after the flush above) has nothing queued that reads or writes
  // dst, so writing now is queue order; the staged path costs a staging copy, a queued work
  // item and a worker wake-up (~70 us under load against a few us, docs/vllm.md).
  if (untouched || device::device_idle(dst.device().index())) {
    host_view(dst, Access::kWrite).copy_(src_cpu);
    return;
  }
  at::Tensor staging = src_cpu.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
  if (staging.storage().is_alias_of(src_cpu.storage())) staging = staging.clone();
  device::enqueue_fn(device::current_stream(dst.device().index()),
                     [target = detached_alias(dst), staging] { host_view(target, Access::kWrite).copy_(staging); });
}

void copy_on_device(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  torch::jit::Stack stack{self, src, non_blocking};
  exec::metrics().bytes_device_to_device += static_cast<uint64_t>(self.numel()) * self.itemsize();
  exec::run_lowered(op, &stack);
}

}  // namespace

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.is_same(src)) return self;
  if (self.numel() == 0) {
    // A host read is a sync point even when there is nothing to read: pending fused work that
    // produced src raises its error here (`x.index_put(bad_index, v)` with x empty), as strict does.
    if (is_tpu(src) && self.device().is_cpu()) wait_for(src, "aten::copy_ (device to host)");
    return self;
  }
  // An expanded destination has elements sharing memory: which source element lands is
  // undefined, so CPU and CUDA raise (the same message).
  if (is_tpu(self)) at::assert_no_internal_overlap(self);
  if (is_tpu(self) && is_tpu(src)) {
    if (self.device() == src.device()) {
      copy_on_device(self, src, non_blocking);
    } else {
      wait_for(src, "aten::copy_ (between devices)");
      write_to_device(self, host_view(src, Access::kRead).clone());
    }
  } else if (is_tpu(self)) {
    TPU_CHECK(src.device().is_cpu(), "copy_: cannot copy from ", src.device(), " to ", self.device());
    write_to_device(self, src);
  } else {
    TPU_CHECK(self.device().is_cpu(), "copy_: cannot copy from ", src.device(), " to ", self.device());
    wait_for(src, "aten::copy_ (device to host)");
    exec::metrics().bytes_from_device += static_cast<uint64_t>(src.numel()) * src.itemsize();
    self.copy_(host_view(src, Access::kRead));
  }
  return self;
}

at::Tensor& zero_(at::Tensor& self) {
  // On a device runtime (PJRT), a fill program is compiled per shape (an XLA compile each).
  // The zeros of a tensor nothing else references (torch.zeros, the gradients autograd
  // materializes for unused outputs at every new length) are written on the host mirror like
  // an upload instead, outside fused mode (its graphs record fills): small ones always, larger
  // ones the first time their shape is met (a loop over changing lengths meets most once; a
  // repeated shape gets the fill program, compiled once, instead of an upload every step).
  constexpr int64_t kMaxHostZeroBytes = 4 << 20;
  constexpr int64_t kMaxFirstHostZeroBytes = 64 << 20;
  static const bool device_runtime = std::string_view(runtime::selected_runtime().name()) != "host";
  const int64_t bytes = self.numel() * static_cast<int64_t>(self.itemsize());
  if (device_runtime && exec::mode() != exec::Mode::Fused && self.numel() > 0 && bytes <= kMaxFirstHostZeroBytes &&
      self.is_non_overlapping_and_dense() && self.use_count() == 1 && self.storage().use_count() == 1 &&
      (bytes <= kMaxHostZeroBytes || first_zero_fill_of_shape(self))) {
    write_to_device(self, at::zeros({}, self.options().device(c10::kCPU)));
    return self;
  }
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::zero_", "");
  torch::jit::Stack stack{self};
  exec::run_lowered(op, &stack);
  return self;
}

at::Tensor padded_flat_copy(const at::Tensor& x, int64_t total) {
  TPU_CHECK_TYPE(is_tpu(x), "padded_flat_copy: expected a tpu tensor, got one on ", x.device());
  TPU_CHECK_VALUE(total >= x.numel(), "padded_flat_copy: ", x.numel(), " elements do not fit in ", total);
  if (exec::any_poisoned()) exec::check_not_poisoned(x);
  at::Tensor out = at::empty({total}, x.options());
  if (total == 0) return out;
  const c10::DeviceIndex device = x.device().index();
  // Pending fused ops may write x: order the copy after them.
  device::flush_pending(device, device::FlushCause::kCopy);
  exec::metrics().bytes_device_to_device += static_cast<uint64_t>(x.numel()) * x.itemsize();
  auto fill = [target = detached_alias(out), src = detached_alias(x)] {
    // A queued program that was to write x failed after this copy was queued: out is lost too.
    if (exec::any_poisoned()) {
      if (auto loss = exec::lost_value(src.storage().unsafeGetStorageImpl())) {
        exec::poison_outputs({target.storage().getWeakStorageImpl()}, {1}, {}, *loss);
        return;
      }
    }
    at::Tensor dst = host_view(target, Access::kWrite);
    const int64_t n = src.numel();
    if (n > 0) dst.narrow(0, 0, n).copy_(host_view(src, Access::kRead).reshape(-1));
    if (n < dst.numel()) dst.narrow(0, n, dst.numel() - n).zero_();
  };
  // An idle device has nothing queued that writes x: copy now (as write_to_device does).
  if (device::device_idle(device)) {
    fill();
  } else {
    device::enqueue_fn(device::current_stream(device), std::move(fill));
  }
  return out;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return d;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::Tensor d = dst;
  if (!d.sizes().equals(self.sizes())) d.resize_(self.sizes());
  copy_(d, self, false);
  return d;
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  wait_for(self, "aten::_local_scalar_dense (.item())");
  exec::metrics().bytes_from_device += static_cast<uint64_t>(self.itemsize());
  return host_view(self, Access::kRead).item();
}

}  // namespace torch_tpu::aten
