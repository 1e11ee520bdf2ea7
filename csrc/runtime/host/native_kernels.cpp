// Native tile kernels (native_kernels.h): the policy, the registry and the background compiler.
#include "runtime/host/native_kernels.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/fd_io.h"
#include "common/fork_guard.h"
#include "common/hash.h"
#include "runtime/host/tile_cluster.h"

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
// bit operations, selects), so the bits are the interpreter's (tile_math.cpp, exec_op).
constexpr const char* kPrelude = R"(
typedef float F16 __attribute__((vector_size(64)));
typedef int I16 __attribute__((vector_size(64)));
typedef float F8 __attribute__((vector_size(32)));
typedef int I8 __attribute__((vector_size(32)));
template <class F> struct Lanes;
typedef unsigned U16 __attribute__((vector_size(64)));
typedef unsigned U8 __attribute__((vector_size(32)));
template <> struct Lanes<F16> { typedef I16 I; typedef U16 U; enum { n = 16 }; };
template <> struct Lanes<F8> { typedef I8 I; typedef U8 U; enum { n = 8 }; };
template <class F> static inline F ld(const float* p) { F v; __builtin_memcpy(&v, p, sizeof v); return v; }
template <class F> static inline void st(float* p, F v) { __builtin_memcpy(p, &v, sizeof v); }
template <class F> static inline F bc(float x) { return F{} + x; }
template <class F> static inline F b2f(typename Lanes<F>::I m) { return m ? bc<F>(1.f) : bc<F>(0.f); }
template <class F> static inline F vabs(F x) { typedef typename Lanes<F>::I I; return (F)((I)x & 0x7fffffff); }
template <class F> static inline F vsqrt(F x) { F r; for (int l = 0; l < Lanes<F>::n; ++l) r[l] = __builtin_sqrtf(x[l]); return r; }
template <class F> static inline F vmax(F x, F y) { return x != x ? x : y != y ? y : x > y ? x : y; }
template <class F> static inline F vmin(F x, F y) { return x != x ? x : y != y ? y : x < y ? x : y; }
// Rounded to bfloat16 and back, as the interpreter's round_bf16: nearest, ties to even; NaN to
// the quiet NaN 0x7fc0.
template <class F> static inline F rbf16(F x) {
  typedef typename Lanes<F>::U U;
  const U u = (U)x;
  const F r = (F)(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
  return x != x ? (F)(U{} + 0x7fc00000u) : r;
}
typedef void (*Step)(void*, int);
)";

}  // namespace

// Owns every kernel asked for (never freed: a cluster holds a plain pointer), and loads or
// compiles each on a background thread (on the caller's when the policy is synchronous).
class NativeCompiler {
 public:
  static NativeCompiler& get() {
    static auto* c = [] {
      std::atexit(at_exit);
      return new NativeCompiler();  // leaked: the background thread may outlive statics
    }();
    return *c;
  }

  NativeKernel* request(const std::string& body) {
    std::unique_lock<std::mutex> lock(mu_);
    auto [it, fresh] = kernels_.try_emplace(body);
    if (!fresh) return it->second.get();
    it->second = std::make_unique<NativeKernel>();
    ++stats_.requested;
    Job job = make_job(it->second.get(), body);
    if (native_tier_policy().synchronous) {
      process(job, lock);
    } else {
      queue_.push_back(std::move(job));
      if (!worker_started_) {
        worker_started_ = true;
        note_runtime_thread_started();
        std::thread([this] { work(); }).detach();
      }
      cv_.notify_one();
    }
    return it->second.get();
  }

  NativeTierStats stats() {
    std::lock_guard<std::mutex> g(mu_);
    return stats_;
  }

  void set_store(NativeKernelStore store) {
    std::lock_guard<std::mutex> g(mu_);
    store_ = std::move(store);
  }

 private:
  struct Job {
    NativeKernel* kernel;
    std::string name;    // tpu_native_<hash of the body>: the same in every process
    std::string source;  // the whole file: prelude and the named function
    std::vector<int64_t> key;
  };

  static Job make_job(NativeKernel* kernel, const std::string& body) {
    const uint64_t h = fnv1a(body.data(), body.size());  // stable across processes, unlike std::hash
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    Job job{kernel, std::string("tpu_native_") + hex, kPrelude, {}};
    std::string named = body;
    for (size_t p; (p = named.find("NATIVE_TILE_FN")) != std::string::npos;) named.replace(p, 14, job.name);
    job.source += named;
    // The disk tier's key: a tag, the lane width, then the whole source, 8 bytes a word (the
    // tier compares every word, so two sources never share an entry).
    job.key = {0x4e41544956454b31LL /* "NATIVEK1" */, native_tier_policy().lanes,
               static_cast<int64_t>(job.source.size())};
    for (size_t i = 0; i < job.source.size(); i += 8) {
      int64_t w = 0;
      std::memcpy(&w, job.source.data() + i, std::min<size_t>(8, job.source.size() - i));
      job.key.push_back(w);
    }
    return job;
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !queue_.empty(); });
      Job job = std::move(queue_.front());
      queue_.pop_front();
      process(job, lock);
    }
  }

  // Loads the kernel from the disk tier or compiles it (storing the library there);
  // `lock` (on mu_) is released meanwhile.
  void process(const Job& job, std::unique_lock<std::mutex>& lock) {
    const NativeKernelStore store = store_;
    lock.unlock();
    std::string error;
    bool from_disk = false;
    void* lib = nullptr;
    if (store.load) {
      if (std::optional<std::string> bytes = store.load(job.key)) {
        std::string ignored;  // an unusable stored library is compiled afresh (and replaced)
        lib = load_library(*bytes, ignored);
        from_disk = lib != nullptr;
      }
    }
    int64_t ns = 0;
    if (lib == nullptr) {
      const auto t0 = std::chrono::steady_clock::now();
      std::string bytes = compile(job.source, error);
      ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      if (!bytes.empty()) {
        lib = load_library(bytes, error);
        if (lib != nullptr && store.store) store.store(job.key, bytes);
      }
    }
    auto fn = lib != nullptr ? reinterpret_cast<NativeTileFn>(dlsym(lib, job.name.c_str())) : nullptr;
    if (lib != nullptr && fn == nullptr) error = "symbol " + job.name + " missing from the compiled kernel";
    lock.lock();
    stats_.compile_ns += ns;
    if (fn != nullptr) {
      job.kernel->fn_.store(fn, std::memory_order_release);
      ++stats_.loaded;
      stats_.from_disk += from_disk ? 1 : 0;
      return;
    }
    ++stats_.failed;
    stats_.last_error = error;
    if (!warned_) {
      warned_ = true;
      TORCH_WARN("torch_tpu: native kernels for fused clusters are unavailable (", error,
                 "); clusters keep running through the interpreter. TORCH_TPU_NATIVE_KERNELS=0 turns the "
                 "native tier off.");
    }
  }

  // A fresh temporary directory (removed by the caller), or "" with `error` set.
  static std::string temp_dir(std::string& error) {
    std::error_code ec;
    std::string pattern = (std::filesystem::temp_directory_path(ec) / "torch_tpu_native_XXXXXX").string();
    if (ec || mkdtemp(pattern.data()) == nullptr) {
      error = "no temporary directory for the compiler";
      return "";
    }
    return pattern;
  }

  // The compiler run in flight: a process that exits meanwhile kills the compiler and removes
  // its directory (at_exit) instead of leaving both behind, and the background thread, if it
  // wakes during exit, touches nothing more.
  struct InFlight {
    std::mutex mu;
    pid_t pid = 0;
    std::string dir;
    bool exiting = false;
  };
  static InFlight& in_flight() {
    static auto* f = new InFlight();
    return *f;
  }
  static void at_exit() {
    if (in_bad_fork()) return;  // a forked child: the compiler and directory are the parent's
    InFlight& f = in_flight();
    std::lock_guard<std::mutex> g(f.mu);
    f.exiting = true;
    if (f.pid > 0) {
      kill(-f.pid, SIGKILL);  // the compiler's process group: driver, cc1plus, assembler
      waitpid(f.pid, nullptr, 0);
    }
    std::error_code ec;
    if (!f.dir.empty()) std::filesystem::remove_all(f.dir, ec);
  }
  // Called by the compiling thread at each step: during exit it stops here for good.
  static void stop_if_exiting(std::unique_lock<std::mutex>& lock) {
    while (in_flight().exiting) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::hours(1));
      lock.lock();
    }
  }

  // Runs the compiler on `source`: the shared library's bytes, or "" with `error` set.
  static std::string compile(const std::string& source, std::string& error) {
    namespace fs = std::filesystem;
    const std::string dir_name = temp_dir(error);
    if (dir_name.empty()) return "";
    {
      std::unique_lock<std::mutex> lock(in_flight().mu);
      stop_if_exiting(lock);
      in_flight().dir = dir_name;
    }
    const fs::path dir(dir_name), src = dir / "kernel.cpp", lib = dir / "kernel.so", log = dir / "compiler.log";
    std::string bytes;
    {
      std::ofstream out(src);
      out << source;
      if (!out) error = "cannot write " + src.string();
    }
    if (error.empty()) {
      const char* env_cxx = std::getenv("CXX");
      const std::string cxx = env_cxx != nullptr && *env_cxx != '\0' ? env_cxx : "c++";
      const std::string isa = native_tier_policy().lanes == 16 ? "-mavx512f" : "-mavx2";
      // No contraction into FMA and no fast-math: every operation rounds as the interpreter's.
      // CXX may carry arguments ("ccache g++"), as in make.
      std::vector<std::string> args;
      for (size_t b = 0, e; b < cxx.size(); b = e + 1) {
        e = cxx.find(' ', b);
        if (e == std::string::npos) e = cxx.size();
        if (e > b) args.push_back(cxx.substr(b, e - b));
      }
      if (args.empty()) args.emplace_back("c++");
      args.insert(args.end(), {"-O2", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno",
                               "-fno-exceptions", "-w", isa, "-o", lib.string(), src.string()});
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      // The compiler's own temporary files go to our directory too, and it runs in a process
      // group of its own, so at_exit can stop every process of it and leave nothing behind.
      std::vector<std::string> env_strings;
      for (char** e = environ; *e != nullptr; ++e) {
        if (std::strncmp(*e, "TMPDIR=", 7) != 0) env_strings.emplace_back(*e);
      }
      env_strings.push_back("TMPDIR=" + dir_name);
      std::vector<char*> envp;
      for (std::string& e : env_strings) envp.push_back(e.data());
      envp.push_back(nullptr);
      posix_spawnattr_t attr;
      posix_spawnattr_init(&attr);
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
      posix_spawnattr_setpgroup(&attr, 0);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      posix_spawn_file_actions_adddup2(&fa, 1, 2);
      pid_t pid = 0;
      int rc = 0;
      {
        std::unique_lock<std::mutex> lock(in_flight().mu);
        stop_if_exiting(lock);
        rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
        if (rc == 0) in_flight().pid = pid;
      }
      posix_spawn_file_actions_destroy(&fa);
      posix_spawnattr_destroy(&attr);
      int status = 0;
      const pid_t waited = rc == 0 ? waitpid(pid, &status, 0) : -1;
      {
        std::unique_lock<std::mutex> lock(in_flight().mu);
        in_flight().pid = 0;
        stop_if_exiting(lock);
      }
      if (rc != 0) {
        error = "cannot run the C++ compiler '" + cxx + "' (set CXX to one)";
      } else if (waited == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        std::ifstream in(log);
        std::string first;
        std::getline(in, first);
        error = "'" + cxx + "' failed: " + first;
      } else {
        std::ifstream in(lib, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (bytes.empty()) error = "the compiler wrote no library";
      }
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    std::lock_guard<std::mutex> g(in_flight().mu);
    in_flight().dir.clear();
    return bytes;
  }

  // dlopens a library from its bytes. The bytes are in memory (compiled here, or read from the
  // disk tier and authenticated there, disk_cache.h), and only this private copy of them is
  // loaded: an anonymous memfd (dlopen through /proc/self/fd), or where that is unavailable a
  // file created with O_EXCL in a fresh 0700 directory of ours, removed once it is mapped.
  // Never a path another user could swap between writing and loading.
  static void* load_library(const std::string& bytes, std::string& error) {
    namespace fs = std::filesystem;
    void* handle = nullptr;
    auto open_lib = [&](const std::string& path) {
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* why = dlerror();
        error = std::string("cannot load the compiled kernel: ") + (why != nullptr ? why : "?");
      }
    };
    const int fd = static_cast<int>(::syscall(SYS_memfd_create, "torch_tpu_kernel", 1u /* MFD_CLOEXEC */));
    if (fd >= 0) {
      const bool written = write_all(fd, bytes.data(), bytes.size());
      if (written && ::access("/proc/self/fd", X_OK) == 0) {
        open_lib("/proc/self/fd/" + std::to_string(fd));
        // A loaded library stays open (kernels live for the process) and so does its fd: the
        // loader knows a library by its path, so a later kernel given this fd's number again
        // would be taken for this one, and its symbol found missing.
        if (handle == nullptr) ::close(fd);
        return handle;
      }
      ::close(fd);
    }
    const std::string dir_name = temp_dir(error);
    if (dir_name.empty()) return nullptr;
    const fs::path path = fs::path(dir_name) / "kernel.so";
    const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700);
    bool ok = file >= 0 && write_all(file, bytes.data(), bytes.size());
    if (file >= 0) ok = ::close(file) == 0 && ok;
    if (!ok) error = "cannot write " + path.string();
    if (ok) open_lib(path.string());
    std::error_code ec;
    fs::remove_all(dir_name, ec);  // a loaded library stays mapped
    return handle;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::unique_ptr<NativeKernel>> kernels_;
  std::deque<Job> queue_;
  NativeKernelStore store_;
  bool worker_started_ = false;
  bool warned_ = false;
  NativeTierStats stats_;
};

NativeKernel* native_kernel(const std::string& source) {
  if (!native_tier_policy().enabled) return nullptr;
  return NativeCompiler::get().request(source);
}

NativeTierStats native_tier_stats() { return NativeCompiler::get().stats(); }

void set_native_kernel_store(NativeKernelStore store) { NativeCompiler::get().set_store(std::move(store)); }

}  // namespace torch_tpu::runtime::host
