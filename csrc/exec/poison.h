// Poisoned memory: storages a failed queued program was to write.
//
// A queued program that fails at run time (a bad index found by a gather, out of memory) raises
// at the next host read or synchronize, but the tensors it stores have unknown contents: a
// strict-mode op never wrote its result; in a fused graph some steps ran, others did not. Their storages are marked
// here, and any later use of such a tensor (an op reading or writing it, a host read) raises the original error type
// again, naming the failure, instead of returning uninitialized memory. A copy from the host that covers the whole
// storage (load_state_dict, `t.copy_(cpu_tensor)`) makes it valid again; everything else about
// the process stays usable. Only what depends on the failure is lost: the runtime reports per
// output whether it was written, untouched or lost (runtime::OutputFate); work independent of
// the failure completes, and in-place targets that were not written keep their last good value. Free when nothing is poisoned: callers test any_poisoned() (one
// relaxed atomic load) before looking anything up.
#pragma once

#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace at {
class Tensor;
}

namespace torch_tpu::exec {

namespace detail {
extern std::atomic<bool> g_any_poisoned;
}

inline bool any_poisoned() { return detail::g_any_poisoned.load(std::memory_order_relaxed); }

// Why a value was lost: the failure's error type (raised again when the value is used) and its
// message without the C++ backtrace.
struct Loss {
  uint8_t kind = 0;
  std::string message;
};
Loss loss_of(const c10::Error& error);

// Marks `storages` (those still alive) as holding values lost when `error` was raised.
void poison(const std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>& storages, const c10::Error& error);

// The loss of a poisoned storage, or nullopt. For a queued program about to run: its bindings
// of such storages are lost (runtime::Binding::lost), and what it computes from them is lost too.
std::optional<Loss> lost_value(const c10::StorageImpl* storage);

// After a queued program failed, or ran with lost inputs: poisons, per output target k (the
// memory `written[k]` of run()'s output k), what no longer holds a valid value. `fates` are the
// runtime's (runtime::last_run_fates; empty: every output is lost). A lost output is poisoned;
// an untouched one only if `fresh[k]` (the program writes that memory without reading it first:
// a new result, an out= or copy_ target, whose old contents the user meant to replace): an
// in-place update's target that was not written keeps its last good value, as when the op
// raised before running.
void poison_outputs(const std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>& written,
                    const std::vector<uint8_t>& fresh, const std::vector<runtime::OutputFate>& fates,
                    const Loss& loss);

// Raises (the poisoning error's type) if t's storage is poisoned.
void check_not_poisoned(const at::Tensor& t);

// t was overwritten from the host: its storage is valid again if t covers all of it.
void unpoison_if_covered(const at::Tensor& t);

}  // namespace torch_tpu::exec
