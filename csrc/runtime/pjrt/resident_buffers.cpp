#include "runtime/pjrt/resident_buffers.h"

namespace torch_tpu::pjrt {

static uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

ResidentBuffers::Table::iterator ResidentBuffers::first_overlap(uintptr_t begin) {
  // Entries never overlap, so only the last one starting at or before `begin` can reach into it.
  auto it = table_.upper_bound(begin);
  if (it != table_.begin() && std::prev(it)->second.end > begin) --it;
  return it;
}

void ResidentBuffers::download(uintptr_t begin, const Entry& e) {
  const size_t nbytes = e.end - begin;
  Event done = client_->download(*e.buffer, reinterpret_cast<void*>(begin), nbytes);
  done.await("Buffer_ToHostBuffer (resident buffer to host)");
  stats_.syncs++;
  stats_.sync_bytes += static_cast<int64_t>(nbytes);
}

ResidentBuffers::Table::iterator ResidentBuffers::erase(Table::iterator it) {
  stats_.entries--;
  stats_.bytes -= static_cast<int64_t>(it->second.end - it->first);
  return table_.erase(it);
}

ResidentBuffers::Table::iterator ResidentBuffers::exact(const void* data, size_t nbytes) {
  auto it = table_.find(address(data));
  return it != table_.end() && it->second.end == address(data) + nbytes ? it : table_.end();
}

void ResidentBuffers::drop(uintptr_t begin, uintptr_t end, bool every_byte) {
  for (auto it = first_overlap(begin); it != table_.end() && it->first < end;) {
    Entry& e = it->second;
    const bool inside = it->first >= begin && e.end <= end;
    if (!e.host_current) {
      if (inside && every_byte)
        stats_.dropped_unread++;
      else
        download(it->first, e);
    }
    it = erase(it);
  }
}

std::shared_ptr<Buffer> ResidentBuffers::find(const void* data, size_t nbytes, const Array& array) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = exact(data, nbytes);
  if (it == table_.end() || !(it->second.array == array)) return nullptr;
  stats_.hits++;
  return it->second.buffer;
}

std::shared_ptr<Buffer> ResidentBuffers::find_containing(const void* data, size_t nbytes, const Array& array,
                                                         uintptr_t* entry_begin, size_t* entry_bytes) {
  const uintptr_t begin = address(data);
  std::lock_guard<std::mutex> g(mu_);
  auto it = first_overlap(begin);
  if (it == table_.end() || it->first > begin || it->second.end < begin + nbytes || !(it->second.array == array))
    return nullptr;
  stats_.hits++;
  *entry_begin = it->first;
  *entry_bytes = it->second.end - it->first;
  return it->second.buffer;
}

bool ResidentBuffers::take_for_donation(const void* data, size_t nbytes, const std::shared_ptr<Buffer>& buffer) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = exact(data, nbytes);
  if (it == table_.end() || it->second.buffer != buffer || buffer.use_count() != 2) return false;
  erase(it);
  stats_.donated++;
  return true;
}

void ResidentBuffers::adopt(const void* data, size_t nbytes, Array array, std::shared_ptr<Buffer> buffer,
                            bool host_current) {
  const uintptr_t begin = address(data);
  std::lock_guard<std::mutex> g(mu_);
  drop(begin, begin + nbytes, /*every_byte=*/true);
  table_.emplace(begin, Entry{begin + nbytes, array, std::move(buffer), host_current});
  stats_.entries++;
  stats_.bytes += static_cast<int64_t>(nbytes);
  (host_current ? stats_.uploads_kept : stats_.adopted)++;
}

void ResidentBuffers::sync_to_host(const void* data, size_t nbytes) {
  const uintptr_t begin = address(data), end = begin + nbytes;
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = first_overlap(begin); it != table_.end() && it->first < end; ++it) {
    if (it->second.host_current) continue;
    download(it->first, it->second);
    it->second.host_current = true;
  }
}

void ResidentBuffers::before_host_write(const void* data, size_t nbytes, bool every_byte) {
  const uintptr_t begin = address(data);
  std::lock_guard<std::mutex> g(mu_);
  drop(begin, begin + nbytes, every_byte);
}

void ResidentBuffers::released(const void* data, size_t nbytes) noexcept {
  const uintptr_t begin = address(data);
  std::lock_guard<std::mutex> g(mu_);
  // Entries lie inside one allocation, so a freed block holds all of those it overlaps.
  for (auto it = first_overlap(begin); it != table_.end() && it->first < begin + nbytes;) {
    if (!it->second.host_current) stats_.dropped_unread++;
    it = erase(it);
  }
}

void ResidentBuffers::sync_all_and_clear() {
  std::lock_guard<std::mutex> g(mu_);
  drop(0, UINTPTR_MAX, /*every_byte=*/false);
}

int64_t ResidentBuffers::evict(size_t device) {
  std::lock_guard<std::mutex> g(mu_);
  int64_t bytes = 0;
  for (auto it = table_.begin(); it != table_.end();) {
    if (it->second.array.device != device) {
      ++it;
      continue;
    }
    if (!it->second.host_current) download(it->first, it->second);
    bytes += static_cast<int64_t>(it->second.end - it->first);
    it = erase(it);
  }
  return bytes;
}

ResidencyStats ResidentBuffers::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}

}  // namespace torch_tpu::pjrt
