// Our declarations of the part of the PJRT C API that torch_tpu calls.
//
// Design: no copy of XLA's pjrt_c_api.h is committed and none ships in the packages we build
// against (see docs/pjrt.md for the wheels that were checked), so this file declares, from the
// public specification, exactly the functions and argument structs the PJRT runtime uses, with
// their names. The rules of the C API make this safe:
//   * Every argument struct starts with `struct_size` and an extension pointer; fields are only
//     ever appended (a minor version bump). A plugin rejects a caller whose struct_size is
//     smaller than the plugin's own with an "Unexpected <struct> size" error, which we surface
//     as a Python exception, so a struct that grew after the version declared here fails
//     loudly, never silently.
//   * The PJRT_Api function table is append-only since 0.57 (the last rearrangement). We name
//     the slots we call and keep the others as opaque placeholders, so the table layout equals
//     the real one up to the last slot we use; plugin.cpp checks the plugin's reported
//     struct_size covers that slot and that its version is within [kMinMinor, ...] of major 0.
// Layouts follow PJRT C API 0.105 for every struct declared here (ExecuteOptions: the newest
// fields we know, all zero = "not used"). Only LP64 platforms are supported (static_asserts).
#pragma once

#include <cstddef>
#include <cstdint>

namespace torch_tpu::pjrt::c {

// The API versions this file is written for. A plugin must report major == kMajor and
// minor >= kMinMinor; newer minors are accepted (append-only), older ones refused.
constexpr int kMajor = 0;
constexpr int kMinMinor = 57;
constexpr int kDeclaredMinor = 105;

struct PJRT_Error;
struct PJRT_Event;
struct PJRT_Client;
struct PJRT_Device;
struct PJRT_DeviceDescription;
struct PJRT_Memory;
struct PJRT_Executable;
struct PJRT_LoadedExecutable;
struct PJRT_Buffer;
struct PJRT_SerializedExecutable;
struct PJRT_Extension_Base;

// Status codes (absl's).
enum PJRT_Error_Code : int {
  PJRT_Error_Code_OK = 0,
  PJRT_Error_Code_CANCELLED = 1,
  PJRT_Error_Code_UNKNOWN = 2,
  PJRT_Error_Code_INVALID_ARGUMENT = 3,
  PJRT_Error_Code_DEADLINE_EXCEEDED = 4,
  PJRT_Error_Code_NOT_FOUND = 5,
  PJRT_Error_Code_ALREADY_EXISTS = 6,
  PJRT_Error_Code_PERMISSION_DENIED = 7,
  PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
  PJRT_Error_Code_FAILED_PRECONDITION = 9,
  PJRT_Error_Code_ABORTED = 10,
  PJRT_Error_Code_OUT_OF_RANGE = 11,
  PJRT_Error_Code_UNIMPLEMENTED = 12,
  PJRT_Error_Code_INTERNAL = 13,
  PJRT_Error_Code_UNAVAILABLE = 14,
  PJRT_Error_Code_DATA_LOSS = 15,
  PJRT_Error_Code_UNAUTHENTICATED = 16,
};

// Element types (the enum's order is the ABI; we use the first entries only).
enum PJRT_Buffer_Type : int {
  PJRT_Buffer_Type_INVALID = 0,
  PJRT_Buffer_Type_PRED,
  PJRT_Buffer_Type_S8,
  PJRT_Buffer_Type_S16,
  PJRT_Buffer_Type_S32,
  PJRT_Buffer_Type_S64,
  PJRT_Buffer_Type_U8,
  PJRT_Buffer_Type_U16,
  PJRT_Buffer_Type_U32,
  PJRT_Buffer_Type_U64,
  PJRT_Buffer_Type_F16,
  PJRT_Buffer_Type_F32,
  PJRT_Buffer_Type_F64,
  PJRT_Buffer_Type_BF16,
};

enum PJRT_HostBufferSemantics : int {
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
  PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes = 1,
  PJRT_HostBufferSemantics_kImmutableZeroCopy = 2,
  PJRT_HostBufferSemantics_kMutableZeroCopy = 3,
};

enum PJRT_NamedValue_Type : int {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64,
  PJRT_NamedValue_kInt64List,
  PJRT_NamedValue_kFloat,
  PJRT_NamedValue_kBool,
};

struct PJRT_NamedValue {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size;  // elements of a list or string; 1 for a scalar
};

struct PJRT_Api_Version {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  int major_version;
  int minor_version;
};

// ---- Argument structs: `struct_size`, `extension_start`, inputs, then outputs (marked out). ----

struct PJRT_Error_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Error* error;
};
struct PJRT_Error_Message_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  const char* message;  // out, lives as long as `error`
  size_t message_size;  // out
};
struct PJRT_Error_GetCode_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  PJRT_Error_Code code;  // out
};
struct PJRT_Plugin_Initialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
};
struct PJRT_Plugin_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* attributes;  // out, process lifetime
  size_t num_attributes;              // out
};
struct PJRT_Event_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
};
struct PJRT_Event_Await_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
};
struct PJRT_Client_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  void* kv_get_callback;  // key-value store callbacks: unused (single process)
  void* kv_get_user_arg;
  void* kv_put_callback;
  void* kv_put_user_arg;
  PJRT_Client* client;  // out
  void* kv_try_get_callback;
  void* kv_try_get_user_arg;
};
struct PJRT_Client_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
};
struct PJRT_Client_PlatformName_Args {  // also PlatformVersion (same layout)
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* value;  // out, lives as long as `client`
  size_t value_size;  // out
};
struct PJRT_Client_AddressableDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Device* const* devices;  // out, lives as long as `client`
  size_t num_devices;           // out
};
struct PJRT_Program {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  char* code;
  size_t code_size;
  const char* format;  // "mlir": MLIR text or bytecode
  size_t format_size;
};
struct PJRT_Client_Compile_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const PJRT_Program* program;
  const char* compile_options;  // serialized xla.CompileOptionsProto
  size_t compile_options_size;
  PJRT_LoadedExecutable* executable;  // out
};
struct PJRT_Client_BufferFromHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const void* data;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides;  // may be null: dense row-major
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device* device;
  PJRT_Memory* memory;                // null: the device's default memory
  void* device_layout;                // null: dense row-major
  PJRT_Event* done_with_host_buffer;  // out: `data` may be reused once ready
  PJRT_Buffer* buffer;                // out
};
struct PJRT_DeviceDescription_Kind_Args {  // also DebugString / ToString (same layout)
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* value;  // out, lives as long as the device
  size_t value_size;  // out
};
struct PJRT_DeviceDescription_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  int id;  // out
};
struct PJRT_Device_GetDescription_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_DeviceDescription* device_description;  // out
};
struct PJRT_Device_MemoryStats_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int64_t bytes_in_use;  // out (always set); the rest are out and valid when *_is_set
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit;
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
};
struct PJRT_Executable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
};
struct PJRT_Executable_NumOutputs_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;  // out
};
struct PJRT_LoadedExecutable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
};
struct PJRT_LoadedExecutable_GetExecutable_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* loaded_executable;
  PJRT_Executable* executable;  // out, freed with PJRT_Executable_Destroy
};
struct PJRT_Executable_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Executable* executable;
  const char* serialized_bytes;                      // out, valid until the deleter runs
  size_t serialized_bytes_size;                      // out
  PJRT_SerializedExecutable* serialized_executable;  // out, backs serialized_bytes
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable*);  // out, call once
};
struct PJRT_Executable_DeserializeAndLoad_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable* loaded_executable;  // out
  // null: the compile options stored in the serialized executable (appended at 0.52).
  const char* overridden_serialized_compile_options;
  size_t overridden_serialized_compile_options_size;
};
struct PJRT_ExecuteOptions {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  void** send_callbacks;
  void** recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void* context;
  const char* call_location;
  size_t num_tasks;
  int* task_ids;
  int64_t* incarnation_ids;
  void* multi_slice_config;  // 0.97
  bool use_major_to_minor_data_layout_for_callbacks;
  void* hlo_output_callbacks;
  size_t num_hlo_output_callbacks;
};
struct PJRT_LoadedExecutable_Execute_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_ExecuteOptions* options;
  PJRT_Buffer* const* const* argument_lists;  // [num_devices][num_args]
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer** const* output_lists;    // [num_devices][num_outputs], filled (out)
  PJRT_Event** device_complete_events;  // [num_devices], filled (out) when non-null
  PJRT_Device* execute_device;          // null: the compile-time device assignment
};
struct PJRT_Buffer_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
};
struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  size_t on_device_size_in_bytes;  // out
};
struct PJRT_Buffer_ToHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* src;
  void* host_layout;  // null: dense row-major
  void* dst;
  size_t dst_size;
  PJRT_Event* event;  // out
};

// ---- The function table. ----
using PJRT_Error_Destroy = void(PJRT_Error_Destroy_Args*);
using PJRT_Error_Message = void(PJRT_Error_Message_Args*);
template <class Args>
using Fn = PJRT_Error*(Args*);
using Unused = void*;  // a slot we never call

struct PJRT_Api {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Api_Version pjrt_api_version;

  PJRT_Error_Destroy* PJRT_Error_Destroy_;
  PJRT_Error_Message* PJRT_Error_Message_;
  Fn<PJRT_Error_GetCode_Args>* PJRT_Error_GetCode;

  Fn<PJRT_Plugin_Initialize_Args>* PJRT_Plugin_Initialize;
  Fn<PJRT_Plugin_Attributes_Args>* PJRT_Plugin_Attributes;

  Fn<PJRT_Event_Destroy_Args>* PJRT_Event_Destroy;
  Unused PJRT_Event_IsReady;
  Unused PJRT_Event_Error;
  Fn<PJRT_Event_Await_Args>* PJRT_Event_Await;
  Unused PJRT_Event_OnReady;

  Fn<PJRT_Client_Create_Args>* PJRT_Client_Create;
  Fn<PJRT_Client_Destroy_Args>* PJRT_Client_Destroy;
  Fn<PJRT_Client_PlatformName_Args>* PJRT_Client_PlatformName;
  Unused PJRT_Client_ProcessIndex;
  Fn<PJRT_Client_PlatformName_Args>* PJRT_Client_PlatformVersion;
  Unused PJRT_Client_Devices;
  Fn<PJRT_Client_AddressableDevices_Args>* PJRT_Client_AddressableDevices;
  Unused PJRT_Client_LookupDevice;
  Unused PJRT_Client_LookupAddressableDevice;
  Unused PJRT_Client_AddressableMemories;
  Fn<PJRT_Client_Compile_Args>* PJRT_Client_Compile;
  Unused PJRT_Client_DefaultDeviceAssignment;
  Fn<PJRT_Client_BufferFromHostBuffer_Args>* PJRT_Client_BufferFromHostBuffer;

  Fn<PJRT_DeviceDescription_Id_Args>* PJRT_DeviceDescription_Id;
  Unused PJRT_DeviceDescription_ProcessIndex;
  Unused PJRT_DeviceDescription_Attributes;
  Fn<PJRT_DeviceDescription_Kind_Args>* PJRT_DeviceDescription_Kind;
  Unused PJRT_DeviceDescription_DebugString;
  Fn<PJRT_DeviceDescription_Kind_Args>* PJRT_DeviceDescription_ToString;

  Fn<PJRT_Device_GetDescription_Args>* PJRT_Device_GetDescription;
  Unused PJRT_Device_IsAddressable;
  Unused PJRT_Device_LocalHardwareId;
  Unused PJRT_Device_AddressableMemories;
  Unused PJRT_Device_DefaultMemory;
  Fn<PJRT_Device_MemoryStats_Args>* PJRT_Device_MemoryStats;

  Unused PJRT_Memory_Id;
  Unused PJRT_Memory_Kind;
  Unused PJRT_Memory_DebugString;
  Unused PJRT_Memory_ToString;
  Unused PJRT_Memory_AddressableByDevices;

  Fn<PJRT_Executable_Destroy_Args>* PJRT_Executable_Destroy;
  Unused PJRT_Executable_Name;
  Unused PJRT_Executable_NumReplicas;
  Unused PJRT_Executable_NumPartitions;
  Fn<PJRT_Executable_NumOutputs_Args>* PJRT_Executable_NumOutputs;
  Unused PJRT_Executable_SizeOfGeneratedCodeInBytes;
  Unused PJRT_Executable_GetCostAnalysis;
  Unused PJRT_Executable_OutputMemoryKinds;
  Unused PJRT_Executable_OptimizedProgram;
  Fn<PJRT_Executable_Serialize_Args>* PJRT_Executable_Serialize;

  Fn<PJRT_LoadedExecutable_Destroy_Args>* PJRT_LoadedExecutable_Destroy;
  Fn<PJRT_LoadedExecutable_GetExecutable_Args>* PJRT_LoadedExecutable_GetExecutable;
  Unused PJRT_LoadedExecutable_AddressableDevices;
  Unused PJRT_LoadedExecutable_Delete;
  Unused PJRT_LoadedExecutable_IsDeleted;
  Fn<PJRT_LoadedExecutable_Execute_Args>* PJRT_LoadedExecutable_Execute;
  Fn<PJRT_Executable_DeserializeAndLoad_Args>* PJRT_Executable_DeserializeAndLoad;
  Unused PJRT_LoadedExecutable_Fingerprint;

  Fn<PJRT_Buffer_Destroy_Args>* PJRT_Buffer_Destroy;
  Unused PJRT_Buffer_ElementType;
  Unused PJRT_Buffer_Dimensions;
  Unused PJRT_Buffer_UnpaddedDimensions;
  Unused PJRT_Buffer_DynamicDimensionIndices;
  Unused PJRT_Buffer_GetMemoryLayout;
  Fn<PJRT_Buffer_OnDeviceSizeInBytes_Args>* PJRT_Buffer_OnDeviceSizeInBytes;
  Unused PJRT_Buffer_Device;
  Unused PJRT_Buffer_Memory;
  Unused PJRT_Buffer_Delete;
  Unused PJRT_Buffer_IsDeleted;
  Unused PJRT_Buffer_CopyToDevice;
  Fn<PJRT_Buffer_ToHostBuffer_Args>* PJRT_Buffer_ToHostBuffer;
  // Later slots are not used; a plugin's table must reach at least this far.
};

// The plugin entry point every PJRT plugin exports.
using GetPjrtApiFn = const PJRT_Api*();

static_assert(sizeof(void*) == 8 && sizeof(size_t) == 8, "PJRT declarations assume LP64");
static_assert(offsetof(PJRT_Api, PJRT_Error_Destroy_) == 40, "PJRT_Api header layout");
static_assert(offsetof(PJRT_Api, PJRT_Buffer_ToHostBuffer) == 40 + 70 * 8, "PJRT_Api slot count");
static_assert(sizeof(PJRT_Executable_Serialize_Args) == 56, "PJRT_Executable_Serialize_Args layout");
static_assert(sizeof(PJRT_Executable_DeserializeAndLoad_Args) == 64, "PJRT_Executable_DeserializeAndLoad_Args layout");
static_assert(sizeof(PJRT_ExecuteOptions) == 144, "PJRT_ExecuteOptions layout (0.97+)");

}  // namespace torch_tpu::pjrt::c
