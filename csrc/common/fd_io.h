// Whole-buffer reads and writes on a file descriptor: retried on EINTR and short counts, false
// on an error or end of file. Used by the disk cache, its key file and native-kernel loading,
// which work on descriptors (openat and memfd) rather than paths.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace torch_tpu {

inline bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace torch_tpu
