#include "runtime/pjrt/executable_cache.h"

#include <sys/stat.h>

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <cstring>
#include <string_view>

#include "common/config.h"
#include "common/hash.h"
#include "common/paths.h"

namespace torch_tpu::pjrt {

static std::string hex16(uint64_t v) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return s;
}

std::unique_ptr<ExecutableCache> ExecutableCache::open(const Client& client, const std::string& compile_options) {
  std::string root = default_cache_root();
  if (root.empty()) return nullptr;
  const Plugin& p = client.plugin();
  std::string identity = p.path() + "|" + std::to_string(p.major()) + "." + std::to_string(p.minor()) + "|" +
                         client.platform_name() + "|" + client.platform_version() + "|" + compile_options;
  struct stat st {};
  if (::stat(p.path().c_str(), &st) == 0) {
    identity += "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtim.tv_sec) + "." +
                std::to_string(st.st_mtim.tv_nsec);
  }
  for (const auto& [name, value] : p.attributes()) identity += "|" + name + "=" + value;
  uint64_t max_bytes = 8ull << 30;
  try {
    std::string size = config::get("TORCH_TPU_CACHE_MAX_BYTES");
    if (!size.empty()) max_bytes = config::parse_size(size);
  } catch (const c10::Error&) {
    // The program tier reports a malformed size at import; keep the default here.
  }
  // "v<n>-torch" keeps DiskCache's eviction rule ("other versions go first") working here too.
  std::string version = "v1-torch-pjrt-" + client.platform_name() + "-" +
                        hex16(fnv1a(identity.data(), identity.size()));
  auto disk = std::make_unique<DiskCache>(root + "/pjrt", version, max_bytes);
  if (!disk->enabled()) return nullptr;
  return std::unique_ptr<ExecutableCache>(new ExecutableCache(std::move(disk)));
}

std::vector<int64_t> ExecutableCache::key_of(const std::string& mlir) {
  return {static_cast<int64_t>(fnv1a(mlir.data(), mlir.size())), static_cast<int64_t>(mlir.size())};
}

std::unique_ptr<LoadedExecutable> ExecutableCache::load(const Client& client, const std::string& mlir) {
  if (!serializable_.load(std::memory_order_relaxed)) return nullptr;
  std::vector<int64_t> key = key_of(mlir);
  std::optional<std::string> payload = disk_->load(key);
  if (!payload) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  uint64_t text_len = 0;
  if (payload->size() >= sizeof(text_len)) std::memcpy(&text_len, payload->data(), sizeof(text_len));
  std::string_view rest(*payload);
  if (payload->size() < sizeof(text_len) || text_len > payload->size() - sizeof(text_len) ||
      rest.substr(sizeof(text_len), text_len) != mlir) {
    misses_.fetch_add(1, std::memory_order_relaxed);  // another program with the same hash
    return nullptr;
  }
  try {
    auto exe = client.deserialize(payload->substr(sizeof(text_len) + text_len));
    hits_.fetch_add(1, std::memory_order_relaxed);
    return exe;
  } catch (const c10::Error& e) {
    disk_->discard(key, std::string("the plugin could not load the serialized executable: ") + e.what_without_backtrace());
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
}

void ExecutableCache::store(const Client& client, const std::string& mlir, const LoadedExecutable& executable) {
  if (!serializable_.load(std::memory_order_relaxed)) return;
  std::string bytes;
  try {
    bytes = client.serialize(executable);
  } catch (const c10::Error& e) {
    if (serializable_.exchange(false)) {
      TORCH_WARN("torch_tpu: the PJRT plugin cannot serialize executables, so compiled programs are not kept on "
                 "disk (", e.what_without_backtrace(), ")");
    }
    return;
  }
  uint64_t text_len = mlir.size();
  std::string payload(reinterpret_cast<const char*>(&text_len), sizeof(text_len));
  payload += mlir;
  payload += bytes;
  if (disk_->store(key_of(mlir), payload)) writes_.fetch_add(1, std::memory_order_relaxed);
}

ExecutableCacheStats ExecutableCache::stats() const {
  ExecutableCacheStats s;
  s.enabled = serializable_.load(std::memory_order_relaxed);
  s.directory = disk_->directory();
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace torch_tpu::pjrt
