#include "runtime/host/kernel_threads.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <c10/core/AutogradState.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "common/blocking_wait.h"
#include "common/config.h"
#include "runtime/internal_dispatch.h"

namespace torch_tpu::runtime::host {
namespace {

// omp_set_num_threads of the OpenMP runtime PyTorch loads (libgomp; a per-thread setting),
// looked up at run time: binaries that link the runtime without libgomp (tpu_cpp_tests) still
// load it through libtorch_cpu.
void set_omp_threads_of_this_thread(int n) {
  using Fn = void (*)(int);
  static const auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (fn != nullptr) fn(n);
}

// Threads per split kernel, the caller included (TORCH_TPU_HOST_KERNEL_THREADS, clamped).
int configured_threads() {
  static const int n = [] {
    const int64_t want = config::get_int("TORCH_TPU_HOST_KERNEL_THREADS");
    const int64_t cpus = std::max<int64_t>(1, std::thread::hardware_concurrency());
    return static_cast<int>(std::clamp<int64_t>(want, 1, cpus));
  }();
  return n;
}

// The parts of one split kernel. They are claimed, not assigned: whoever is free takes the
// next one (the calling thread, a helper, a thread waiting for the stream), so the caller runs
// the parts nobody has started by the time it is done with its own (on a busy machine a woken
// helper may wait a scheduler slice for a core, and the caller would otherwise sleep for it).
class PartsOffer final : public HelpOffer {
 public:
  PartsOffer(int parts, const std::function<void(int)>& fn) : parts_(parts), fn_(fn) {}
  // Claims and runs parts until none is left; true if it ran any.
  bool help() override {
    bool ran = false;
    for (int p; (p = next_.fetch_add(1)) < parts_;) {
      run(p);
      ran = true;
    }
    return ran;
  }
  bool finished() const { return finished_.load() == parts_; }
  // After finished(): the first exception a part threw, rethrown.
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run(int part) {
    try {
      fn_(part);
    } catch (...) {
      std::lock_guard<std::mutex> g(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    finished_.fetch_add(1);
  }
  const int parts_;
  const std::function<void(int)>& fn_;
  std::atomic<int> next_{0};
  std::atomic<int> finished_{0};
  std::mutex error_mu_;
  std::exception_ptr error_;
};

// The helper threads and the split they may join (all fields under `mu`). A helper that
// joins counts in `users`; the caller returns once every part has finished and no helper is
// still inside the offer, so a late helper never touches a finished split.
struct Pool {
  std::mutex busy;  // held by the caller of the split in progress
  std::mutex mu;
  std::condition_variable cv_start, cv_done;
  uint64_t generation = 0;  // bumped per split
  PartsOffer* offer = nullptr;
  const at::ThreadLocalState* state = nullptr;  // the caller's, which helpers run parts under
  int users = 0;
  int helpers = 0;         // started helper threads
  pid_t started_in = 0;    // helpers do not survive fork(): a child process runs splits serially
};

Pool& pool() {
  static auto* p = new Pool();  // leaked, like the helpers, which run until process exit
  return *p;
}

thread_local bool t_in_split = false;  // a part never splits again

void helper_loop(Pool& p) {
  t_in_split = true;
  set_omp_threads_of_this_thread(1);  // its ATen kernels stay on this thread (see kernel_threads.h)
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lk(p.mu);
  for (;;) {
    p.cv_start.wait(lk, [&] { return p.generation != seen; });
    seen = p.generation;
    if (p.offer == nullptr) continue;  // that split is over already
    PartsOffer* offer = p.offer;
    const at::ThreadLocalState* state = p.state;
    ++p.users;
    lk.unlock();
    {
      at::ThreadLocalStateGuard guard(*state);
      offer->help();
    }
    lk.lock();
    if (--p.users == 0 && offer->finished()) p.cv_done.notify_one();
  }
}

std::atomic<uint64_t> g_splits{0};

void run_serially(int parts, const std::function<void(int)>& fn) {
  for (int i = 0; i < parts; ++i) fn(i);
}

}  // namespace

int split_parts(int64_t numel) {
  // Mid-sized kernels split only while a thread waiting for the stream can take the parts.
  const int64_t min = waiting_helpers() > 0 ? kSharedSplitMinElements : kSplitMinElements;
  if (numel < min || t_in_split) return 1;
  // The Python thread (programs run inline, debug mode) has ATen's own intra-op threads.
  if (at::get_num_threads() > 1 || at::in_parallel_region()) return 1;
  return configured_threads();
}

int split_parts(int64_t numel, int64_t rows) {
  return static_cast<int>(std::min<int64_t>(split_parts(numel), std::max<int64_t>(rows, 1)));
}

void run_split_rows(int parts, int64_t rows, const std::function<void(int64_t lo, int64_t hi)>& fn) {
  run_split(parts, [&](int part) { fn(rows * part / parts, rows * (part + 1) / parts); });
}

void run_split(int parts, const std::function<void(int part)>& fn) {
  if (parts <= 1 || t_in_split) return run_serially(parts, fn);
  PartsOffer offer(parts, fn);
  struct InSplit {  // a part never splits again, on this thread either
    InSplit() { t_in_split = true; }
    ~InSplit() { t_in_split = false; }
  } in_split;
  // A thread waiting for the stream spins: it takes parts at once, where a sleeping helper
  // would compete with it for the cores. Should it stop waiting between split_parts and here,
  // a mid-sized kernel goes to the helpers (one futex wake-up).
  if (waiting_helpers() > 0) {
    bool published;
    {
      OfferScope scope(OfferScope::kKernelParts, &offer);
      published = scope.published();
      if (published) {
        g_splits++;
        offer.help();
        while (!offer.finished()) cpu_relax();
      }
    }  // withdrawn: no waiting thread is inside offer.help() any more
    if (published) return offer.rethrow();
  }
  Pool& p = pool();
  std::unique_lock<std::mutex> busy(p.busy, std::try_to_lock);
  if (!busy.owns_lock()) return run_serially(parts, fn);  // another stream's split has them
  const pid_t pid = getpid();
  {
    std::lock_guard<std::mutex> g(p.mu);
    if (p.helpers == 0) p.started_in = pid;
    if (p.started_in != pid) return run_serially(parts, fn);
    for (; p.helpers < std::min(parts, configured_threads()) - 1; ++p.helpers) {
      std::thread([&p] { helper_loop(p); }).detach();
    }
  }
  const at::ThreadLocalState state;
  {
    std::lock_guard<std::mutex> g(p.mu);
    p.offer = &offer;
    p.state = &state;
    ++p.generation;
  }
  p.cv_start.notify_all();
  g_splits++;
  offer.help();  // part 0 and whatever no helper has claimed
  auto over = [&] { return offer.finished() && p.users == 0; };
  bool done;
  {
    std::lock_guard<std::mutex> g(p.mu);
    done = over();
    if (done) {
      p.offer = nullptr;
      p.state = nullptr;
    }
  }
  if (!done) {
    BlockingWait unblock_python;  // a helper copying Python modes of `state` needs the GIL
    std::unique_lock<std::mutex> lk(p.mu);
    p.cv_done.wait(lk, over);
    p.offer = nullptr;
    p.state = nullptr;
  }
  offer.rethrow();
}

uint64_t splits_with_helpers() { return g_splits.load(); }

// ---- Waiting threads ---------------------------------------------------------------------------
namespace {

// An offer slot. A waiting thread reads `offer`, registers in `users`, and reads it again
// before calling into it; withdrawing clears `offer` and then waits for `users` to drain, so
// an offer is never used after its scope ends.
struct Slot {
  std::mutex busy;  // held by the publishing scope
  std::atomic<HelpOffer*> offer{nullptr};
  std::atomic<int> users{0};
};

Slot* slots() {
  static auto* s = new Slot[OfferScope::kNumSlots];  // leaked: waiting threads may outlive statics
  return s;
}

std::atomic<int> g_waiting{0};
std::atomic<uint64_t> g_helped{0};

bool try_help(Slot& s) {
  if (s.offer.load(std::memory_order_acquire) == nullptr) return false;
  s.users.fetch_add(1);
  HelpOffer* o = s.offer.load();
  const bool ran = o != nullptr && o->help();
  s.users.fetch_sub(1);
  if (ran) g_helped++;
  return ran;
}

int64_t help_spin_us() {
  static const int64_t v = std::max<int64_t>(0, config::get_int("TORCH_TPU_HOST_HELP_SPIN_US"));
  return v;
}

// omp_get_max_threads / mkl_set_num_threads_local of the runtimes PyTorch loads (per-thread
// settings), looked up like omp_set_num_threads above. MKL's C entry point is the mixed-case
// name (mkl.h maps the lower-case one to it; the lower-case symbol is Fortran's, by pointer).
int omp_threads_of_this_thread() {
  using Fn = int (*)();
  static const auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  return fn != nullptr ? fn() : 1;
}
int set_mkl_threads_of_this_thread(int n) {
  using Fn = int (*)(int);
  static const auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
  return fn != nullptr ? fn(n) : 0;
}

// A waiting thread's state while it helps: kernels see a fresh thread's dispatch keys and
// autograd state (no autocast, functorch, Python modes or inference mode of the code that
// waits: an inference tensor made here could not be updated in place on the worker) with
// autograd and Python keys excluded as in a program run, one OpenMP and MKL thread (as on a
// stream worker), and never split again.
class HelperThreadState {
 public:
  HelperThreadState()
      : autograd_(c10::AutogradState::get_tls_state()),
        keys_(c10::default_included_set, c10::default_excluded_set),
        omp_(omp_threads_of_this_thread()),
        mkl_(set_mkl_threads_of_this_thread(1)),
        in_split_(t_in_split) {
    set_omp_threads_of_this_thread(1);
    c10::AutogradState::set_tls_state(c10::AutogradState(/*grad_mode=*/true, /*inference_mode=*/false,
                                                         /*fw_grad_mode=*/true, /*multithreading_enabled=*/true));
    t_in_split = true;
  }
  ~HelperThreadState() {
    c10::AutogradState::set_tls_state(autograd_);
    t_in_split = in_split_;
    set_omp_threads_of_this_thread(omp_);
    set_mkl_threads_of_this_thread(mkl_);  // 0 goes back to the global setting
  }
  HelperThreadState(const HelperThreadState&) = delete;
  HelperThreadState& operator=(const HelperThreadState&) = delete;

 private:
  const c10::AutogradState autograd_;
  c10::impl::ForceDispatchKeyGuard keys_;
  InternalDispatchGuard internal_;  // then excluded as in a program run
  int omp_, mkl_;
  bool in_split_;
};

}  // namespace

OfferScope::OfferScope(Slot slot, HelpOffer* offer) : slot_(slot) {
  auto& s = slots()[slot];
  if (!s.busy.try_lock()) return;
  published_ = true;
  s.offer.store(offer);
}

OfferScope::~OfferScope() {
  if (!published_) return;
  auto& s = slots()[slot_];
  s.offer.store(nullptr);
  while (s.users.load() > 0) cpu_relax();
  s.busy.unlock();
}

int waiting_helpers() { return g_waiting.load(std::memory_order_relaxed); }

bool help_while_waiting_enabled() { return help_spin_us() > 0; }

bool help_while_waiting(const std::function<bool()>& done) {
  const int64_t spin_us = help_spin_us();
  if (spin_us <= 0 || t_in_split) return done();
  g_waiting.fetch_add(1);
  HelperThreadState state;
  auto last = std::chrono::steady_clock::now();
  bool finished = false;
  for (uint32_t i = 1;; ++i) {
    if (done()) {
      finished = true;
      break;
    }
    bool ran = false;
    for (int k = 0; k < OfferScope::kNumSlots; ++k) ran = try_help(slots()[k]) || ran;
    if (ran) {
      last = std::chrono::steady_clock::now();
      continue;
    }
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() - last > std::chrono::microseconds(spin_us)) break;
  }
  g_waiting.fetch_sub(1);
  return finished;
}

uint64_t work_run_by_waiting_threads() { return g_helped.load(); }

}  // namespace torch_tpu::runtime::host
