#include "compiler/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <thread>

#include <c10/util/Exception.h>
#include <torch/version.h>

#include "common/config.h"
#include "compiler/program_serialize.h"
#include "ir/ops.h"

namespace torch_tpu::compiler {
namespace {

constexpr char kMagic[8] = {'T', 'P', 'U', 'P', 'C', 'A', 'C', 'H'};
constexpr const char* kSuffix = ".tpp";
constexpr const char* kTmpPrefix = ".tmp.";
constexpr int64_t kStaleTmpSeconds = 600;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t nwords;
  uint64_t payload_len;
  uint64_t checksum;
};
static_assert(sizeof(Header) == DiskCache::kHeaderBytes);

uint64_t checksum(const std::vector<int64_t>& key, std::string_view payload) {
  uint64_t h = fnv1a(key.data(), key.size() * sizeof(int64_t));
  return fnv1a(payload.data(), payload.size(), h);
}

// One warning per kind per process: the cache is an optimization, not worth a warning storm.
void warn_once(std::atomic<bool>& flag, const std::string& message) {
  if (!flag.exchange(true)) TORCH_WARN("torch_tpu: program disk cache: ", message);
}
std::atomic<bool> g_warned_unsafe{false}, g_warned_corrupt{false}, g_warned_io{false};

// Creates `path` (and missing parents) with mode 0700. True if it exists as a directory after.
bool make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// "" when `path` is a directory only this user can write; the reason otherwise.
std::string unsafe_reason(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "cannot stat it (" + std::string(std::strerror(errno)) + ")";
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != ::geteuid()) return "it is owned by another user (uid " + std::to_string(st.st_uid) + ")";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return std::string("it is writable by group or others (mode ") + mode + ")";
  }
  return "";
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

uint64_t fnv1a(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

DiskCache::DiskCache(const std::string& root, const std::string& version, uint64_t max_bytes)
    : max_bytes_(max_bytes) {
  if (root.empty()) return;
  if (!make_dirs(root)) {
    warn_once(g_warned_unsafe, "cannot create " + root + " (" + std::strerror(errno) + "); the disk tier is off");
    return;
  }
  std::string why = unsafe_reason(root);
  std::string dir = root + "/" + version;
  if (why.empty()) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      warn_once(g_warned_unsafe, "cannot create " + dir + " (" + std::strerror(errno) + "); the disk tier is off");
      return;
    }
    why = unsafe_reason(dir);
    if (!why.empty()) why = dir + ": " + why;
  } else {
    why = root + ": " + why;
  }
  if (!why.empty()) {
    warn_once(g_warned_unsafe, "refusing " + why +
                                   "; the disk tier is off (use a private directory, mode 0700, via TORCH_TPU_CACHE_DIR)");
    return;
  }
  root_ = root;
  dir_ = dir;
  enabled_ = true;
}

std::string DiskCache::path_for(const std::vector<int64_t>& key) const {
  char name[32];
  std::snprintf(name, sizeof(name), "/%016" PRIx64, fnv1a(key.data(), key.size() * sizeof(int64_t)));
  return dir_ + name + kSuffix;
}

void DiskCache::count_corrupt(const std::string& path, const std::string& why, int fd) {
  corrupt_++;
  misses_++;
  // Delete only the file we read: another process may have renamed a good entry over it.
  struct stat mine {}, now {};
  bool same = fd < 0 || (::fstat(fd, &mine) == 0 && ::lstat(path.c_str(), &now) == 0 && mine.st_ino == now.st_ino &&
                         mine.st_dev == now.st_dev);
  if (same) ::unlink(path.c_str());
  warn_once(g_warned_corrupt, "discarded a corrupt entry " + path + " (" + why + "); it will be recompiled");
}

std::optional<std::string> DiskCache::load(const std::vector<int64_t>& key) {
  if (!enabled_) return std::nullopt;
  std::string path = path_for(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    misses_++;
    return std::nullopt;
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    misses_++;
    return std::nullopt;
  }
  // Sanity bounds only (the header's lengths are checked below): no entry is shorter than its
  // header, and none this large was written (store() skips entries over max_bytes).
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes || size > std::max<uint64_t>(max_bytes_, uint64_t{64} << 20)) {
    count_corrupt(path, "size " + std::to_string(size), fd);
    return std::nullopt;
  }
  std::string bytes(size, '\0');
  if (!read_all(fd, bytes.data(), size)) {
    count_corrupt(path, "short read", fd);
    return std::nullopt;
  }
  Header h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kDiskFormatVersion) {
    count_corrupt(path, "bad magic or version", fd);
    return std::nullopt;
  }
  if (static_cast<uint64_t>(h.nwords) * sizeof(int64_t) + h.payload_len != size - kHeaderBytes ||
      h.payload_len > size) {
    count_corrupt(path, "length mismatch (truncated?)", fd);
    return std::nullopt;
  }
  std::vector<int64_t> stored(h.nwords);
  std::memcpy(stored.data(), bytes.data() + kHeaderBytes, h.nwords * sizeof(int64_t));
  std::string_view payload(bytes.data() + kHeaderBytes + h.nwords * sizeof(int64_t), h.payload_len);
  if (checksum(stored, payload) != h.checksum) {
    count_corrupt(path, "checksum mismatch", fd);
    return std::nullopt;
  }
  if (stored != key) {  // a hash collision: another key's entry (intact), not ours
    misses_++;
    return std::nullopt;
  }
  ::futimens(fd, nullptr);  // LRU age
  hits_++;
  return std::string(payload);
}

bool DiskCache::store(const std::vector<int64_t>& key, std::string_view payload) {
  if (!enabled_) return false;
  const uint64_t total = kHeaderBytes + key.size() * sizeof(int64_t) + payload.size();
  if (total > max_bytes_) return false;  // would be evicted at once
  Header h;
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kDiskFormatVersion;
  h.nwords = static_cast<uint32_t>(key.size());
  h.payload_len = payload.size();
  h.checksum = checksum(key, payload);
  std::string bytes;
  bytes.reserve(total);
  bytes.append(reinterpret_cast<const char*>(&h), sizeof(h));
  bytes.append(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(int64_t));
  bytes.append(payload);

  char tmp_name[96];
  std::snprintf(tmp_name, sizeof(tmp_name), "/%s%d.%zx.%" PRIu64, kTmpPrefix, static_cast<int>(::getpid()),
                std::hash<std::thread::id>{}(std::this_thread::get_id()), tmp_counter_++);
  std::string tmp = dir_ + tmp_name;
  std::string path = path_for(key);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write_all(fd, bytes.data(), bytes.size());
  if (fd >= 0) ok = (::close(fd) == 0) && ok;
  ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    int err = errno;
    if (fd >= 0) ::unlink(tmp.c_str());
    warn_once(g_warned_io, "cannot write " + path + " (" + std::strerror(err) + "); entries are not being saved");
    return false;
  }
  writes_++;
  bool scan;
  {
    std::lock_guard<std::mutex> g(scan_mu_);
    bytes_ += total;
    scan = !scanned_ || bytes_ > max_bytes_ || ++writes_since_scan_ >= kRescanWrites;
  }
  if (scan) scan_and_evict();
  return true;
}

void DiskCache::discard(const std::vector<int64_t>& key, const std::string& why) {
  if (!enabled_) return;
  std::string path = path_for(key);
  hits_--;  // load() counted it as a hit
  count_corrupt(path, why, -1);
}

uint64_t DiskCache::scan_and_evict() {
  if (!enabled_) return 0;
  std::lock_guard<std::mutex> g(scan_mu_);
  struct Entry {
    bool stale;  // in another version's directory: never read again by this version
    int64_t mtime_ns;
    uint64_t size;
    std::string path;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto scan_dir = [&](const std::string& dir, bool stale) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      std::string path = dir + "/" + name;
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.rfind(kTmpPrefix, 0) == 0) {
        if (now - static_cast<int64_t>(st.st_mtim.tv_sec) > kStaleTmpSeconds) ::unlink(path.c_str());
        continue;
      }
      if (!ends_with(name, kSuffix)) continue;
      int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      entries.push_back({stale, mtime, static_cast<uint64_t>(st.st_size), std::move(path)});
      total += static_cast<uint64_t>(st.st_size);
    }
    ::closedir(d);
  };
  // The bound covers the whole root: entries of other versions (older releases, edited
  // lowerings) count, and go first.
  std::vector<std::string> others;
  if (DIR* d = ::opendir(root_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      std::string path = root_ + "/" + name;
      struct stat st {};
      // Only directories named like ours ("v<n>-torch..."): the root may hold other files.
      if (path == dir_ || name.rfind('v', 0) != 0 || name.find("-torch") == std::string::npos) continue;
      if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) others.push_back(path);
    }
    ::closedir(d);
  }
  scan_dir(dir_, false);
  for (const auto& other : others) scan_dir(other, true);
  if (total > max_bytes_) {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.stale != b.stale ? a.stale : a.mtime_ns < b.mtime_ns;
    });
    const uint64_t low_water = max_bytes_ / 10 * 9;
    for (const auto& e : entries) {
      if (total <= low_water) break;
      if (::unlink(e.path.c_str()) == 0 || errno == ENOENT) {
        total -= e.size;
        evictions_++;
      }
    }
    for (const auto& other : others) ::rmdir(other.c_str());  // only succeeds once empty
  }
  bytes_ = total;
  scanned_ = true;
  writes_since_scan_ = 0;
  return total;
}

DiskCacheStats DiskCache::stats() {
  DiskCacheStats s;
  s.enabled = enabled_;
  s.directory = dir_;
  s.max_bytes = max_bytes_;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.writes = writes_.load();
  s.corrupt = corrupt_.load();
  s.evictions = evictions_.load();
  bool need_scan;
  {
    std::lock_guard<std::mutex> g(scan_mu_);
    need_scan = enabled_ && !scanned_;
    s.bytes = bytes_;
  }
  if (need_scan) s.bytes = scan_and_evict();
  return s;
}

std::string default_cache_root() {
  std::string dir = config::get("TORCH_TPU_CACHE_DIR");
  if (std::getenv("TORCH_TPU_CACHE_DIR") != nullptr) return dir == "off" ? "" : dir;  // set: "" or "off" disable
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/torch_tpu";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    return std::string(home) + "/.cache/torch_tpu";
  }
  return "";
}

std::string cache_version(const std::string& lowering_fingerprint) {
  std::string fp;
  for (char c : lowering_fingerprint) {  // keep the directory name a plain file name
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') fp += c;
  }
  return "v" + std::to_string(kDiskFormatVersion) + "-torch" + TORCH_VERSION + "-ir" +
         std::to_string(ir::kNumOpKinds) + "." + std::to_string(kProgramFormatVersion) + "." +
         std::to_string(kCompilerVersion) + (fp.empty() ? "" : "-" + fp);
}

namespace {
std::atomic<DiskCache*> g_disk{nullptr};
std::once_flag g_disk_once;
}  // namespace

DiskCache* process_disk_cache() {
  DiskCache* c = g_disk.load(std::memory_order_acquire);
  return c != nullptr && c->enabled() ? c : nullptr;
}

DiskCacheStats process_disk_cache_stats() {
  DiskCache* c = g_disk.load(std::memory_order_acquire);
  return c != nullptr ? c->stats() : DiskCacheStats{};
}

void configure_disk_cache(const std::string& lowering_fingerprint) {
  std::call_once(g_disk_once, [&] {
    std::string size = config::get("TORCH_TPU_CACHE_MAX_BYTES");
    uint64_t max_bytes = 0;
    try {
      max_bytes = config::parse_size(size);
    } catch (const c10::Error&) {
      TORCH_CHECK_VALUE(false, "torch_tpu: TORCH_TPU_CACHE_MAX_BYTES='", size,
                        "' is not a size (expected e.g. 1GiB, 512MiB or a byte count)");
    }
    std::string root = default_cache_root();
    // Leaked on purpose: dispatch may use it from any thread until the process exits.
    g_disk.store(new DiskCache(root, cache_version(lowering_fingerprint), max_bytes), std::memory_order_release);
  });
}

}  // namespace torch_tpu::compiler
