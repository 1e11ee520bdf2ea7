// Philox4x32-10, the counter-based generator behind the IR's rng ops.
//
// Design: bit-exact with torch_tpu/ir/builder.py's `philox4x32` (the reference every runtime
// must match): the 64-bit counter fills words 0-1 (low word first), words 2-3 are zero, and the
// 64-bit key is (seed low, seed high). Pure function, so any element can be generated
// independently (and in parallel) from its counter.
#pragma once

#include <array>
#include <cstdint>

namespace torch_tpu::runtime::host {

inline std::array<uint32_t, 4> philox4x32_10(uint64_t counter, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

}  // namespace torch_tpu::runtime::host
