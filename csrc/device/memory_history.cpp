// Allocation history (device/memory_history.h).
#include "device/memory_history.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace torch_tpu::device::memory_history {

std::atomic<bool> g_recording{false};

namespace {

struct History {
  std::mutex mu;
  std::deque<Entry> trace;
  size_t max_entries = 0;
  bool stacks = true;
  std::unordered_map<const void*, Frames> live;  // blocks allocated while recording -> stack
};

History& history() {
  static auto* h = new History();  // leaked: frees may come during exit
  return *h;
}

StackHook g_stack_hook = nullptr;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void push_locked(History& h, Entry&& e) {
  h.trace.push_back(std::move(e));
  while (h.trace.size() > h.max_entries) h.trace.pop_front();
}

}  // namespace

void set_stack_hook(StackHook hook) { g_stack_hook = hook; }

void set_recording(bool on, size_t max_entries, bool stacks) {
  History& h = history();
  {
    std::lock_guard<std::mutex> g(h.mu);
    if (on) {
      h.max_entries = max_entries > 0 ? max_entries : 1;
      h.stacks = stacks;
      while (h.trace.size() > h.max_entries) h.trace.pop_front();
    }
  }
  g_recording.store(on, std::memory_order_relaxed);
}

void clear() {
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  h.trace.clear();
  h.live.clear();
}

void record_alloc(c10::DeviceIndex device, const void* ptr, uint64_t size) {
  History& h = history();
  bool stacks;
  {
    std::lock_guard<std::mutex> g(h.mu);
    stacks = h.stacks;
  }
  Frames frames = stacks && g_stack_hook != nullptr ? g_stack_hook() : nullptr;  // outside our lock
  std::lock_guard<std::mutex> g(h.mu);
  h.live[ptr] = frames;
  push_locked(h, Entry{"alloc", reinterpret_cast<uint64_t>(ptr), size, device, now_us(), std::move(frames)});
}

void record_free(c10::DeviceIndex device, const void* ptr, uint64_t size) {
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  Frames frames;
  if (auto it = h.live.find(ptr); it != h.live.end()) {
    frames = std::move(it->second);
    h.live.erase(it);
  }
  push_locked(h, Entry{"free_completed", reinterpret_cast<uint64_t>(ptr), size, device, now_us(), std::move(frames)});
}

std::vector<Entry> trace() {
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  return {h.trace.begin(), h.trace.end()};
}

Frames frames_of(const void* ptr) {
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  auto it = h.live.find(ptr);
  return it != h.live.end() ? it->second : nullptr;
}

}  // namespace torch_tpu::device::memory_history
