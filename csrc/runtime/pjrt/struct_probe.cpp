// probe_struct_sizes(): which argument-struct sizes an XLA-based plugin expects (plugin.h).
#include <cstring>
#include <regex>

#include "runtime/pjrt/plugin.h"

namespace torch_tpu::pjrt {

namespace {

template <class Args>
StructSize ask(const Plugin& p, const char* name, c::Fn<Args>* fn) {
  // A zeroed buffer larger than any struct, claiming 16 bytes: only the size check can run.
  alignas(16) unsigned char buf[512] = {};
  static_assert(sizeof(Args) <= sizeof(buf));
  size_t claimed = 16;
  std::memcpy(buf, &claimed, sizeof(claimed));
  std::string message = p.take_message(fn(reinterpret_cast<Args*>(buf)));
  StructSize s{name, sizeof(Args), -1};
  static const std::regex expected("expected ([0-9]+), got 16");
  std::smatch m;
  if (std::regex_search(message, m, expected)) s.plugin = std::stoll(m[1].str());
  return s;
}

}  // namespace

std::vector<StructSize> probe_struct_sizes(const Plugin& p) {
  const c::PJRT_Api& a = p.api();
  std::vector<StructSize> out = {
      ask<c::PJRT_Client_Create_Args>(p, "PJRT_Client_Create_Args", a.PJRT_Client_Create),
      ask<c::PJRT_Client_Destroy_Args>(p, "PJRT_Client_Destroy_Args", a.PJRT_Client_Destroy),
      ask<c::PJRT_Client_PlatformName_Args>(p, "PJRT_Client_PlatformName_Args", a.PJRT_Client_PlatformName),
      ask<c::PJRT_Client_PlatformName_Args>(p, "PJRT_Client_PlatformVersion_Args", a.PJRT_Client_PlatformVersion),
      ask<c::PJRT_Client_AddressableDevices_Args>(p, "PJRT_Client_AddressableDevices_Args",
                                                  a.PJRT_Client_AddressableDevices),
      ask<c::PJRT_Client_Compile_Args>(p, "PJRT_Client_Compile_Args", a.PJRT_Client_Compile),
      ask<c::PJRT_Client_BufferFromHostBuffer_Args>(p, "PJRT_Client_BufferFromHostBuffer_Args",
                                                    a.PJRT_Client_BufferFromHostBuffer),
      ask<c::PJRT_Device_GetDescription_Args>(p, "PJRT_Device_GetDescription_Args", a.PJRT_Device_GetDescription),
      ask<c::PJRT_Device_MemoryStats_Args>(p, "PJRT_Device_MemoryStats_Args", a.PJRT_Device_MemoryStats),
      ask<c::PJRT_DeviceDescription_Id_Args>(p, "PJRT_DeviceDescription_Id_Args", a.PJRT_DeviceDescription_Id),
      ask<c::PJRT_DeviceDescription_Kind_Args>(p, "PJRT_DeviceDescription_Kind_Args", a.PJRT_DeviceDescription_Kind),
      ask<c::PJRT_DeviceDescription_Kind_Args>(p, "PJRT_DeviceDescription_ToString_Args",
                                               a.PJRT_DeviceDescription_ToString),
      ask<c::PJRT_Executable_Destroy_Args>(p, "PJRT_Executable_Destroy_Args", a.PJRT_Executable_Destroy),
      ask<c::PJRT_Executable_NumOutputs_Args>(p, "PJRT_Executable_NumOutputs_Args", a.PJRT_Executable_NumOutputs),
      ask<c::PJRT_Executable_Serialize_Args>(p, "PJRT_Executable_Serialize_Args", a.PJRT_Executable_Serialize),
      ask<c::PJRT_Executable_DeserializeAndLoad_Args>(p, "PJRT_Executable_DeserializeAndLoad_Args",
                                                      a.PJRT_Executable_DeserializeAndLoad),
      ask<c::PJRT_LoadedExecutable_Destroy_Args>(p, "PJRT_LoadedExecutable_Destroy_Args",
                                                 a.PJRT_LoadedExecutable_Destroy),
      ask<c::PJRT_LoadedExecutable_GetExecutable_Args>(p, "PJRT_LoadedExecutable_GetExecutable_Args",
                                                       a.PJRT_LoadedExecutable_GetExecutable),
      ask<c::PJRT_LoadedExecutable_Execute_Args>(p, "PJRT_LoadedExecutable_Execute_Args",
                                                 a.PJRT_LoadedExecutable_Execute),
      ask<c::PJRT_Buffer_Destroy_Args>(p, "PJRT_Buffer_Destroy_Args", a.PJRT_Buffer_Destroy),
      ask<c::PJRT_Buffer_OnDeviceSizeInBytes_Args>(p, "PJRT_Buffer_OnDeviceSizeInBytes_Args",
                                                    a.PJRT_Buffer_OnDeviceSizeInBytes),
      ask<c::PJRT_Buffer_ToHostBuffer_Args>(p, "PJRT_Buffer_ToHostBuffer_Args", a.PJRT_Buffer_ToHostBuffer),
      ask<c::PJRT_Event_Await_Args>(p, "PJRT_Event_Await_Args", a.PJRT_Event_Await),
      ask<c::PJRT_Event_Destroy_Args>(p, "PJRT_Event_Destroy_Args", a.PJRT_Event_Destroy),
  };
  // PJRT_ExecuteOptions: a valid-size Execute_Args whose options claim 16 bytes.
  c::PJRT_ExecuteOptions options{};
  options.struct_size = 16;
  c::PJRT_LoadedExecutable_Execute_Args args{};
  args.struct_size = sizeof(args);
  args.options = &options;
  std::string message = p.take_message(a.PJRT_LoadedExecutable_Execute(&args));
  StructSize s{"PJRT_ExecuteOptions", sizeof(options), -1};
  std::smatch m;
  if (std::regex_search(message, m, std::regex("expected ([0-9]+), got 16"))) s.plugin = std::stoll(m[1].str());
  out.push_back(s);
  return out;
}

}  // namespace torch_tpu::pjrt
