// Resident buffers: tpu storages kept on the PJRT device between programs.
//
// Design: a program's output whose destination is dense (contiguous, the node's dtype) is not
// downloaded; its PJRT buffer is recorded here as the current copy of the destination's bytes
// and the host bytes under it go stale. A later program whose argument is exactly that array
// (same address, bytes, dtype, dims, device) passes the buffer as it is: no upload. Anything
// else that needs the bytes on the host (an argument that is another view of them, a strided
// output into them, a copy to the CPU, .item()) first downloads the stale entries it overlaps
// (runtime::Residency hooks). So parameters, gradients and optimizer state stay on the device
// across steps, and only what the user reads comes back.
//
// Entries never overlap: recording a new one drops those it overlaps (downloading first any
// stale entry it only partly covers). Freed memory drops its entries without a download.
//
// Thread safety: one mutex guards the table; downloads of stale entries run under it. Buffers
// are shared_ptr, so a program keeps the buffers it launched with alive even if another thread
// drops their entries meanwhile.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "runtime/pjrt/client.h"
#include "runtime/residency.h"

namespace torch_tpu::pjrt {

// What the table saw since the process started (diagnostics and tests).
struct ResidencyStats {
  int64_t entries = 0, bytes = 0;     // current
  int64_t hits = 0;                   // arguments passed without an upload
  int64_t adopted = 0;                // outputs kept on the device (not downloaded)
  int64_t uploads_kept = 0;           // uploaded tensors kept for the programs that read them next
  int64_t syncs = 0, sync_bytes = 0;  // stale entries downloaded for a host access
  int64_t dropped_unread = 0;         // stale entries dropped without a download (overwritten or freed)
  int64_t donated = 0;                // entries whose buffer a program consumed (in-place writes)
};

class ResidentBuffers final : public runtime::Residency {
 public:
  // What an entry holds: the array layout a program argument must have to use its buffer.
  // (Buffers are 1-D: programs take flat arrays, see EmitOptions::flat_tensors.)
  struct Array {
    c::PJRT_Buffer_Type type = c::PJRT_Buffer_Type_INVALID;
    size_t device = 0;
    bool operator==(const Array&) const = default;
  };

  explicit ResidentBuffers(std::shared_ptr<Client> client) : client_(std::move(client)) {}

  // The buffer holding exactly [data, data + nbytes) as `array`, or null.
  std::shared_ptr<Buffer> find(const void* data, size_t nbytes, const Array& array);
  // The entry holding all of [data, data + nbytes) as `array`: its buffer, and its first byte
  // and size in *entry_begin / *entry_bytes; null if none.
  std::shared_ptr<Buffer> find_containing(const void* data, size_t nbytes, const Array& array, uintptr_t* entry_begin,
                                          size_t* entry_bytes);
  // Removes the entry of [data, data + nbytes) if it holds `buffer` and nobody but the table and
  // the caller shares it, so that the caller may donate the buffer to a program that writes
  // every byte of the range. False (nothing changes) otherwise.
  bool take_for_donation(const void* data, size_t nbytes, const std::shared_ptr<Buffer>& buffer);
  // Records `buffer` as a current copy of [data, data + nbytes): the only one (a program's output;
  // the host bytes go stale) or, with `host_current`, one equal to the host bytes (an upload).
  void adopt(const void* data, size_t nbytes, Array array, std::shared_ptr<Buffer> buffer, bool host_current);

  void sync_to_host(const void* data, size_t nbytes) override;
  void before_host_write(const void* data, size_t nbytes, bool every_byte) override;
  void released(const void* data, size_t nbytes) noexcept override;

  // Downloads every stale entry and empties the table (turning residency off). Throws the
  // device's error.
  void sync_all_and_clear();
  // Downloads the stale entries of `device` into their host bytes and drops every entry of that
  // device (out of device memory: their buffers go once no program holds them). Returns the
  // dropped entries' bytes. Throws the device's error.
  int64_t evict(size_t device);

  ResidencyStats stats() const;

 private:
  struct Entry {
    uintptr_t end = 0;
    Array array;
    std::shared_ptr<Buffer> buffer;
    bool host_current = false;  // the host bytes were downloaded since (the entry stays usable)
  };
  using Table = std::map<uintptr_t, Entry>;  // by first byte

  // The first entry that may overlap [begin, end).
  Table::iterator first_overlap(uintptr_t begin);
  // Removes an entry, keeping the entry and byte counts.
  Table::iterator erase(Table::iterator it);
  // The entry of exactly [data, data + nbytes), or table_.end().
  Table::iterator exact(const void* data, size_t nbytes);
  // Downloads one entry into its host bytes. Throws the device's error.
  void download(uintptr_t begin, const Entry& e);
  // Drops the entries overlapping [begin, end). A stale one is downloaded first unless
  // `every_byte` says the caller replaces every byte of the range and the entry lies inside it.
  void drop(uintptr_t begin, uintptr_t end, bool every_byte);

  std::shared_ptr<Client> client_;
  mutable std::mutex mu_;
  Table table_;
  ResidencyStats stats_;
};

}  // namespace torch_tpu::pjrt
