// Allocation, resizing and storage setters for tpu tensors (no IR: pure memory management).
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/resize_native.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <limits>

#include "aten/kernels.h"
#include "common/check.h"
#include "device/allocator.h"
#include "device/device.h"
#include "device/stream.h"
#include "runtime/residency.h"

namespace torch_tpu::aten {
namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

c10::DeviceIndex target_device(std::optional<c10::Device> device) {
  c10::DeviceIndex idx = device.has_value() && device->has_index() ? device->index() : device::current();
  device::check_index(idx);
  return idx;
}

void check_dtype(c10::ScalarType dtype) {
  TPU_CHECK_TYPE(!c10::isQIntType(dtype) && !c10::isBitsType(dtype) && !c10::isFloat8Type(dtype) &&
                     dtype != c10::kUInt16 && dtype != c10::kUInt32 && dtype != c10::kUInt64 &&
                     dtype != c10::kComplexHalf,
                 "dtype ", dtype,
                 " is not supported on the tpu device (supported: float32, float64, float16, "
                 "bfloat16, int64, int32, int16, int8, uint8, bool, complex64, complex128)");
}

// Hands out no memory: an efficient zero tensor has none (its ZeroTensor key stands for zeros).
struct NoMemoryAllocator final : c10::Allocator {
  static void nothing_to_free(void* /*ptr*/) {}
  c10::DataPtr allocate(size_t /*nbytes*/) override { return {nullptr, nullptr, &nothing_to_free, device}; }
  c10::DeleterFnPtr raw_deleter() const override { return &nothing_to_free; }
  void copy_data(void* /*dest*/, const void* /*src*/, size_t /*count*/) const override {}
  c10::Device device{kTpu, 0};
};

// One per device, for good: a storage keeps a pointer to its allocator.
NoMemoryAllocator& no_memory_allocator(c10::DeviceIndex idx) {
  static std::array<NoMemoryAllocator, std::numeric_limits<c10::DeviceIndex>::max() + 1> all = [] {
    std::array<NoMemoryAllocator, std::numeric_limits<c10::DeviceIndex>::max() + 1> a;
    for (size_t i = 0; i < a.size(); ++i) a[i].device = c10::Device(kTpu, static_cast<c10::DeviceIndex>(i));
    return a;
  }();
  return all[static_cast<size_t>(idx)];
}

}  // namespace

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  auto idx = target_device(device);
  auto st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  check_dtype(st);
  c10::DeviceGuard guard(c10::Device(kTpu, idx));
  return at::detail::empty_generic(size, &device::DeviceAllocator::get(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   st, memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  auto idx = target_device(device);
  auto st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  check_dtype(st);
  c10::DeviceGuard guard(c10::Device(kTpu, idx));
  return at::detail::empty_strided_generic(size, stride, &device::DeviceAllocator::get(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st);
}

at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  auto idx = target_device(device);
  auto st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  check_dtype(st);
  // PyTorch's ZeroTensor fallback materializes it (at::zeros on this device) for any op that
  // reads it; forward-mode AD (jvp, jacfwd, make_dual) creates these for absent tangents.
  return at::detail::empty_generic(
      size, &no_memory_allocator(idx),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor), st,
      std::nullopt);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> format) {
  c10::DeviceGuard guard(self.device());
  int64_t numel = 1;
  for (auto s : size) numel *= s;
  size_t needed = static_cast<size_t>(numel + self.storage_offset()) * self.itemsize();
  // Growing moves the memory, so queued and pending work on the old memory must finish first.
  // Storage without memory (ATen's functional ops, arange among them, make an empty `out`
  // tensor and resize it) has no work to wait for and nothing to copy.
  if (needed > self.storage().nbytes() && self.storage().nbytes() > 0) {
    device::FlushCauseScope cause(device::FlushCause::kResize);
    device::synchronize_device(self.device().index());
    // ATen copies the old bytes on the host: where the latest ones live on the device (PJRT's
    // resident buffers), bring them back first, or the grown tensor reads stale memory.
    runtime::before_host_read(self.storage().data(), self.storage().nbytes());
  }
  return at::native::resize_(self, size, format);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TPU_CHECK(source.device().type() == kTpu, "set_: expected a tpu storage, got ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(size, stride, offset);
  return self;
}

at::Tensor& set_storage_whole(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.itemsize());
  return set_storage(self, std::move(source), 0, {n}, {1});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (!self.is_same(source)) set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &device::DeviceAllocator::get(), true);
  return set_storage(self, std::move(storage), 0, {0}, {1});
}

// Dense CPU and tpu tensors can swap TensorImpl contents (`param.data = moved`), as CPU and
// CUDA can; without this, Module.to("tpu") would create new Parameters and untie tied weights.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.device().is_cpu() || t.device().type() == kTpu);
  };
  return dense(self) && dense(from);
}

// Queued work keeps its tensors alive, so there is nothing to record.
void record_stream(at::Tensor& /*self*/, c10::Stream /*stream*/) {}

}  // namespace torch_tpu::aten
