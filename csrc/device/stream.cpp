#include "device/stream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/blocking_wait.h"
#include "common/check.h"
#include "common/fork_guard.h"
#include "device/device.h"
#include "runtime/completion.h"
#include "runtime/device_services.h"
#include "runtime/runtime.h"

// From the OpenMP runtime PyTorch already loads (libgomp); per-thread setting.
extern "C" void omp_set_num_threads(int);

namespace torch_tpu::device {

class StreamQueue {
 public:
  // Deep enough to hide Python's dispatch time, shallow enough that queued outputs recycle
  // cache-warm memory.
  static constexpr uint64_t kMaxQueued = 64;

  StreamQueue(c10::DeviceIndex device, c10::StreamId id) : device_(device), id_(id) {}

  // rethrow: raise a pending error instead of queuing (an op that raises did not happen). A
  // fused graph is queued all the same: its ops already returned their results to the user, and
  // only what depends on the failure may be lost (exec/poison.h); the error surfaces at the
  // next synchronization.
  uint64_t enqueue(std::unique_ptr<Work> work, bool bounded = true, bool rethrow = true) {
    if (rethrow) rethrow_pending();
    // Bounded run-ahead (like a GPU's launch queue): a host that races thousands of ops ahead
    // would allocate fresh memory for every queued output instead of reusing freed blocks.
    if (bounded && enqueued_.load() - completed_.load() >= kMaxQueued) wait(enqueued_.load() - kMaxQueued / 2);
    uint64_t ticket;
    bool wake;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!worker_started_) {
        worker_started_ = true;
        note_runtime_thread_started();
        std::thread([this] { loop(); }).detach();  // queues live for the whole process
      }
      queue_.push_back(std::move(work));
      ticket = ++enqueued_;
      wake = worker_sleeping_;
    }
    if (wake) cv_work_.notify_one();  // a busy worker finds the item without a syscall
    return ticket;
  }

  void wait(uint64_t ticket) {
    if (completed_.load() >= ticket) return;
    BlockingWait unblock_python;  // the worker may need the GIL to finish (common/blocking_wait.h)
    // Spin while the worker offers work this thread can run (runtime/device_services.h).
    if (runtime::help_while_waiting([&] { return completed_.load() >= ticket; })) return;
    std::unique_lock<std::mutex> lk(mu_);
    waiters_++;
    cv_done_.wait(lk, [&] { return completed_.load() >= ticket; });
    waiters_--;
  }

  void synchronize() {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> g(mu_);
      ticket = enqueued_.load();
    }
    wait(ticket);
    rethrow_pending();
  }

  bool done(uint64_t ticket) { return completed_.load() >= ticket; }

  bool idle() { return completed_.load() == enqueued_.load(); }
  // A pending error is re-raised by the next enqueue; a caller that skips the queue because it
  // is idle must not skip that report.
  bool idle_without_error() { return !has_error_.load() && idle(); }

  void rethrow_pending() {
    if (!has_error_.load(std::memory_order_relaxed)) return;
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> g(mu_);
      std::swap(e, error_);
      has_error_ = false;
    }
    if (e) std::rethrow_exception(e);
  }

  c10::DeviceIndex device() const { return device_; }
  c10::StreamId id() const { return id_; }

 private:
  void loop() {
    // Kernels on a stream worker run single-threaded. A second OpenMP team (the worker's, next
    // to the Python thread's) spin-waits between parallel regions and steals the core the
    // Python thread dispatches on: measured 7x slower for a 512x512 add, even when the worker
    // switches to several threads only while the host is blocked. Programs that run inline on
    // the calling thread keep ATen's intra-op threads.
    omp_set_num_threads(1);
    runtime::set_execution_device(device_);  // every program of this stream runs on its device
    runtime::defer_completion_on_this_thread();  // this loop awaits launched programs
    std::deque<std::unique_ptr<Work>> batch;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (queue_.empty()) {
          worker_sleeping_ = true;
          cv_work_.wait(lk, [&] { return !queue_.empty(); });
          worker_sleeping_ = false;
        }
        batch.swap(queue_);  // take everything queued so far under one lock
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        auto& work = batch[i];
        // Programs launched on the device complete asynchronously (runtime/completion.h):
        // other work runs after them, and the last work is complete only when they are. A
        // launched program's failure becomes the stream's pending error like a work's own.
        std::exception_ptr err;
        auto capture = [&err](auto&& fn) {
          try {
            fn();
          } catch (...) {
            if (!err) err = std::current_exception();
          }
        };
        if (!work->launch_only()) capture([&] { runtime::await_launched(device_); });
        capture([&] { work->run(); });
        if (i + 1 == batch.size() && queue_empty()) capture([&] { runtime::await_launched(device_); });
        work.reset();  // drop tensor references before reporting completion
        if (err) {
          std::lock_guard<std::mutex> g(mu_);
          if (!error_) error_ = err;
          has_error_ = true;
        }
        completed_.fetch_add(1);
        if (waiters_.load() > 0) {
          std::lock_guard<std::mutex> g(mu_);
          cv_done_.notify_all();
        }
      }
      batch.clear();
    }
  }

  bool queue_empty() {
    std::lock_guard<std::mutex> g(mu_);
    return queue_.empty();
  }

  const c10::DeviceIndex device_;
  const c10::StreamId id_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<std::unique_ptr<Work>> queue_;
  std::atomic<uint64_t> enqueued_{0};
  std::atomic<uint64_t> completed_{0};
  std::atomic<int> waiters_{0};
  std::atomic<bool> has_error_{false};
  bool worker_started_ = false;
  bool worker_sleeping_ = false;
  std::exception_ptr error_;
};

namespace {

struct DeviceStreams {
  std::vector<std::unique_ptr<StreamQueue>> queues;  // [0] default, [1..kStreamPoolSize] pool
  std::atomic<uint32_t> next_pool{0};
};

std::vector<DeviceStreams*>& all_devices() {
  static auto* v = [] {
    auto* out = new std::vector<DeviceStreams*>();  // leaked: workers run until process exit
    for (c10::DeviceIndex d = 0; d < count(); ++d) {
      auto* ds = new DeviceStreams();
      for (int i = 0; i <= kStreamPoolSize; ++i) ds->queues.push_back(std::make_unique<StreamQueue>(d, i));
      out->push_back(ds);
    }
    return out;
  }();
  return *v;
}

struct FnWork final : Work {
  explicit FnWork(std::function<void()> f) : fn(std::move(f)) {}
  void run() override { fn(); }
  std::function<void()> fn;
};

thread_local std::vector<c10::StreamId> current_ids;  // per device; empty = all default

}  // namespace

StreamQueue& queue_of(const c10::Stream& stream) {
  check_not_in_bad_fork();  // the child has no stream workers (common/fork_guard.h)
  TPU_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "not a tpu stream: ", stream);
  check_index(stream.device_index());
  auto id = stream.id();
  TPU_CHECK(id >= 0 && id <= kStreamPoolSize, "invalid tpu stream id ", id);
  return *all_devices()[static_cast<size_t>(stream.device_index())]->queues[static_cast<size_t>(id)];
}

// -- pending fused work ---------------------------------------------------------------------

namespace {
std::atomic<PendingFlushHook> g_flush_hook{nullptr};
thread_local int t_flush_cause = -1;
}  // namespace

const char* flush_cause_name(FlushCause cause) {
  switch (cause) {
    case FlushCause::kSynchronize: return "synchronize";
    case FlushCause::kHostRead: return "host_read";
    case FlushCause::kDataDependent: return "data_dependent";
    case FlushCause::kStreamEvent: return "stream_event";
    case FlushCause::kCopy: return "copy";
    case FlushCause::kSizeCap: return "size_cap";
    case FlushCause::kMemory: return "memory";
    case FlushCause::kModeSwitch: return "mode_switch";
    case FlushCause::kExit: return "exit";
    case FlushCause::kViewRead: return "view_read";
    case FlushCause::kResize: return "resize";
    case FlushCause::kSlowStart:
      return "slow_start";
    case FlushCause::kOptimizerStep:
      return "optimizer_step";
    case FlushCause::kCount: break;
  }
  return "?";
}

void set_pending_flush_hook(PendingFlushHook hook) { g_flush_hook.store(hook); }

void flush_pending(c10::DeviceIndex device, FlushCause fallback) {
  PendingFlushHook hook = g_flush_hook.load(std::memory_order_acquire);
  if (hook == nullptr) return;
  hook(device, t_flush_cause >= 0 ? static_cast<FlushCause>(t_flush_cause) : fallback);
}

namespace {
std::atomic<int> g_sync_debug_mode{0};
}  // namespace

void set_sync_debug_mode(int mode) {
  TORCH_CHECK_VALUE(mode >= 0 && mode <= 2, "invalid value of debug_mode, expected one of 0, 1, 2");
  g_sync_debug_mode.store(mode);
}
int sync_debug_mode() { return g_sync_debug_mode.load(std::memory_order_relaxed); }

void note_host_sync() {
  const int mode = sync_debug_mode();
  if (mode == 0) return;
  constexpr const char* kWhat =
      "called a synchronizing tpu operation (a host read of device values: .item(), .cpu(), "
      "printing, a data-dependent shape)";
  TORCH_CHECK(mode != 2, kWhat, "; torch.tpu.set_sync_debug_mode('error') is set");
  TORCH_WARN(kWhat, "; torch.tpu.set_sync_debug_mode('warn') is set");
}

FlushCauseScope::FlushCauseScope(FlushCause cause) : prev(t_flush_cause) {
  if (t_flush_cause < 0) t_flush_cause = static_cast<int>(cause);  // the outermost cause wins
}
FlushCauseScope::~FlushCauseScope() { t_flush_cause = prev; }

uint64_t enqueue(const c10::Stream& stream, std::unique_ptr<Work> work) {
  flush_pending(stream.device_index(), FlushCause::kStreamEvent);
  return queue_of(stream).enqueue(std::move(work));
}

uint64_t enqueue_unflushed(const c10::Stream& stream, std::unique_ptr<Work> work) {
  return queue_of(stream).enqueue(std::move(work), /*bounded=*/false, /*rethrow=*/false);
}

void wait_for_ticket(const c10::Stream& stream, uint64_t ticket) { queue_of(stream).wait(ticket); }

uint64_t enqueue_fn(const c10::Stream& stream, std::function<void()> fn) {
  return enqueue(stream, std::make_unique<FnWork>(std::move(fn)));
}

void synchronize_stream(const c10::Stream& stream) {
  flush_pending(stream.device_index());
  queue_of(stream).synchronize();
}

bool query_stream(const c10::Stream& stream) { return queue_of(stream).idle(); }

bool device_idle(c10::DeviceIndex index) {
  check_not_in_bad_fork();
  check_index(index);
  for (auto& q : all_devices()[static_cast<size_t>(index)]->queues) {
    if (!q->idle_without_error()) return false;
  }
  return true;
}

void synchronize_device(c10::DeviceIndex index) {
  flush_pending(index);
  for (c10::DeviceIndex d = 0; d < count(); ++d) {
    if (index >= 0 && d != index) continue;
    for (auto& q : all_devices()[static_cast<size_t>(d)]->queues) q->synchronize();
  }
}

void raise_pending_error(const c10::Stream& stream) { queue_of(stream).rethrow_pending(); }

c10::Stream default_stream(c10::DeviceIndex index) {
  check_index(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index), 0);
}

c10::Stream current_stream(c10::DeviceIndex index) {
  check_index(index);
  c10::StreamId id = static_cast<size_t>(index) < current_ids.size() ? current_ids[static_cast<size_t>(index)] : 0;
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index), id);
}

c10::Stream exchange_stream(const c10::Stream& stream) {
  queue_of(stream);  // validates
  auto index = stream.device_index();
  c10::Stream prev = current_stream(index);
  if (current_ids.size() <= static_cast<size_t>(index)) current_ids.resize(static_cast<size_t>(index) + 1, 0);
  current_ids[static_cast<size_t>(index)] = stream.id();
  return prev;
}

c10::Stream pool_stream(c10::DeviceIndex index) {
  check_index(index);
  uint32_t n = all_devices()[static_cast<size_t>(index)]->next_pool++;
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                     static_cast<c10::StreamId>(1 + n % kStreamPoolSize));
}

// -- events ---------------------------------------------------------------------------------

namespace {
struct EventState {
  std::atomic<int64_t> time_ns{0};
};
struct Event {
  StreamQueue* queue = nullptr;
  uint64_t ticket = 0;
  bool enable_timing = false;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void* event_create(bool enable_timing) {
  auto* e = new Event();
  e->enable_timing = enable_timing;
  return e;
}

void event_record(void** event, const c10::Stream& stream, bool enable_timing) {
  if (*event == nullptr) *event = event_create(enable_timing);
  flush_pending(stream.device_index(), FlushCause::kStreamEvent);
  auto* e = static_cast<Event*>(*event);
  e->state = std::make_shared<EventState>();  // a new version of the event
  auto state = e->state;
  e->queue = &queue_of(stream);
  e->ticket = e->queue->enqueue(std::make_unique<FnWork>([state] { state->time_ns = now_ns(); }));
}

void event_block(void* event, const c10::Stream& stream) {
  auto* e = static_cast<Event*>(event);
  if (e == nullptr || e->queue == nullptr) return;
  flush_pending(stream.device_index(), FlushCause::kStreamEvent);
  StreamQueue& target = queue_of(stream);
  if (&target == e->queue) return;  // same queue: already ordered
  StreamQueue* q = e->queue;
  uint64_t ticket = e->ticket;
  target.enqueue(std::make_unique<FnWork>([q, ticket] { q->wait(ticket); }));
}

bool event_query(void* event) {
  auto* e = static_cast<Event*>(event);
  return e == nullptr || e->queue == nullptr || e->queue->done(e->ticket);
}

void event_synchronize(void* event) {
  auto* e = static_cast<Event*>(event);
  if (e == nullptr || e->queue == nullptr) return;
  e->queue->wait(e->ticket);
}

void event_destroy(void* event) noexcept { delete static_cast<Event*>(event); }

double event_elapsed_ms(void* start, void* end) {
  auto* a = static_cast<Event*>(start);
  auto* b = static_cast<Event*>(end);
  TPU_CHECK(a != nullptr && b != nullptr && a->queue != nullptr && b->queue != nullptr,
            "elapsed_time: both events must be recorded first");
  TPU_CHECK(a->enable_timing && b->enable_timing, "elapsed_time: both events must be created with enable_timing=True");
  event_synchronize(start);
  event_synchronize(end);
  return static_cast<double>(b->state->time_ns - a->state->time_ns) / 1e6;
}

}  // namespace torch_tpu::device
