// Trusted directories and the per-user cache key (cache_auth.h).
#include "common/cache_auth.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

#include "common/config.h"
#include "common/fd_io.h"

namespace torch_tpu {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string mode_text(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", mode & 07777);
  return buf;
}

void split_into(const std::string& path, std::deque<std::string>& out, bool front) {
  std::deque<std::string> parts;
  for (size_t b = 0, e; b <= path.size(); b = e + 1) {
    e = path.find('/', b);
    if (e == std::string::npos) e = path.size();
    std::string name = path.substr(b, e - b);
    if (!name.empty() && name != ".") parts.push_back(std::move(name));
  }
  if (front) {
    out.insert(out.begin(), parts.begin(), parts.end());
  } else {
    out.insert(out.end(), parts.begin(), parts.end());
  }
}

std::string join(const std::string& dir, const std::string& name) {
  if (name == "..") {
    size_t slash = dir.find_last_of('/');
    return slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
  }
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string private_reason(const struct stat& st) {
  if (st.st_uid != ::geteuid()) return "it is owned by another user (uid " + std::to_string(st.st_uid) + ")";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return "it is writable by group or others (mode " + mode_text(st.st_mode) + ")";
  }
  return "";
}

bool random_bytes(char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::getrandom(p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::string untrusted_ancestor_reason(unsigned uid, unsigned mode) {
  if (uid != 0 && uid != ::geteuid()) {
    return "it is owned by another user (uid " + std::to_string(uid) + "), who could replace what is inside";
  }
  if ((mode & (S_IWGRP | S_IWOTH)) != 0 && (mode & S_ISVTX) == 0) {
    return "it is writable by group or others and not sticky (mode " + mode_text(mode) +
           "), so they could rename the directories inside";
  }
  return "";
}

int open_trusted_dir(const std::string& path, bool create, bool private_leaf, std::string& why) {
  if (path.empty() || path[0] != '/') {
    why = "'" + path + "' is not an absolute path";
    return -1;
  }
  std::deque<std::string> todo;
  split_into(path, todo, false);
  std::string here = "/";
  int fd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    why = "cannot open / (" + errno_text() + ")";
    return -1;
  }
  auto fail = [&](std::string reason) {
    ::close(fd);
    why = std::move(reason);
    return -1;
  };
  auto check = [&](bool leaf) -> std::string {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return here + ": cannot stat it (" + errno_text() + ")";
    std::string r = leaf && private_leaf ? private_reason(st) : untrusted_ancestor_reason(st.st_uid, st.st_mode);
    return r.empty() ? r : here + ": " + r;
  };
  if (std::string r = check(todo.empty()); !r.empty()) return fail(r);
  int links = 0;
  while (!todo.empty()) {
    const std::string name = todo.front();
    todo.pop_front();
    const std::string next_path = join(here, name);
    struct stat st {};
    if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT || !create || name == "..") {
        return fail("cannot access " + next_path + " (" + errno_text() + ")");
      }
      if (::mkdirat(fd, name.c_str(), 0700) != 0 && errno != EEXIST) {
        return fail("cannot create " + next_path + " (" + errno_text() + ")");
      }
    } else if (S_ISLNK(st.st_mode)) {
      // The directory holding the link is trusted, so only its owner or root could have made
      // it; a link owned by anyone else was planted (e.g. in a sticky /tmp).
      if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
        return fail(next_path + " is a symbolic link owned by another user (uid " + std::to_string(st.st_uid) + ")");
      }
      if (++links > 32) return fail("too many symbolic links resolving " + path);
      char target[PATH_MAX];
      ssize_t n = ::readlinkat(fd, name.c_str(), target, sizeof(target) - 1);
      if (n <= 0) return fail("cannot read the symbolic link " + next_path + " (" + errno_text() + ")");
      target[n] = '\0';
      split_into(target, todo, true);
      if (target[0] == '/') {
        ::close(fd);
        fd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
          why = "cannot open / (" + errno_text() + ")";
          return -1;
        }
        here = "/";
      }
      continue;
    }
    // O_NOFOLLOW: a component swapped for a link since the fstatat above fails here.
    int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return fail("cannot open " + next_path + " (" + errno_text() + ")");
    ::close(fd);
    fd = next;
    here = next_path;
    if (std::string r = check(todo.empty()); !r.empty()) return fail(r);
  }
  return fd;
}

std::string cache_key_path() {
  std::string path = config::get("TORCH_TPU_CACHE_KEY_FILE");
  if (!path.empty()) return path;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/torch_tpu/cache.key";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    return std::string(home) + "/.config/torch_tpu/cache.key";
  }
  return "";
}

std::optional<std::string> load_or_create_key(const std::string& path_in, std::string& why) {
  const std::string path = absolute_path(path_in);
  if (path.empty()) {
    why = "no key file (set TORCH_TPU_CACHE_KEY_FILE, XDG_CONFIG_HOME or HOME)";
    return std::nullopt;
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash), name = path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    why = "the key file " + path + " names a directory";
    return std::nullopt;
  }
  std::string dir_why;
  int dfd = open_trusted_dir(dir, /*create=*/true, /*private_leaf=*/false, dir_why);
  if (dfd < 0) {
    why = "the key file's directory is unsafe: " + dir_why;
    return std::nullopt;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } dir_closer{dfd};
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      Closer closer{fd};
      struct stat st {};
      if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        why = "the key file " + path + " is not a regular file";
        return std::nullopt;
      }
      if (st.st_uid != ::geteuid()) {
        why = "the key file " + path + " is owned by another user (uid " + std::to_string(st.st_uid) + ")";
        return std::nullopt;
      }
      if ((st.st_mode & 077) != 0) {
        why = "the key file " + path + " is accessible to group or others (mode " + mode_text(st.st_mode) +
              "; it must be 0600)";
        return std::nullopt;
      }
      if (static_cast<uint64_t>(st.st_size) != kCacheKeyBytes) {
        why = "the key file " + path + " has " + std::to_string(st.st_size) + " bytes, not " +
              std::to_string(kCacheKeyBytes);
        return std::nullopt;
      }
      std::string key(kCacheKeyBytes, '\0');
      if (::pread(fd, key.data(), key.size(), 0) != static_cast<ssize_t>(key.size())) {
        why = "cannot read the key file " + path + " (" + errno_text() + ")";
        return std::nullopt;
      }
      return key;
    }
    if (errno != ENOENT) {
      why = "cannot open the key file " + path + " (" + errno_text() + ")";
      return std::nullopt;
    }
    // First use: write a fresh key under a private temporary name, then link it into place.
    // link() never replaces an existing file, so concurrent first uses agree on one key.
    std::string key(kCacheKeyBytes, '\0');
    uint64_t nonce = 0;
    if (!random_bytes(key.data(), key.size()) || !random_bytes(reinterpret_cast<char*>(&nonce), sizeof(nonce))) {
      why = "no random bytes for a new key (" + errno_text() + ")";
      return std::nullopt;
    }
    char tmp[96];
    std::snprintf(tmp, sizeof(tmp), ".%s.tmp.%d.%016" PRIx64, name.substr(0, 40).c_str(), static_cast<int>(::getpid()),
                  nonce);
    int t = ::openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (t < 0) {
      why = "cannot create the key file " + path + " (" + errno_text() + ")";
      return std::nullopt;
    }
    bool ok = write_all(t, key.data(), key.size()) && ::fsync(t) == 0;
    ok = (::close(t) == 0) && ok;
    ok = ok && (::linkat(dfd, tmp, dfd, name.c_str(), 0) == 0 || errno == EEXIST);
    const int err = errno;
    ::unlinkat(dfd, tmp, 0);
    if (!ok) {
      why = "cannot create the key file " + path + " (" + std::strerror(err) + ")";
      return std::nullopt;
    }
  }
  why = "the key file " + path + " keeps disappearing";
  return std::nullopt;
}

std::optional<std::string> cache_key(std::string& why) {
  static std::once_flag once;
  static std::optional<std::string>* key = nullptr;
  static std::string* error = nullptr;
  std::call_once(once, [] {
    error = new std::string();  // leaked: used until exit from any thread
    key = new std::optional<std::string>(load_or_create_key(cache_key_path(), *error));
  });
  if (!*key) why = *error;
  return *key;
}

}  // namespace torch_tpu
