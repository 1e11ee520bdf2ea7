// The one stable hash of the project: 64-bit FNV-1a, the same across processes and builds
// (unlike std::hash). Names disk-cache entries (compiler/disk_cache), the PJRT executable cache
// (runtime/pjrt/executable_cache) and string arguments in program keys (exec/gather).
#pragma once

#include <cstddef>
#include <cstdint>

namespace torch_tpu {

inline uint64_t fnv1a(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace torch_tpu
