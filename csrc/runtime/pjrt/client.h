// A PJRT client and the RAII handles the PJRT runtime works with: events, buffers, loaded
// executables.
//
// Design: thin ownership wrappers over the C API, nothing more. Every call goes through
// Plugin::check, so any PJRT error becomes a c10::Error naming the call and the plugin.
// Transfers are asynchronous: upload() and download() return the event that says when the host
// memory may be reused or read; callers start every transfer of a step first and then await
// the events together, so transfers overlap each other and the execution they feed.
//
// Thread safety: a Client is immutable after create() and may be used from any thread (PJRT
// clients are thread-safe). Handles are move-only and not shared between threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/pjrt/c_api.h"
#include "runtime/pjrt/plugin.h"

namespace torch_tpu::pjrt {

// An owned PJRT_Event; destroyed (never awaited) by the destructor.
class Event {
 public:
  Event() = default;
  Event(const Plugin* plugin, c::PJRT_Event* event) : plugin_(plugin), event_(event) {}
  Event(Event&& o) noexcept : plugin_(o.plugin_), event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  ~Event();
  // Blocks until the event is ready; throws its error (as Plugin::check does). No-op if empty.
  void await(const char* what);
  // Blocks until ready and drops any error (unwinding paths: host memory a transfer still
  // reads or writes must not be freed before it finishes). Never throws.
  void await_quietly() noexcept;

 private:
  const Plugin* plugin_ = nullptr;
  c::PJRT_Event* event_ = nullptr;
};

// Device bytes held by the live Buffers a client made on one device (PJRT_Buffer_OnDeviceSizeInBytes
// of each, from its creation to its destruction) and their peak: the memory figures on PJRT.
class DeviceBytes {
 public:
  void add(int64_t n) noexcept {
    const int64_t now = current_.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t p = peak_.load(std::memory_order_relaxed);
    while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void sub(int64_t n) noexcept { current_.fetch_sub(n, std::memory_order_relaxed); }
  int64_t current() const noexcept { return current_.load(std::memory_order_relaxed); }
  int64_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() noexcept { peak_.store(current(), std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> current_{0}, peak_{0};
};

// An owned PJRT_Buffer (device memory); destroyed by the destructor. With `account`, its
// on-device size is counted there while it lives.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Plugin* plugin, c::PJRT_Buffer* buffer, DeviceBytes* account = nullptr);
  Buffer(Buffer&& o) noexcept
      : plugin_(o.plugin_),
        buffer_(std::exchange(o.buffer_, nullptr)),
        account_(std::exchange(o.account_, nullptr)),
        bytes_(o.bytes_) {}
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer();
  c::PJRT_Buffer* get() const { return buffer_; }
  int64_t bytes() const { return bytes_; }  // on-device size (0 when not counted)
  // A donated buffer: its memory now belongs to a program output, counted as that output.
  void release_bytes() noexcept;

 private:
  const Plugin* plugin_ = nullptr;
  c::PJRT_Buffer* buffer_ = nullptr;
  DeviceBytes* account_ = nullptr;
  int64_t bytes_ = 0;
};

struct DeviceInfo {
  c::PJRT_Device* handle = nullptr;
  int id = 0;        // PJRT_DeviceDescription_Id
  std::string kind;  // e.g. "NVIDIA H200", "TPU v5 lite"
  std::string name;  // PJRT_DeviceDescription_ToString, e.g. "CudaDevice(id=0)"
};

// PJRT_Device_MemoryStats. -1 where the plugin does not report a figure.
struct DeviceMemoryStats {
  int64_t bytes_in_use = -1, peak_bytes_in_use = -1, num_allocs = -1, largest_alloc_size = -1;
  int64_t bytes_limit = -1, bytes_reserved = -1, peak_bytes_reserved = -1;
};

// A compiled program loaded on the client's devices.
class LoadedExecutable {
 public:
  LoadedExecutable(const Plugin* plugin, c::PJRT_LoadedExecutable* exe, size_t num_outputs)
      : plugin_(plugin), exe_(exe), num_outputs_(num_outputs) {}
  LoadedExecutable(const LoadedExecutable&) = delete;
  LoadedExecutable& operator=(const LoadedExecutable&) = delete;
  ~LoadedExecutable();
  size_t num_outputs() const { return num_outputs_; }
  void set_num_outputs(size_t n) { num_outputs_ = n; }  // once, by Client::adopt
  c::PJRT_LoadedExecutable* handle() const { return exe_; }
  // Runs on `device` (null: the compile-time device) and returns the output buffers (counted
  // in `account` when given); `done` is set to the completion event. Argument i is donated only
  // where donated[i] is set: its memory becomes an output's, and the caller must never read it
  // again (only destroy it).
  std::vector<Buffer> execute(const std::vector<c::PJRT_Buffer*>& args, c::PJRT_Device* device, Event* done,
                              const std::vector<uint8_t>& donated = {}, DeviceBytes* account = nullptr) const;

 private:
  const Plugin* plugin_;
  c::PJRT_LoadedExecutable* exe_;
  size_t num_outputs_;
};

// One client create option (PJRT_NamedValue): a string, int64, float or bool value.
struct ClientOption {
  enum class Kind { String, Int, Float, Bool } kind = Kind::String;
  std::string name, s;
  int64_t i = 0;
  float f = 0.0f;
  bool b = false;
};
// Parses "name=value,name=value" (TORCH_TPU_PJRT_OPTIONS): true/false -> bool, integers -> int64,
// other numbers -> float, anything else -> string. Throws c10::ValueError on a malformed entry.
std::vector<ClientOption> parse_client_options(const std::string& text);

class Client {
 public:
  // Creates a client of `plugin` with `options`. Throws c10::Error with the plugin's reason
  // (e.g. no CUDA device) naming the plugin path.
  static std::shared_ptr<Client> create(std::shared_ptr<const Plugin> plugin, const std::vector<ClientOption>& options);
  ~Client();

  const Plugin& plugin() const { return *plugin_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  // Addressable devices, in the plugin's order (device i is "tpu:i").
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  DeviceMemoryStats memory_stats(size_t device) const;
  // The bytes of the live buffers this client's upload() made on `device`, and of the outputs
  // of executions given this account (PjrtRuntime passes it).
  DeviceBytes& device_bytes(size_t device) const { return *device_bytes_.at(device); }

  // Compiles MLIR (StableHLO text or bytecode) with a serialized CompileOptionsProto.
  std::unique_ptr<LoadedExecutable> compile(const std::string& mlir, const std::string& compile_options) const;
  // The plugin's serialization of a compiled executable (PJRT_Executable_Serialize: only valid
  // for the same plugin build). Throws c10::Error (NotImplementedError when unsupported).
  std::string serialize(const LoadedExecutable& executable) const;
  // Loads bytes from serialize() (PJRT_Executable_DeserializeAndLoad). Throws c10::Error.
  std::unique_ptr<LoadedExecutable> deserialize(const std::string& bytes) const;
  // Starts copying dense row-major (byte_strides empty) or strided host data to `device`. The
  // host memory must stay unchanged until `*host_done` is ready. The buffer is counted in
  // device_bytes(device).
  Buffer upload(const void* data, c::PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                const std::vector<int64_t>& byte_strides, size_t device, Event* host_done) const;
  // Starts copying `buffer` into dense row-major host memory of `nbytes`; returns the event that
  // says when `dst` holds the data.
  Event download(const Buffer& buffer, void* dst, size_t nbytes) const;

  Client(std::shared_ptr<const Plugin> plugin, c::PJRT_Client* client) : plugin_(std::move(plugin)), client_(client) {}

 private:
  // Takes ownership of a loaded executable and reads its output count.
  std::unique_ptr<LoadedExecutable> adopt(c::PJRT_LoadedExecutable* executable) const;

  std::shared_ptr<const Plugin> plugin_;
  c::PJRT_Client* client_;
  std::string platform_name_, platform_version_;
  std::vector<DeviceInfo> devices_;
  std::vector<std::unique_ptr<DeviceBytes>> device_bytes_;  // per device (atomics do not move)
};

}  // namespace torch_tpu::pjrt
