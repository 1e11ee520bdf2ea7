#include "runtime/pjrt/client.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdlib>

#include "common/check.h"

namespace torch_tpu::pjrt {

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    this->~Event();
    plugin_ = o.plugin_;
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

Event::~Event() {
  if (event_ == nullptr) return;
  c::PJRT_Event_Destroy_Args a{};
  a.struct_size = sizeof(a);
  a.event = event_;
  plugin_->take_message(plugin_->api().PJRT_Event_Destroy(&a));
  event_ = nullptr;
}

void Event::await(const char* what) {
  if (event_ == nullptr) return;
  c::PJRT_Event_Await_Args a{};
  a.struct_size = sizeof(a);
  a.event = event_;
  plugin_->check(plugin_->api().PJRT_Event_Await(&a), what);
}

void Event::await_quietly() noexcept {
  if (event_ == nullptr) return;
  c::PJRT_Event_Await_Args a{};
  a.struct_size = sizeof(a);
  a.event = event_;
  plugin_->take_message(plugin_->api().PJRT_Event_Await(&a));
}

Buffer::Buffer(const Plugin* plugin, c::PJRT_Buffer* buffer, DeviceBytes* account)
    : plugin_(plugin), buffer_(buffer) {
  if (account == nullptr || buffer == nullptr) return;
  c::PJRT_Buffer_OnDeviceSizeInBytes_Args a{};
  a.struct_size = sizeof(a);
  a.buffer = buffer;
  // A plugin that cannot say leaves the buffer uncounted rather than failing the program.
  if (c::PJRT_Error* error = plugin->api().PJRT_Buffer_OnDeviceSizeInBytes(&a)) {
    plugin->take_message(error);
    return;
  }
  account_ = account;
  bytes_ = static_cast<int64_t>(a.on_device_size_in_bytes);
  account_->add(bytes_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    this->~Buffer();
    plugin_ = o.plugin_;
    buffer_ = std::exchange(o.buffer_, nullptr);
    account_ = std::exchange(o.account_, nullptr);
    bytes_ = o.bytes_;
  }
  return *this;
}

void Buffer::release_bytes() noexcept {
  if (account_ != nullptr) account_->sub(bytes_);
  account_ = nullptr;
}

Buffer::~Buffer() {
  release_bytes();
  if (buffer_ == nullptr) return;
  c::PJRT_Buffer_Destroy_Args a{};
  a.struct_size = sizeof(a);
  a.buffer = buffer_;
  plugin_->take_message(plugin_->api().PJRT_Buffer_Destroy(&a));
  buffer_ = nullptr;
}

LoadedExecutable::~LoadedExecutable() {
  c::PJRT_LoadedExecutable_Destroy_Args a{};
  a.struct_size = sizeof(a);
  a.executable = exe_;
  plugin_->take_message(plugin_->api().PJRT_LoadedExecutable_Destroy(&a));
}

std::vector<Buffer> LoadedExecutable::execute(const std::vector<c::PJRT_Buffer*>& args, c::PJRT_Device* device,
                                              Event* done, const std::vector<uint8_t>& donated,
                                              DeviceBytes* account) const {
  // Every other input is the caller's to keep: never let the compiler's may-alias consume it.
  std::vector<int64_t> keep;
  keep.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    if (i >= donated.size() || !donated[i]) keep.push_back(static_cast<int64_t>(i));
  c::PJRT_ExecuteOptions opts{};
  opts.struct_size = sizeof(opts);
  opts.non_donatable_input_indices = keep.data();
  opts.num_non_donatable_input_indices = keep.size();
  std::vector<c::PJRT_Buffer*> outs(num_outputs_, nullptr);
  c::PJRT_Buffer* const* arg_list = args.data();
  c::PJRT_Buffer** out_list = outs.data();
  c::PJRT_Event* event = nullptr;
  c::PJRT_LoadedExecutable_Execute_Args a{};
  a.struct_size = sizeof(a);
  a.executable = exe_;
  a.options = &opts;
  a.argument_lists = &arg_list;
  a.num_devices = 1;
  a.num_args = args.size();
  a.output_lists = &out_list;
  a.device_complete_events = &event;
  a.execute_device = device;
  plugin_->check(plugin_->api().PJRT_LoadedExecutable_Execute(&a), "LoadedExecutable_Execute");
  *done = Event(plugin_, event);
  std::vector<Buffer> result;
  result.reserve(outs.size());
  for (c::PJRT_Buffer* b : outs) result.emplace_back(plugin_, b, account);
  return result;
}

std::vector<ClientOption> parse_client_options(const std::string& text) {
  std::vector<ClientOption> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    TPU_CHECK_VALUE(eq != std::string::npos && eq > 0, "TORCH_TPU_PJRT_OPTIONS: '", item, "' is not name=value");
    ClientOption o;
    o.name = item.substr(0, eq);
    std::string v = item.substr(eq + 1);
    char* stop = nullptr;
    errno = 0;
    long long iv = std::strtoll(v.c_str(), &stop, 10);
    if (v == "true" || v == "false") {
      o.kind = ClientOption::Kind::Bool;
      o.b = v == "true";
    } else if (!v.empty() && *stop == '\0' && errno == 0) {
      o.kind = ClientOption::Kind::Int;
      o.i = iv;
    } else if (float fv = std::strtof(v.c_str(), &stop); !v.empty() && *stop == '\0') {
      o.kind = ClientOption::Kind::Float;
      o.f = fv;
    } else {
      o.kind = ClientOption::Kind::String;
      o.s = v;
    }
    out.push_back(std::move(o));
  }
  return out;
}

static std::string string_out(const Plugin& p, c::Fn<c::PJRT_Client_PlatformName_Args>* fn, c::PJRT_Client* client,
                              const char* what) {
  c::PJRT_Client_PlatformName_Args a{};
  a.struct_size = sizeof(a);
  a.client = client;
  p.check(fn(&a), what);
  return std::string(a.value != nullptr ? a.value : "", a.value_size);
}

static std::string description_string(const Plugin& p, c::Fn<c::PJRT_DeviceDescription_Kind_Args>* fn,
                                      c::PJRT_DeviceDescription* d, const char* what) {
  c::PJRT_DeviceDescription_Kind_Args a{};
  a.struct_size = sizeof(a);
  a.device_description = d;
  p.check(fn(&a), what);
  return std::string(a.value != nullptr ? a.value : "", a.value_size);
}

std::shared_ptr<Client> Client::create(std::shared_ptr<const Plugin> plugin, const std::vector<ClientOption>& options) {
  const c::PJRT_Api& api = plugin->api();
  std::vector<c::PJRT_NamedValue> values(options.size());
  for (size_t k = 0; k < options.size(); ++k) {
    const ClientOption& o = options[k];
    c::PJRT_NamedValue& v = values[k];
    v.struct_size = sizeof(v);
    v.name = o.name.c_str();
    v.name_size = o.name.size();
    v.value_size = 1;
    switch (o.kind) {
      case ClientOption::Kind::String:
        v.type = c::PJRT_NamedValue_kString;
        v.string_value = o.s.c_str();
        v.value_size = o.s.size();
        break;
      case ClientOption::Kind::Int:
        v.type = c::PJRT_NamedValue_kInt64;
        v.int64_value = o.i;
        break;
      case ClientOption::Kind::Float:
        v.type = c::PJRT_NamedValue_kFloat;
        v.float_value = o.f;
        break;
      case ClientOption::Kind::Bool:
        v.type = c::PJRT_NamedValue_kBool;
        v.bool_value = o.b;
        break;
    }
  }
  c::PJRT_Client_Create_Args a{};
  a.struct_size = sizeof(a);
  a.create_options = values.data();
  a.num_options = values.size();
  plugin->check(api.PJRT_Client_Create(&a), "Client_Create");
  auto client = std::make_shared<Client>(plugin, a.client);
  const Plugin& p = *client->plugin_;
  client->platform_name_ = string_out(p, api.PJRT_Client_PlatformName, a.client, "Client_PlatformName");
  client->platform_version_ = string_out(p, api.PJRT_Client_PlatformVersion, a.client, "Client_PlatformVersion");
  c::PJRT_Client_AddressableDevices_Args d{};
  d.struct_size = sizeof(d);
  d.client = a.client;
  p.check(api.PJRT_Client_AddressableDevices(&d), "Client_AddressableDevices");
  for (size_t i = 0; i < d.num_devices; ++i) {
    DeviceInfo info;
    info.handle = d.devices[i];
    c::PJRT_Device_GetDescription_Args g{};
    g.struct_size = sizeof(g);
    g.device = info.handle;
    p.check(api.PJRT_Device_GetDescription(&g), "Device_GetDescription");
    c::PJRT_DeviceDescription_Id_Args id{};
    id.struct_size = sizeof(id);
    id.device_description = g.device_description;
    p.check(api.PJRT_DeviceDescription_Id(&id), "DeviceDescription_Id");
    info.id = id.id;
    info.kind = description_string(p, api.PJRT_DeviceDescription_Kind, g.device_description, "DeviceDescription_Kind");
    info.name =
        description_string(p, api.PJRT_DeviceDescription_ToString, g.device_description, "DeviceDescription_ToString");
    client->devices_.push_back(std::move(info));
    client->device_bytes_.push_back(std::make_unique<DeviceBytes>());
  }
  TPU_CHECK(!client->devices_.empty(), "PJRT plugin ", p.path(), " created a client with no addressable devices");
  return client;
}

Client::~Client() {
  c::PJRT_Client_Destroy_Args a{};
  a.struct_size = sizeof(a);
  a.client = client_;
  plugin_->take_message(plugin_->api().PJRT_Client_Destroy(&a));
}

DeviceMemoryStats Client::memory_stats(size_t device) const {
  TPU_CHECK_INDEX(device < devices_.size(), "PJRT device ", device, " out of range (", devices_.size(), " devices)");
  c::PJRT_Device_MemoryStats_Args a{};
  a.struct_size = sizeof(a);
  a.device = devices_[device].handle;
  plugin_->check(plugin_->api().PJRT_Device_MemoryStats(&a), "Device_MemoryStats");
  DeviceMemoryStats s;
  s.bytes_in_use = a.bytes_in_use;
  if (a.peak_bytes_in_use_is_set) s.peak_bytes_in_use = a.peak_bytes_in_use;
  if (a.num_allocs_is_set) s.num_allocs = a.num_allocs;
  if (a.largest_alloc_size_is_set) s.largest_alloc_size = a.largest_alloc_size;
  if (a.bytes_limit_is_set) s.bytes_limit = a.bytes_limit;
  if (a.bytes_reserved_is_set) s.bytes_reserved = a.bytes_reserved;
  if (a.peak_bytes_reserved_is_set) s.peak_bytes_reserved = a.peak_bytes_reserved;
  return s;
}

std::unique_ptr<LoadedExecutable> Client::compile(const std::string& mlir, const std::string& compile_options) const {
  const c::PJRT_Api& api = plugin_->api();
  std::string code = mlir;  // PJRT_Program.code is non-const
  static const char kFormat[] = "mlir";
  c::PJRT_Program program{};
  program.struct_size = sizeof(program);
  program.code = code.data();
  program.code_size = code.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  c::PJRT_Client_Compile_Args a{};
  a.struct_size = sizeof(a);
  a.client = client_;
  a.program = &program;
  a.compile_options = compile_options.data();
  a.compile_options_size = compile_options.size();
  plugin_->check(api.PJRT_Client_Compile(&a), "Client_Compile");
  return adopt(a.executable);
}

std::unique_ptr<LoadedExecutable> Client::adopt(c::PJRT_LoadedExecutable* executable) const {
  const c::PJRT_Api& api = plugin_->api();
  // Own the loaded executable before anything else can throw.
  auto loaded = std::make_unique<LoadedExecutable>(plugin_.get(), executable, 0);
  c::PJRT_LoadedExecutable_GetExecutable_Args g{};
  g.struct_size = sizeof(g);
  g.loaded_executable = executable;
  plugin_->check(api.PJRT_LoadedExecutable_GetExecutable(&g), "LoadedExecutable_GetExecutable");
  c::PJRT_Executable_NumOutputs_Args n{};
  n.struct_size = sizeof(n);
  n.executable = g.executable;
  c::PJRT_Error* err = api.PJRT_Executable_NumOutputs(&n);
  c::PJRT_Executable_Destroy_Args d{};
  d.struct_size = sizeof(d);
  d.executable = g.executable;
  plugin_->take_message(api.PJRT_Executable_Destroy(&d));
  plugin_->check(err, "Executable_NumOutputs");
  loaded->set_num_outputs(n.num_outputs);
  return loaded;
}

std::string Client::serialize(const LoadedExecutable& loaded) const {
  const c::PJRT_Api& api = plugin_->api();
  c::PJRT_LoadedExecutable_GetExecutable_Args g{};
  g.struct_size = sizeof(g);
  g.loaded_executable = loaded.handle();
  plugin_->check(api.PJRT_LoadedExecutable_GetExecutable(&g), "LoadedExecutable_GetExecutable");
  c::PJRT_Executable_Serialize_Args a{};
  a.struct_size = sizeof(a);
  a.executable = g.executable;
  c::PJRT_Error* err = api.PJRT_Executable_Serialize(&a);
  std::string bytes;
  if (err == nullptr && a.serialized_bytes != nullptr) bytes.assign(a.serialized_bytes, a.serialized_bytes_size);
  if (err == nullptr && a.serialized_executable_deleter != nullptr && a.serialized_executable != nullptr)
    a.serialized_executable_deleter(a.serialized_executable);
  c::PJRT_Executable_Destroy_Args d{};
  d.struct_size = sizeof(d);
  d.executable = g.executable;
  plugin_->take_message(api.PJRT_Executable_Destroy(&d));
  plugin_->check(err, "Executable_Serialize");
  return bytes;
}

std::unique_ptr<LoadedExecutable> Client::deserialize(const std::string& bytes) const {
  c::PJRT_Executable_DeserializeAndLoad_Args a{};
  a.struct_size = sizeof(a);
  a.client = client_;
  a.serialized_executable = bytes.data();
  a.serialized_executable_size = bytes.size();
  plugin_->check(plugin_->api().PJRT_Executable_DeserializeAndLoad(&a), "Executable_DeserializeAndLoad");
  return adopt(a.loaded_executable);
}

Buffer Client::upload(const void* data, c::PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& byte_strides, size_t device, Event* host_done) const {
  c::PJRT_Client_BufferFromHostBuffer_Args a{};
  a.struct_size = sizeof(a);
  a.client = client_;
  a.data = data;
  a.type = type;
  a.dims = dims.data();
  a.num_dims = dims.size();
  a.byte_strides = byte_strides.empty() ? nullptr : byte_strides.data();
  a.num_byte_strides = byte_strides.size();
  a.host_buffer_semantics = c::PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  a.device = devices_.at(device).handle;
  plugin_->check(plugin_->api().PJRT_Client_BufferFromHostBuffer(&a), "Client_BufferFromHostBuffer");
  *host_done = Event(plugin_.get(), a.done_with_host_buffer);
  return Buffer(plugin_.get(), a.buffer, device_bytes_[device].get());
}

Event Client::download(const Buffer& buffer, void* dst, size_t nbytes) const {
  c::PJRT_Buffer_ToHostBuffer_Args a{};
  a.struct_size = sizeof(a);
  a.src = buffer.get();
  a.dst = dst;
  a.dst_size = nbytes;
  plugin_->check(plugin_->api().PJRT_Buffer_ToHostBuffer(&a), "Buffer_ToHostBuffer");
  return Event(plugin_.get(), a.event);
}

}  // namespace torch_tpu::pjrt
