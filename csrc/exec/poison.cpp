#include "exec/poison.h"

#include <ATen/core/Tensor.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "device/stream.h"

namespace torch_tpu::exec {

namespace detail {
std::atomic<bool> g_any_poisoned{false};
}

namespace {

enum class ErrorKind : uint8_t { kIndex, kValue, kType, kMemory, kOther };

struct Poisoned {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
  ErrorKind kind = ErrorKind::kOther;
  std::string message;  // the original error, without its C++ backtrace
};

std::mutex g_mu;
std::unordered_map<const c10::StorageImpl*, Poisoned> g_poisoned;  // guarded by g_mu

void update_flag_locked() { detail::g_any_poisoned.store(!g_poisoned.empty(), std::memory_order_relaxed); }

ErrorKind kind_of(const c10::Error& e) {
  if (dynamic_cast<const c10::IndexError*>(&e)) return ErrorKind::kIndex;
  if (dynamic_cast<const c10::ValueError*>(&e)) return ErrorKind::kValue;
  if (dynamic_cast<const c10::TypeError*>(&e)) return ErrorKind::kType;
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return ErrorKind::kMemory;
  return ErrorKind::kOther;
}

[[noreturn]] void raise(ErrorKind kind, const std::string& original) {
  const std::string msg = "torch_tpu: this tensor's value was lost: the queued program that writes it failed with \"" +
                          original +
                          "\". Recreate the tensor, or overwrite all of it from the host (copy_ from a CPU tensor, "
                          "load_state_dict).";
  switch (kind) {
    case ErrorKind::kIndex:
      TORCH_CHECK_INDEX(false, msg);
    case ErrorKind::kValue:
      TORCH_CHECK_VALUE(false, msg);
    case ErrorKind::kType:
      TORCH_CHECK_TYPE(false, msg);
    case ErrorKind::kMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case ErrorKind::kOther:
      break;
  }
  TORCH_CHECK(false, msg);
}

void poison_locked(const std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>& storages, ErrorKind kind,
                   const std::string& message) {
  for (auto it = g_poisoned.begin(); it != g_poisoned.end();) {  // forget storages freed since
    it = it->second.storage.expired() ? g_poisoned.erase(it) : std::next(it);
  }
  for (const auto& weak : storages) {
    c10::intrusive_ptr<c10::StorageImpl> s = weak.lock();
    if (s) g_poisoned.insert_or_assign(s.get(), Poisoned{weak, kind, message});
  }
  update_flag_locked();
}

}  // namespace

void poison(const std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>& storages, const c10::Error& error) {
  std::lock_guard<std::mutex> lock(g_mu);
  poison_locked(storages, kind_of(error), error.what_without_backtrace());
}

Loss loss_of(const c10::Error& error) {
  return Loss{static_cast<uint8_t>(kind_of(error)), error.what_without_backtrace()};
}

std::optional<Loss> lost_value(const c10::StorageImpl* storage) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_poisoned.find(storage);
  if (it == g_poisoned.end() || it->second.storage.expired()) return std::nullopt;
  return Loss{static_cast<uint8_t>(it->second.kind), it->second.message};
}

void poison_outputs(const std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>& written,
                    const std::vector<uint8_t>& fresh, const std::vector<runtime::OutputFate>& fates,
                    const Loss& loss) {
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> lost;
  for (size_t k = 0; k < written.size(); ++k) {
    const runtime::OutputFate fate = k < fates.size() ? fates[k] : runtime::OutputFate::kLost;
    if (fate == runtime::OutputFate::kLost || (fate == runtime::OutputFate::kUntouched && k < fresh.size() && fresh[k])) {
      lost.push_back(written[k]);
    }
  }
  if (lost.empty()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  poison_locked(lost, static_cast<ErrorKind>(loss.kind), loss.message);
}

void check_not_poisoned(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return;
  ErrorKind kind;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_poisoned.find(t.storage().unsafeGetStorageImpl());
    if (it == g_poisoned.end()) return;
    // The same address may hold a newer storage once the poisoned one was freed.
    if (it->second.storage.lock().get() != t.storage().unsafeGetStorageImpl()) {
      g_poisoned.erase(it);
      update_flag_locked();
      return;
    }
    kind = it->second.kind;
    message = it->second.message;
  }
  // The failure that lost it may not have reached the host yet (it surfaces at the next
  // synchronization): using a lost value is where the host learns of it, so the original error
  // is raised here, once, rather than later at an unrelated line; later uses raise "lost".
  device::synchronize_device(-1);
  raise(kind, message);
}

void unpoison_if_covered(const at::Tensor& t) {
  const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (t.storage_offset() != 0 || !t.is_non_overlapping_and_dense() ||
      static_cast<size_t>(t.numel()) * t.itemsize() != s->nbytes()) {
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_poisoned.erase(s) > 0) update_flag_locked();
}

}  // namespace torch_tpu::exec
