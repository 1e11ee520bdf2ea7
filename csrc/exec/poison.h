// Poisoned memory: storages a failed queued program was to write.
//
// A queued program that fails at run time (a bad index found by a gather, out of memory) raises
// at the next host read or synchronize, but the tensors it stores have unknown contents: a
// strict-mode op never wrote its result; in a fused graph some steps ran, others did not. Their storages are marked
// here, and any later use of such a tensor (an op reading or writing it, a host read) raises the original error type
// again, naming the failure, instead of returning uninitialized memory. A copy from the host that covers the whole
// storage (load_state_dict, `t.copy_(cpu_tensor)`) makes it valid again; everything else about
// the process stays usable. Free when nothing is poisoned: callers test any_poisoned() (one
// relaxed atomic load) before looking anything up.
#pragma once

#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <vector>

namespace at {
class Tensor;
}

namespace torch_tpu::exec {

namespace detail {
extern std::atomic<bool> g_any_poisoned;
}

inline bool any_poisoned() { return detail::g_any_poisoned.load(std::memory_order_relaxed); }

// Marks `storages` (those still alive) as holding values lost when `error` was raised.
void poison(const std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>& storages, const c10::Error& error);

// For a queued program about to run: if a storage it reads is poisoned, its results would be
// computed from lost values, so `written` is poisoned with that storage's error and true is
// returned (the caller skips the run; the original error is already on its way to the host).
// False otherwise. Callers test any_poisoned() first.
bool poisoned_input(const std::vector<const c10::StorageImpl*>& read,
                    const std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>& written);

// Raises (the poisoning error's type) if t's storage is poisoned.
void check_not_poisoned(const at::Tensor& t);

// t was overwritten from the host: its storage is valid again if t covers all of it.
void unpoison_if_covered(const at::Tensor& t);

}  // namespace torch_tpu::exec
