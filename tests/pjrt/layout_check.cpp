// Compile-time check that csrc/runtime/pjrt/c_api.h (our declarations) lays out every struct
// field and PJRT_Api slot we use exactly like an official pjrt_c_api.h. Not part of the build:
// tests/pjrt/test_layout.py compiles it (syntax only) when a package ships that header
// (e.g. tensorflow: tensorflow/include/tensorflow/compiler/xla/pjrt/c/pjrt_c_api.h), with
// PJRT_C_API_HEADER naming it.
#include PJRT_C_API_HEADER
#include "runtime/pjrt/c_api.h"
namespace o = torch_tpu::pjrt::c;
#define SAME(S, F) static_assert(offsetof(::S, F) == offsetof(o::S, F), #S "." #F);
#define SAMEAS(S, F, G) static_assert(offsetof(::S, F) == offsetof(o::S, G), #S "." #F);
#define API(F) static_assert(offsetof(::PJRT_Api, F) == offsetof(o::PJRT_Api, F), "api " #F);
SAME(PJRT_NamedValue, value_size) SAME(PJRT_NamedValue, type) SAME(PJRT_NamedValue, int64_value)
SAME(PJRT_Api_Version, minor_version) SAME(PJRT_Api, pjrt_api_version)
SAME(PJRT_Error_Message_Args, message_size) SAME(PJRT_Error_GetCode_Args, code)
SAME(PJRT_Plugin_Attributes_Args, num_attributes) SAME(PJRT_Event_Await_Args, event)
SAME(PJRT_Client_Create_Args, client) SAME(PJRT_Client_Create_Args, kv_try_get_user_arg) SAME(PJRT_Client_Create_Args, num_options)
SAMEAS(PJRT_Client_PlatformName_Args, platform_name_size, value_size) static_assert(offsetof(::PJRT_Client_PlatformVersion_Args, platform_version_size) == offsetof(o::PJRT_Client_PlatformName_Args, value_size));
SAMEAS(PJRT_Client_AddressableDevices_Args, num_addressable_devices, num_devices)
SAME(PJRT_Program, format_size) SAME(PJRT_Client_Compile_Args, executable) SAME(PJRT_Client_Compile_Args, compile_options_size)
SAME(PJRT_Client_BufferFromHostBuffer_Args, type) SAME(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics) SAME(PJRT_Client_BufferFromHostBuffer_Args, device)
SAME(PJRT_Client_BufferFromHostBuffer_Args, done_with_host_buffer) SAME(PJRT_Client_BufferFromHostBuffer_Args, buffer)
SAMEAS(PJRT_DeviceDescription_Kind_Args, device_kind_size, value_size) static_assert(offsetof(::PJRT_DeviceDescription_ToString_Args, to_string_size) == offsetof(o::PJRT_DeviceDescription_Kind_Args, value_size));
SAME(PJRT_DeviceDescription_Id_Args, id) SAME(PJRT_Device_GetDescription_Args, device_description)
SAME(PJRT_Device_MemoryStats_Args, bytes_limit) SAME(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set) SAME(PJRT_Device_MemoryStats_Args, bytes_limit_is_set)
SAME(PJRT_Executable_NumOutputs_Args, num_outputs) SAME(PJRT_LoadedExecutable_GetExecutable_Args, executable)
SAME(PJRT_ExecuteOptions, launch_id) SAME(PJRT_ExecuteOptions, incarnation_ids) SAME(PJRT_ExecuteOptions, call_location)
SAME(PJRT_LoadedExecutable_Execute_Args, execute_device) SAME(PJRT_LoadedExecutable_Execute_Args, device_complete_events) SAME(PJRT_LoadedExecutable_Execute_Args, output_lists)
SAME(PJRT_Buffer_ToHostBuffer_Args, event) SAME(PJRT_Buffer_ToHostBuffer_Args, dst_size)
SAME(PJRT_Buffer_OnDeviceSizeInBytes_Args, buffer) SAME(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes)
static_assert(sizeof(::PJRT_Buffer_OnDeviceSizeInBytes_Args) == sizeof(o::PJRT_Buffer_OnDeviceSizeInBytes_Args));
static_assert(sizeof(::PJRT_Api_Version) == sizeof(o::PJRT_Api_Version));
static_assert(sizeof(::PJRT_Device_MemoryStats_Args) == sizeof(o::PJRT_Device_MemoryStats_Args));
static_assert(sizeof(::PJRT_Client_BufferFromHostBuffer_Args) == sizeof(o::PJRT_Client_BufferFromHostBuffer_Args));
static_assert(sizeof(::PJRT_Client_Create_Args) == sizeof(o::PJRT_Client_Create_Args));
static_assert(sizeof(::PJRT_Buffer_ToHostBuffer_Args) == sizeof(o::PJRT_Buffer_ToHostBuffer_Args));
static_assert(sizeof(::PJRT_LoadedExecutable_Execute_Args) == sizeof(o::PJRT_LoadedExecutable_Execute_Args));
static_assert(sizeof(::PJRT_Client_Compile_Args) == sizeof(o::PJRT_Client_Compile_Args));
static_assert(offsetof(::PJRT_Api, PJRT_Error_Destroy) == offsetof(o::PJRT_Api, PJRT_Error_Destroy_));
API(PJRT_Plugin_Initialize) API(PJRT_Event_Await) API(PJRT_Client_Create) API(PJRT_Client_Compile) API(PJRT_Client_BufferFromHostBuffer)
API(PJRT_DeviceDescription_ToString) API(PJRT_Device_MemoryStats) API(PJRT_Executable_NumOutputs) API(PJRT_LoadedExecutable_Execute)
API(PJRT_Buffer_Destroy) API(PJRT_Buffer_OnDeviceSizeInBytes) API(PJRT_Buffer_ToHostBuffer) API(PJRT_Executable_Destroy) API(PJRT_LoadedExecutable_GetExecutable) API(PJRT_DeviceDescription_Kind) API(PJRT_Client_AddressableDevices) API(PJRT_Client_PlatformVersion)
int main() { return 0; }
