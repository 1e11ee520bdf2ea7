// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), written here rather than linked.
//
// Why our own: the program cache's disk tier (compiler/disk_cache.h) authenticates every
// entry with a keyed MAC, and the extension links nothing that reliably provides one (OpenSSL
// may or may not be loaded into the Python process; vendoring third-party source is not
// allowed in this repository). SHA-256 is small, fully specified, and Python's hmac/hashlib
// compute the same values, so tests can sign entries independently. Speed is secondary: the
// tier hashes an entry once per load or store (tens of KB to a few MB).
// Tested against the FIPS 180-2 and RFC 4231 vectors (tests/cpp/test_disk_cache.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace torch_tpu {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256. Not thread-safe (one instance per computation); never throws.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest finish();  // the instance is spent afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// Incremental HMAC-SHA256 with `key` (any length; keys over 64 bytes are hashed first).
class HmacSha256 {
 public:
  explicit HmacSha256(std::string_view key);
  void update(const void* data, size_t size) { inner_.update(data, size); }
  void update(std::string_view s) { inner_.update(s); }
  Sha256Digest finish();

 private:
  Sha256 inner_;
  uint8_t okey_[64];
};

// Constant-time comparison of two digests (a MAC check must not leak how many bytes matched).
bool digest_equal(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace torch_tpu
