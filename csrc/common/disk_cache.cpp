#include "common/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <thread>

#include <c10/util/Exception.h>

#include "common/cache_auth.h"
#include "common/config.h"
#include "common/fd_io.h"
#include "common/hash.h"
#include "common/paths.h"
#include "common/sha256.h"

namespace torch_tpu {
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
  uint8_t mac[DiskCache::kMacBytes];
};
static_assert(sizeof(Header) == DiskCache::kHeaderBytes);
// The MAC covers the header up to (not including) the MAC itself.
constexpr size_t kSignedHeaderBytes = offsetof(Header, mac);
static_assert(kSignedHeaderBytes == 32);
constexpr const char* kMacDomain = "torch_tpu program cache entry";

uint64_t checksum(const std::vector<int64_t>& key, std::string_view payload) {
  uint64_t h = fnv1a(key.data(), key.size() * sizeof(int64_t));
  return fnv1a(payload.data(), payload.size(), h);
}

// One warning per kind per process: the cache is an optimization, not worth a warning storm.
void warn_once(std::atomic<bool>& flag, const std::string& message) {
  if (!flag.exchange(true)) TORCH_WARN("torch_tpu: program disk cache: ", message);
}
std::atomic<bool> g_warned_unsafe{false}, g_warned_corrupt{false}, g_warned_io{false};

constexpr const char* kFix =
    "; the disk tier is off. Fix: point TORCH_TPU_CACHE_DIR at a directory that only you own and can write "
    "(mode 0700), under parents that only you or root can write (or sticky ones such as /tmp), or set "
    "TORCH_TPU_CACHE_DIR=off";

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

DiskCache::DiskCache(const std::string& root_in, const std::string& version, uint64_t max_bytes,
                     std::optional<std::string> key)
    : max_bytes_(max_bytes) {
  if (root_in.empty()) return;
  const std::string root = absolute_path(root_in);
  const std::string dir = root + "/" + version;
  if (version.empty() || version.find('/') != std::string::npos || version == "." || version == "..") {
    warn_once(g_warned_unsafe, "bad version directory name '" + version + "'; the disk tier is off");
    return;
  }
  std::string why;
  int root_fd = open_trusted_dir(root, /*create=*/true, /*private_leaf=*/true, why);
  if (root_fd < 0) {
    warn_once(g_warned_unsafe, "refusing cache directory " + root + " because " + why + kFix);
    return;
  }
  if (::mkdirat(root_fd, version.c_str(), 0700) != 0 && errno != EEXIST) {
    warn_once(g_warned_unsafe, "cannot create " + dir + " (" + std::strerror(errno) + "); the disk tier is off");
    ::close(root_fd);
    return;
  }
  int dir_fd = ::openat(root_fd, version.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (dir_fd < 0 || ::fstat(dir_fd, &st) != 0) {
    why = "cannot open it (" + std::string(std::strerror(errno)) + ")";
  } else if (st.st_uid != ::geteuid()) {
    why = "it is owned by another user (uid " + std::to_string(st.st_uid) + ")";
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    why = std::string("it is writable by group or others (mode ") + mode + ")";
  }
  if (!why.empty()) {
    warn_once(g_warned_unsafe, "refusing " + dir + ": " + why + kFix);
    if (dir_fd >= 0) ::close(dir_fd);
    ::close(root_fd);
    return;
  }
  if (!key) key = cache_key(why);
  if (!key || key->size() != kCacheKeyBytes) {
    warn_once(g_warned_unsafe, "no usable key to authenticate entries (" +
                                   (why.empty() ? std::string("wrong key size") : why) +
                                   "); the disk tier is off. Fix: remove the file so a fresh key is created "
                                   "(mode 0600), or point TORCH_TPU_CACHE_KEY_FILE at a private file");
    ::close(dir_fd);
    ::close(root_fd);
    return;
  }
  key_ = std::move(*key);
  root_ = root;
  dir_ = dir;
  version_ = version;
  root_fd_ = root_fd;
  dir_fd_ = dir_fd;
  enabled_ = true;
}

DiskCache::~DiskCache() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
  if (root_fd_ >= 0) ::close(root_fd_);
}

std::string DiskCache::name_for(const std::vector<int64_t>& key) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016" PRIx64 "%s", fnv1a(key.data(), key.size() * sizeof(int64_t)), kSuffix);
  return name;
}

std::array<uint8_t, DiskCache::kMacBytes> DiskCache::mac(std::string_view signed_header,
                                                         const std::vector<int64_t>& key,
                                                         std::string_view payload) const {
  HmacSha256 h(key_);
  h.update(kMacDomain, std::strlen(kMacDomain) + 1);  // with its NUL: a separator
  h.update(version_.data(), version_.size() + 1);
  h.update(signed_header);
  h.update(key.data(), key.size() * sizeof(int64_t));
  h.update(payload);
  return h.finish();
}

void DiskCache::count_corrupt(const std::string& name, const std::string& why, int fd) {
  corrupt_++;
  misses_++;
  // Delete only the file we read: another process may have renamed a good entry over it.
  struct stat mine {}, now {};
  bool same = fd < 0 || (::fstat(fd, &mine) == 0 &&
                         ::fstatat(dir_fd_, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
                         mine.st_ino == now.st_ino && mine.st_dev == now.st_dev);
  if (same) ::unlinkat(dir_fd_, name.c_str(), 0);
  warn_once(g_warned_corrupt, "discarded a corrupt entry " + dir_ + "/" + name + " (" + why +
                                  "); it will be recompiled");
}

std::optional<std::string> DiskCache::load(const std::vector<int64_t>& key) {
  if (!enabled_) return std::nullopt;
  const std::string name = name_for(key);
  // O_NONBLOCK: a FIFO in the directory must not block the open.
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) count_corrupt(name, "a symbolic link", -1);  // never followed
    else misses_++;
    return std::nullopt;
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    misses_++;
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    count_corrupt(name, "not a private regular file of this user", fd);
    return std::nullopt;
  }
  // Sanity bounds only (the header's lengths are checked below): no entry is shorter than its
  // header, and none this large was written (store() skips entries over max_bytes).
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes || size > std::max<uint64_t>(max_bytes_, uint64_t{64} << 20)) {
    count_corrupt(name, "size " + std::to_string(size), fd);
    return std::nullopt;
  }
  std::string bytes(size, '\0');
  if (!read_all(fd, bytes.data(), size)) {
    count_corrupt(name, "short read", fd);
    return std::nullopt;
  }
  Header h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kDiskFormatVersion) {
    count_corrupt(name, "bad magic or version", fd);
    return std::nullopt;
  }
  if (static_cast<uint64_t>(h.nwords) * sizeof(int64_t) + h.payload_len != size - kHeaderBytes ||
      h.payload_len > size) {
    count_corrupt(name, "length mismatch (truncated?)", fd);
    return std::nullopt;
  }
  std::vector<int64_t> stored(h.nwords);
  std::memcpy(stored.data(), bytes.data() + kHeaderBytes, h.nwords * sizeof(int64_t));
  std::string_view payload(bytes.data() + kHeaderBytes + h.nwords * sizeof(int64_t), h.payload_len);
  if (checksum(stored, payload) != h.checksum) {
    count_corrupt(name, "checksum mismatch", fd);
    return std::nullopt;
  }
  const auto expected = mac(std::string_view(bytes.data(), kSignedHeaderBytes), stored, payload);
  if (!digest_equal(expected.data(), h.mac, kMacBytes)) {
    count_corrupt(name, "authentication failed: the MAC does not match this user's key (modified or planted)", fd);
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
  std::memset(&h, 0, sizeof(h));
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kDiskFormatVersion;
  h.nwords = static_cast<uint32_t>(key.size());
  h.payload_len = payload.size();
  h.checksum = checksum(key, payload);
  const auto m = mac(std::string_view(reinterpret_cast<const char*>(&h), kSignedHeaderBytes), key, payload);
  std::memcpy(h.mac, m.data(), m.size());
  std::string bytes;
  bytes.reserve(total);
  bytes.append(reinterpret_cast<const char*>(&h), sizeof(h));
  bytes.append(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(int64_t));
  bytes.append(payload);

  char tmp[96];
  std::snprintf(tmp, sizeof(tmp), "%s%d.%zx.%" PRIu64, kTmpPrefix, static_cast<int>(::getpid()),
                std::hash<std::thread::id>{}(std::this_thread::get_id()), tmp_counter_++);
  const std::string name = name_for(key);
  int fd = ::openat(dir_fd_, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write_all(fd, bytes.data(), bytes.size());
  if (fd >= 0) ok = (::close(fd) == 0) && ok;
  ok = ok && ::renameat(dir_fd_, tmp, dir_fd_, name.c_str()) == 0;
  if (!ok) {
    int err = errno;
    if (fd >= 0) ::unlinkat(dir_fd_, tmp, 0);
    warn_once(g_warned_io, "cannot write " + dir_ + "/" + name + " (" + std::strerror(err) +
                               "); entries are not being saved");
    return false;
  }
  writes_++;
  bool scan;
  {
    std::lock_guard<std::mutex> g(scan_mu_);
    bytes_ += total;
    bytes_since_scan_ += total;
    scan = !scanned_ || bytes_ > max_bytes_ || bytes_since_scan_ >= max_bytes_ / kRescanFraction;
  }
  if (scan) scan_and_evict();
  return true;
}

void DiskCache::discard(const std::vector<int64_t>& key, const std::string& why) {
  if (!enabled_) return;
  hits_--;  // load() counted it as a hit
  count_corrupt(name_for(key), why, -1);
}

uint64_t DiskCache::scan_and_evict() {
  if (!enabled_) return 0;
  std::lock_guard<std::mutex> g(scan_mu_);
  struct Entry {
    bool stale;  // in another version's directory: never read again by this version
    int64_t mtime_ns;
    uint64_t size;
    int dir_fd;
    std::string name;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  // Every directory is read through a fresh descriptor opened relative to a held one (never by
  // path), and every file is examined with fstatat(AT_SYMLINK_NOFOLLOW) and removed with
  // unlinkat: nothing outside the held directories can be touched.
  auto scan_dir = [&](int dir_fd, bool stale) {
    int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (d == nullptr) {
      if (fd >= 0) ::close(fd);
      return;
    }
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.rfind(kTmpPrefix, 0) == 0) {
        if (now - static_cast<int64_t>(st.st_mtim.tv_sec) > kStaleTmpSeconds) ::unlinkat(dir_fd, name.c_str(), 0);
        continue;
      }
      if (!ends_with(name, kSuffix)) continue;
      int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      entries.push_back({stale, mtime, static_cast<uint64_t>(st.st_size), dir_fd, std::move(name)});
      total += static_cast<uint64_t>(st.st_size);
    }
    ::closedir(d);
  };
  // The bound covers the whole root: entries of other versions (older releases, edited
  // lowerings) count, and go first.
  std::vector<std::pair<std::string, int>> others;  // name, descriptor
  {
    int fd = ::openat(root_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (d == nullptr && fd >= 0) ::close(fd);
    while (d != nullptr) {
      dirent* e = ::readdir(d);
      if (e == nullptr) break;
      std::string name = e->d_name;
      // Only directories named like ours ("v<n>-torch..."): the root may hold other files.
      if (name == version_ || name.rfind('v', 0) != 0 || name.find("-torch") == std::string::npos) continue;
      int other = ::openat(root_fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (other >= 0) others.emplace_back(std::move(name), other);
    }
    if (d != nullptr) ::closedir(d);
  }
  scan_dir(dir_fd_, false);
  for (const auto& other : others) scan_dir(other.second, true);
  if (total > max_bytes_) {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.stale != b.stale ? a.stale : a.mtime_ns < b.mtime_ns;
    });
    const uint64_t low_water = max_bytes_ / 10 * 9;
    for (const auto& e : entries) {
      if (total <= low_water) break;
      if (::unlinkat(e.dir_fd, e.name.c_str(), 0) == 0 || errno == ENOENT) {
        total -= e.size;
        evictions_++;
      }
    }
    for (const auto& other : others) ::unlinkat(root_fd_, other.first.c_str(), AT_REMOVEDIR);  // once empty
  }
  for (const auto& other : others) ::close(other.second);
  bytes_ = total;
  scanned_ = true;
  bytes_since_scan_ = 0;
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

}  // namespace torch_tpu
