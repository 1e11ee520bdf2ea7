// Native tile kernels (native_kernels.h): the policy, the registry and the background compiler.
#include "runtime/host/native_kernels.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/config.h"
#include "runtime/host/fusion.h"

extern char** environ;

namespace torch_tpu::runtime::host {

const NativeTierPolicy& native_tier_policy() {
  static const NativeTierPolicy policy = [] {
    NativeTierPolicy p;
#if defined(__x86_64__)
    // The generated code is written on 8- or 16-float vectors (AVX2 / AVX512), at the width the
    // interpreter's tile loops use.
    if (!__builtin_cpu_supports("avx2")) return p;
    p.lanes = avx512_lanes() ? 16 : 8;
#else
    return p;
#endif
    const std::string v = config::get("TORCH_TPU_NATIVE_KERNELS");
    if (v == "0" || v == "off" || v.empty()) return p;
    p.enabled = true;
    if (v == "sync") {
      p.synchronous = true;
      p.hot_runs = 1;
      return p;
    }
    p.hot_runs = std::max<int64_t>(1, config::get_int("TORCH_TPU_NATIVE_KERNELS"));
    return p;
  }();
  return policy;
}

namespace {

// Shared by every generated file: vector types, loads and stores of any alignment, and the few
// lane operations the vector extensions do not spell directly. Each is exact (IEEE single ops,
// bit operations, selects), so the bits are the interpreter's (fusion.cpp, exec_op).
constexpr const char* kPrelude = R"(
typedef float F16 __attribute__((vector_size(64)));
typedef int I16 __attribute__((vector_size(64)));
typedef float F8 __attribute__((vector_size(32)));
typedef int I8 __attribute__((vector_size(32)));
template <class F> struct Lanes;
template <> struct Lanes<F16> { typedef I16 I; enum { n = 16 }; };
template <> struct Lanes<F8> { typedef I8 I; enum { n = 8 }; };
template <class F> static inline F ld(const float* p) { F v; __builtin_memcpy(&v, p, sizeof v); return v; }
template <class F> static inline void st(float* p, F v) { __builtin_memcpy(p, &v, sizeof v); }
template <class F> static inline F bc(float x) { return F{} + x; }
template <class F> static inline F b2f(typename Lanes<F>::I m) { return m ? bc<F>(1.f) : bc<F>(0.f); }
template <class F> static inline F vabs(F x) { typedef typename Lanes<F>::I I; return (F)((I)x & 0x7fffffff); }
template <class F> static inline F vsqrt(F x) { F r; for (int l = 0; l < Lanes<F>::n; ++l) r[l] = __builtin_sqrtf(x[l]); return r; }
template <class F> static inline F vmax(F x, F y) { return x != x ? x : y != y ? y : x > y ? x : y; }
template <class F> static inline F vmin(F x, F y) { return x != x ? x : y != y ? y : x < y ? x : y; }
typedef void (*Step)(void*, int);
)";

}  // namespace

// Owns every kernel asked for (never freed: a cluster holds a plain pointer) and compiles them.
class NativeCompiler {
 public:
  static NativeCompiler& get() {
    static auto* c = new NativeCompiler();  // leaked: the background thread may outlive statics
    return *c;
  }

  NativeKernel* request(const std::string& source) {
    std::unique_lock<std::mutex> lock(mu_);
    auto [it, fresh] = kernels_.try_emplace(source);
    if (!fresh) return it->second.get();
    it->second = std::make_unique<NativeKernel>();
    NativeKernel* k = it->second.get();
    ++stats_.requested;
    Job job{k, "tpu_native_" + std::to_string(stats_.requested), source};
    if (native_tier_policy().synchronous) {
      std::vector<Job> one{std::move(job)};
      compile(one, lock);
      return k;
    }
    queue_.push_back(std::move(job));
    if (!worker_started_) {
      worker_started_ = true;
      std::thread([this] { work(); }).detach();
    }
    cv_.notify_one();
    return k;
  }

  NativeTierStats stats() {
    std::lock_guard<std::mutex> g(mu_);
    return stats_;
  }

 private:
  struct Job {
    NativeKernel* kernel;
    std::string name;
    std::string source;  // the body, its name written NATIVE_TILE_FN
  };

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !queue_.empty(); });
      // Everything asked for so far in one file: one compiler start-up for a program's clusters.
      std::vector<Job> batch(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
      compile(batch, lock);
    }
  }

  // Compiles and loads `batch`; `lock` (on mu_) is released while the compiler runs.
  void compile(std::vector<Job>& batch, std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    void* lib = build(batch, error);
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    stats_.compile_ns += ns;
    for (Job& j : batch) {
      auto fn = lib != nullptr ? reinterpret_cast<NativeTileFn>(dlsym(lib, j.name.c_str())) : nullptr;
      if (fn == nullptr && error.empty()) error = "symbol " + j.name + " missing from the compiled kernels";
      if (fn != nullptr) {
        j.kernel->fn_.store(fn, std::memory_order_release);
        ++stats_.loaded;
      } else {
        ++stats_.failed;
      }
    }
    if (!error.empty()) {
      stats_.last_error = error;
      if (!warned_) {
        warned_ = true;
        TORCH_WARN("torch_tpu: native kernels for fused clusters are unavailable (", error,
                   "); clusters keep running through the interpreter. TORCH_TPU_NATIVE_KERNELS=0 turns the "
                   "native tier off.");
      }
    }
  }

  // Writes the batch's source, runs the compiler, dlopens the result (files removed after).
  static void* build(const std::vector<Job>& batch, std::string& error) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string pattern = (fs::temp_directory_path(ec) / "torch_tpu_native_XXXXXX").string();
    if (ec || mkdtemp(pattern.data()) == nullptr) {
      error = "no temporary directory for the compiler";
      return nullptr;
    }
    const fs::path dir(pattern), src = dir / "kernels.cpp", lib = dir / "kernels.so", log = dir / "compiler.log";
    {
      std::ofstream out(src);
      out << kPrelude;
      for (const Job& j : batch) {
        std::string body = j.source;
        for (size_t p; (p = body.find("NATIVE_TILE_FN")) != std::string::npos;) body.replace(p, 14, j.name);
        out << body;
      }
      if (!out) error = "cannot write " + src.string();
    }
    void* handle = nullptr;
    if (error.empty()) {
      const char* env_cxx = std::getenv("CXX");
      const std::string cxx = env_cxx != nullptr && *env_cxx != '\0' ? env_cxx : "c++";
      const std::string isa = native_tier_policy().lanes == 16 ? "-mavx512f" : "-mavx2";
      // No contraction into FMA and no fast-math: every operation rounds as the interpreter's.
      std::vector<std::string> args = {cxx,
                                       "-O2",
                                       "-std=c++17",
                                       "-shared",
                                       "-fPIC",
                                       "-ffp-contract=off",
                                       "-fno-math-errno",
                                       "-fno-exceptions",
                                       "-w",
                                       isa,
                                       "-o",
                                       lib.string(),
                                       src.string()};
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      posix_spawn_file_actions_adddup2(&fa, 1, 2);
      pid_t pid = 0;
      const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&fa);
      int status = 0;
      if (rc != 0) {
        error = "cannot run the C++ compiler '" + cxx + "' (set CXX to one)";
      } else if (waitpid(pid, &status, 0) == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        std::ifstream in(log);
        std::string first;
        std::getline(in, first);
        error = "'" + cxx + "' failed: " + first;
      } else if ((handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL)) == nullptr) {
        const char* why = dlerror();
        error = std::string("cannot load the compiled kernels: ") + (why != nullptr ? why : "?");
      }
    }
    fs::remove_all(dir, ec);  // a loaded library stays mapped
    return handle;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::unique_ptr<NativeKernel>> kernels_;
  std::deque<Job> queue_;
  bool worker_started_ = false;
  bool warned_ = false;
  NativeTierStats stats_;
};

NativeKernel* native_kernel(const std::string& source) {
  if (!native_tier_policy().enabled) return nullptr;
  return NativeCompiler::get().request(source);
}

NativeTierStats native_tier_stats() { return NativeCompiler::get().stats(); }

}  // namespace torch_tpu::runtime::host
