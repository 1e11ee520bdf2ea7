// Assertions on device values: torch._assert_async (what torch.compile's graphs, TorchTitan's
// loss and torch.distributions' validation emit for checks like "all labels are in range").
//
// CUDA checks the value on the device and reports a failed check at a later synchronization;
// CPU checks at the call. We do what each mode promises for errors from queued work: debug
// checks at the call site; strict queues the check behind the work that computes the value,
// so the host never waits and a failure is raised at the stream's next enqueue or
// synchronization (like any error from queued work); fused hands its pending graph to the
// stream first (flush cause "stream_event", as for other work queued by a kernel), then
// queues the check the same way. The shape check
// (one element) needs no value and raises at the call, as on CPU.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>

#include "aten/kernels.h"
#include "device/stream.h"
#include "exec/mode.h"
#include "exec/poison.h"

namespace torch_tpu::aten {
namespace {

void check_nonzero(const at::Tensor& value, const std::string& msg) {
  TORCH_CHECK(value.item<bool>(), msg);
}

void queue_assert(const at::Tensor& self, std::string msg) {
  TORCH_CHECK(self.numel() != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(self.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
  if (exec::mode() == exec::Mode::Debug) {
    TORCH_CHECK(self.item<bool>(), msg);  // waits for the value, then checks at the call
    return;
  }
  device::enqueue_fn(device::current_stream(self.device().index()),
                     [value = detached_alias(self), msg = std::move(msg)] {
                       if (exec::any_poisoned()) exec::check_not_poisoned(value);
                       check_nonzero(host_view(value, Access::kRead), msg);
                     });
}

}  // namespace

void assert_async(const at::Tensor& self) {
  queue_assert(self, "Expected Tensor with single nonzero value, but got zero");
}

void assert_async_msg(const at::Tensor& self, c10::string_view assert_msg) {
  queue_assert(self, assert_msg.empty() ? std::string("Assertion is failed") : std::string(assert_msg));
}

at::Tensor functional_assert_async_msg(const at::Tensor& self, c10::string_view assert_msg,
                                       const at::Tensor& dep_token) {
  assert_async_msg(self, assert_msg);
  return dep_token.clone();
}

at::Tensor make_dep_token(std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                          std::optional<c10::Device> device, std::optional<bool> pin_memory,
                          std::optional<c10::MemoryFormat> memory_format) {
  // The token that orders functional assertions: an empty 0-d tensor, as on CPU.
  return empty_memory_format({}, dtype, layout, device, pin_memory, memory_format);
}

}  // namespace torch_tpu::aten
