// User ops with a registered lowering (torch_tpu.lowering.register_lowering) reach the lowering
// path through a direct PrivateUse1 kernel.
//
// The backend fallback already reaches every op without a kernel, but ops made with
// torch.library.custom_op carry a CompositeExplicitAutograd kernel (their Python
// implementation), which the dispatcher prefers over a backend fallback: a direct PrivateUse1
// kernel ranks above it.
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/check.h"
#include "exec/call.h"

namespace torch_tpu::exec {

void register_lowered_op(const std::string& qualname, const std::string& overload) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<torch::Library>> libraries;  // registrations live as long as the process
  static std::set<std::string> registered;
  std::lock_guard<std::mutex> lock(mu);
  std::string full = overload.empty() || overload == "default" ? qualname : qualname + "." + overload;
  if (!registered.insert(full).second) return;
  auto sep = qualname.find("::");
  TPU_CHECK_VALUE(sep != std::string::npos, "register_lowering: '", qualname, "' is not a qualified op name");
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, qualname.substr(0, sep),
                                              c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  const std::string name = full.substr(sep + 2);  // the dispatcher copies it
  lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&lowered_op_kernel>());
  libraries.push_back(std::move(lib));
}

}  // namespace torch_tpu::exec
