// Authenticated on-disk store: stable key -> bytes, shared by all processes of one user. The
// persistent tier of the program cache (compiler/disk_cache.h: its process-wide instance and
// version name) and the PJRT executable cache (runtime/pjrt/executable_cache.h) are built on it;
// it lives in common/ because both layers use it.
//
// Design (see docs/notes/program-cache.md):
// - Layout: <root>/<version>/<16 hex digits>.tpp, one file per entry, named by a 64-bit FNV-1a
//   hash of the key words. <root> is TORCH_TPU_CACHE_DIR (default $XDG_CACHE_HOME/torch_tpu or
//   ~/.cache/torch_tpu; `off` or empty disables the tier), made absolute when the tier is
//   configured. <version> names everything that changes what an entry means: this file format,
//   the program format, the torch version, the IR op count, kCompilerVersion and a fingerprint
//   of the Python lowerings and the extension (computed by the package at import). An upgrade
//   therefore starts a fresh directory and never reads stale entries.
// - Trust (why: entries include native code that is dlopened, and programs the executor
//   trusts; see cache_auth.h). The root and version directories are opened once, by a walk
//   from "/" that refuses ancestors other users could rename inside, and the descriptors are
//   held: every later access is openat/renameat/unlinkat/fstatat relative to them with
//   O_NOFOLLOW / AT_SYMLINK_NOFOLLOW, so renaming or replacing any path component afterwards
//   (or chdir with a relative root) cannot redirect the tier. Entries must be regular files
//   owned by this user and private (fstat on the opened descriptor), and every entry carries
//   an HMAC-SHA256 under the user's key (cache_auth.h), verified over the bytes read into
//   memory before anything is returned: a file planted or edited without the key is
//   discarded as corrupt. Callers get only those verified bytes (native kernels are dlopened
//   from a private copy of them, never from a path in this directory).
// - Entry: a 64-byte header (magic "TPUPCACH", format version, key word count, payload length,
//   a 64-bit FNV-1a checksum over key words and payload that tells plain damage apart, and the
//   32-byte MAC over the version name, the header's first 32 bytes, the key words and the
//   payload), the key words, the payload. A read checks the magic, version, exact file length,
//   checksum and MAC; a mismatch is corruption: warn (once per process), delete the file,
//   report a miss. Key words that differ from the requested key (a hash collision) are a plain
//   miss.
// - Atomicity: an entry is written to a unique temporary file in the same directory
//   (".tmp.<pid>.<thread>.<counter>", O_EXCL, mode 0600) and renamed over its final name, so
//   concurrent processes see either the old entry, the new one or none, never a partial one.
//   Data is not fsynced: after a crash a torn entry fails its checksum and is rewritten.
// - The cache never throws into its caller: I/O failures are misses (load) or skipped writes
//   (store); an unsafe directory or key warns once and leaves the tier disabled.
// - Size: max_bytes bounds the whole root. After writes, when an estimate of its size passes
//   max_bytes (or once this process has written max_bytes / kRescanFraction since the last
//   scan, to notice other processes' entries) the root is scanned and entries are deleted down to 90% of max_bytes: other versions' entries first
//   (they are never read again), then the least recently used (oldest mtime; a hit touches its
//   entry). Temporary files older than ten minutes (left by killed writers) go too. A scan
//   stats every entry (40,000 small per-op entries cost tens of milliseconds), so rescans are
//   paced by bytes written, not by count: each writer lets the root pass the bound by at most
//   max_bytes / kRescanFraction before it notices.
// Thread-safe; safe under concurrent processes sharing the directory.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_tpu {

// 2: entries carry an HMAC-SHA256 (64-byte header).
inline constexpr uint32_t kDiskFormatVersion = 2;

struct DiskCacheStats {
  bool enabled = false;
  std::string directory;  // the versioned entry directory ("" when disabled)
  uint64_t hits = 0, misses = 0, writes = 0, corrupt = 0, evictions = 0;
  uint64_t bytes = 0;  // estimated bytes of entries under the root, all versions (exact after a scan)
  uint64_t max_bytes = 0;
};

class DiskCache {
 public:
  // Opens (creating it, mode 0700) <root>/<version> and holds both directories open. `key`
  // authenticates entries (cache_auth.h); nullopt: the process's key (cache_key()). Never
  // throws: an unusable or unsafe directory or key warns once and leaves the cache disabled
  // (enabled() false). A relative root is taken relative to the current directory, once.
  DiskCache(const std::string& root, const std::string& version, uint64_t max_bytes,
            std::optional<std::string> key = std::nullopt);
  ~DiskCache();
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  bool enabled() const { return enabled_; }
  const std::string& directory() const { return dir_; }

  // The payload stored under `key`, or nullopt (miss, disabled, corrupt entry: deleted).
  // A hit refreshes the entry's mtime (its LRU age).
  std::optional<std::string> load(const std::vector<int64_t>& key);
  // Writes the entry atomically; false when disabled or on an I/O error (warned once).
  bool store(const std::vector<int64_t>& key, std::string_view payload);
  // The caller found a loaded payload unusable (it failed to deserialize or verify): delete
  // the entry and count it as corrupt (warns once).
  void discard(const std::vector<int64_t>& key, const std::string& why);

  DiskCacheStats stats();

  // Scans the directory and evicts down to 90% of max_bytes if it is over; returns the bytes
  // of entries after eviction. Called by store(); public for tests.
  uint64_t scan_and_evict();

  static constexpr size_t kHeaderBytes = 64;
  static constexpr size_t kMacBytes = 32;
  static constexpr uint64_t kRescanFraction = 16;

 private:
  static std::string name_for(const std::vector<int64_t>& key);
  void count_corrupt(const std::string& name, const std::string& why, int fd);
  std::array<uint8_t, kMacBytes> mac(std::string_view signed_header, const std::vector<int64_t>& key,
                                     std::string_view payload) const;

  bool enabled_ = false;
  std::string root_;  // absolute; for messages only
  std::string dir_;   // absolute; for messages only
  std::string version_;
  std::string key_;  // the MAC key
  int root_fd_ = -1;  // held: every access goes through these descriptors
  int dir_fd_ = -1;
  uint64_t max_bytes_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, writes_{0}, corrupt_{0}, evictions_{0}, tmp_counter_{0};
  std::mutex scan_mu_;  // guards the fields below and serializes scans
  bool scanned_ = false;
  uint64_t bytes_ = 0;
  uint64_t bytes_since_scan_ = 0;
};

}  // namespace torch_tpu
