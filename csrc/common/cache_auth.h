// Trust for the program cache's disk tier: directories opened without races, and the per-user
// key that authenticates every entry (compiler/disk_cache.h).
//
// Why: the tier stores native code (host-runtime kernels, dlopened) and programs whose
// structure the executor trusts. Checking a directory once by path and re-resolving the path
// on every access let anyone who could rename a parent (or a relative path plus chdir) point
// the tier at another tree, and a plain checksum (FNV-1a, no secret) let them forge its
// entries. So:
// - open_trusted_dir() walks an absolute path from "/" one component at a time with
//   openat(O_NOFOLLOW | O_DIRECTORY) and fstat()s every directory it opened: each must be owned
//   by root or this user, and one writable by group or others must be sticky. A symbolic link
//   on the way is followed only when root or this user owns it (its target is walked the same
//   way). The caller keeps the final descriptor and resolves everything relative to it, so a
//   later rename of any ancestor cannot change what it reads.
// - cache_key() is 32 random bytes in a 0600 file outside the cache directory
//   (TORCH_TPU_CACHE_KEY_FILE, default $XDG_CONFIG_HOME/torch_tpu/cache.key or
//   ~/.config/torch_tpu/cache.key), created atomically (O_EXCL temporary, then link(), which
//   never replaces an existing key). A key file owned by someone else, readable or writable by
//   group or others, or not exactly 32 bytes is refused, which turns the disk tier off.
// Rejected: a key inside the cache directory (whoever can plant entries could read or replace
// it); a key derived from uid/hostname (not a secret); relying on directory permissions alone
// (a stale or copied cache, a root-run job, an NFS home).
#pragma once

#include <optional>
#include <string>

#include "common/paths.h"  // absolute_path

namespace torch_tpu {

// Opens the directory at absolute `path`, creating missing components with mode 0700 when
// `create`. Returns an O_DIRECTORY descriptor (owned by the caller), or -1 with `why` set to a
// sentence naming the offending path. `private_leaf`: the last directory must moreover be
// owned by this user and not writable by group or others (the cache root and its version
// directories); otherwise it is checked as an ancestor. Never throws.
int open_trusted_dir(const std::string& path, bool create, bool private_leaf, std::string& why);

// The reason a just-fstat'ed directory is not trusted as an ancestor ("" when it is).
std::string untrusted_ancestor_reason(unsigned uid, unsigned mode);

// The path of the key file (TORCH_TPU_CACHE_KEY_FILE or the default), "" when neither
// XDG_CONFIG_HOME nor HOME is set. Never throws.
std::string cache_key_path();

// Loads (creating it on first use) the key at `path`: 32 bytes, or nullopt with `why` set.
// Never throws.
std::optional<std::string> load_or_create_key(const std::string& path, std::string& why);

// The process's key from cache_key_path(), loaded once; nullopt with `why` when unusable.
// Thread-safe; never throws.
std::optional<std::string> cache_key(std::string& why);

inline constexpr size_t kCacheKeyBytes = 32;

}  // namespace torch_tpu
