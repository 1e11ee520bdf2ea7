// The PJRT plugin loader (runtime/pjrt/plugin.h) without a plugin: version and layout checks
// with synthetic numbers, load errors, discovery, client options and the compile options bytes.
// Loading a real plugin is tested from Python (tests/pjrt), where one may be installed.
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/pjrt/client.h"
#include "runtime/pjrt/pjrt_runtime.h"
#include "runtime/pjrt/plugin.h"

namespace torch_tpu::pjrt {
namespace {

namespace fs = std::filesystem;

constexpr size_t kApi = sizeof(c::PJRT_Api);
constexpr size_t kVersion = sizeof(c::PJRT_Api_Version);

TEST(PjrtVersion, AcceptsTheDeclaredAndNewerMinors) {
  EXPECT_EQ(check_api_version(0, c::kDeclaredMinor, kApi, kVersion), "");
  EXPECT_EQ(check_api_version(0, c::kMinMinor, kApi, kVersion), "");
  EXPECT_EQ(check_api_version(0, 117, kApi + 66 * 8, kVersion), "");  // jax-cuda13-pjrt 0.12 reports 0.117
}

TEST(PjrtVersion, RejectsAnotherMajor) {
  std::string why = check_api_version(1, 0, kApi, kVersion);
  EXPECT_NE(why.find("1.0"), std::string::npos) << why;
  EXPECT_NE(why.find("major version 0"), std::string::npos) << why;
}

TEST(PjrtVersion, RejectsAnOlderMinor) {
  std::string why = check_api_version(0, c::kMinMinor - 1, kApi, kVersion);
  EXPECT_NE(why.find("older than the oldest supported"), std::string::npos) << why;
}

TEST(PjrtVersion, RejectsATableTooShortForTheSlotsWeCall) {
  std::string why = check_api_version(0, 105, kApi - 8, kVersion);
  EXPECT_NE(why.find("function table"), std::string::npos) << why;
}

TEST(PjrtVersion, RejectsABadVersionStruct) {
  std::string why = check_api_version(0, 105, kApi, 8);
  EXPECT_NE(why.find("PJRT_Api_Version"), std::string::npos) << why;
}

std::string load_error(const std::string& path) {
  try {
    Plugin::load(path);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(PjrtLoad, MissingFile) {
  std::string why = load_error("/nonexistent/pjrt_plugin.so");
  EXPECT_NE(why.find("/nonexistent/pjrt_plugin.so does not exist"), std::string::npos) << why;
}

TEST(PjrtLoad, NotASharedLibrary) {
  fs::path p = fs::temp_directory_path() / ("tpu_not_a_plugin_" + std::to_string(::getpid()) + ".so");
  std::ofstream(p) << "not an ELF file";
  std::string why = load_error(p.string());
  fs::remove(p);
  EXPECT_NE(why.find("cannot load PJRT plugin"), std::string::npos) << why;
}

TEST(PjrtLoad, LibraryWithoutGetPjrtApi) {
  // libc10 is certainly loaded and is certainly no plugin.
  Dl_info info{};
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info), 0);
  std::string why = load_error(info.dli_fname);
  EXPECT_NE(why.find("does not export GetPjrtApi"), std::string::npos) << why;
}

TEST(PjrtDiscovery, FindsAnInstalledPluginAndPrefersLibtpu) {
  fs::path root = fs::temp_directory_path() / ("tpu_pjrt_discovery_" + std::to_string(::getpid()));
  fs::create_directories(root / "a" / "jax_plugins" / "xla_cuda13");
  fs::create_directories(root / "b" / "libtpu");
  std::ofstream(root / "a" / "jax_plugins" / "xla_cuda13" / "xla_cuda_plugin.so") << "x";
  set_search_path({(root / "a").string()});
  auto found = discover_plugins();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], (root / "a" / "jax_plugins" / "xla_cuda13" / "xla_cuda_plugin.so").string());
  std::ofstream(root / "b" / "libtpu" / "libtpu.so") << "x";
  set_search_path({"", (root / "a").string(), (root / "b").string()});
  found = discover_plugins();
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0], (root / "b" / "libtpu" / "libtpu.so").string());
  set_search_path({});
  fs::remove_all(root);
}

TEST(PjrtDiscovery, NoPluginNamesWhatWasLookedFor) {
  set_search_path({"/nonexistent"});
  ::unsetenv("TORCH_TPU_PJRT_PLUGIN");
  try {
    plugin_path();
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    EXPECT_NE(why.find("TORCH_TPU_PJRT_PLUGIN"), std::string::npos) << why;
    EXPECT_NE(why.find("libtpu/libtpu.so"), std::string::npos) << why;
    EXPECT_NE(why.find("jax_plugins/xla_cuda13/xla_cuda_plugin.so"), std::string::npos) << why;
  }
  ::setenv("TORCH_TPU_PJRT_PLUGIN", "/nonexistent/libtpu.so", 1);
  try {
    plugin_path();
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    EXPECT_NE(why.find("TORCH_TPU_PJRT_PLUGIN=/nonexistent/libtpu.so does not exist"), std::string::npos) << why;
  }
  ::unsetenv("TORCH_TPU_PJRT_PLUGIN");
  set_search_path({});
}

TEST(PjrtClientOptions, ParsesTypedValues) {
  auto opts = parse_client_options("preallocate=false,memory_fraction=0.5,num_nodes=2,allocator=platform,");
  ASSERT_EQ(opts.size(), 4u);
  EXPECT_EQ(opts[0].kind, ClientOption::Kind::Bool);
  EXPECT_FALSE(opts[0].b);
  EXPECT_EQ(opts[1].kind, ClientOption::Kind::Float);
  EXPECT_FLOAT_EQ(opts[1].f, 0.5f);
  EXPECT_EQ(opts[2].kind, ClientOption::Kind::Int);
  EXPECT_EQ(opts[2].i, 2);
  EXPECT_EQ(opts[3].kind, ClientOption::Kind::String);
  EXPECT_EQ(opts[3].s, "platform");
  EXPECT_TRUE(parse_client_options("").empty());
  EXPECT_THROW(parse_client_options("novalue"), c10::ValueError);
}

TEST(PjrtCompileOptions, OneReplicaOnePartition) {
  // CompileOptionsProto{executable_build_options(3){num_replicas(4)=1, num_partitions(5)=1},
  //                     compile_portable_executable(4)=true}.
  EXPECT_EQ(compile_options_proto(), std::string("\x1a\x04\x20\x01\x28\x01\x20\x01", 8));
}

}  // namespace
}  // namespace torch_tpu::pjrt
