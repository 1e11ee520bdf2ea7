// The one stable hash of the project: 64-bit FNV-1a, the same across processes and builds
// (unlike std::hash). Over bytes (fnv1a) it names disk-cache entries (compiler/disk_cache), the
// PJRT executable cache (runtime/pjrt/executable_cache), native kernels
// (runtime/host/native_kernels) and string arguments in program keys (exec/gather); over whole
// 64-bit words (mix_word) it hashes the in-memory cache keys the eager and fused modes write
// word by word (exec/gather, exec/fused_pending.h), one multiply a word instead of eight.
#pragma once

#include <cstddef>
#include <cstdint>

namespace torch_tpu {

inline constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnvPrime = 0x100000001b3ull;

inline uint64_t fnv1a(const void* data, size_t size, uint64_t seed = kFnvOffsetBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

// One FNV-1a step over a whole word: the hash of a key after appending `word`, from `h`, the
// hash of the key before it (kFnvOffsetBasis for an empty key).
inline constexpr uint64_t mix_word(uint64_t h, int64_t word) { return (h ^ static_cast<uint64_t>(word)) * kFnvPrime; }

}  // namespace torch_tpu
